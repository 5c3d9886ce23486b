"""How often claims 2-4's plateau premise decides at 5 seeds, simulated at the spread the published runs measured.

    python benchmark/plateau_power.py                      # reads benchmark/reproduce/claim_{2,3,4}/seeds_6-10/'s per-seed tables
    python benchmark/plateau_power.py --sims 20000 --seeds 5

The premise (`stays_below` in claims.py): per seed, the line fitted to the score over the last half of training,
extended from the run's last step by as many steps as the run took (the projected score); the strong arm's above the
weak arm's, by Welch's t at the claim's Bonferroni level. For each premise this measures the two arms' projected
scores' standard deviations on the published runs (seeds 6-10), then draws `--sims` grids of `--seeds` seeds a side
from normals with those deviations and a true difference of the means (in units of the larger deviation), and counts
how often the premise comes out supported, contradicted, undecided. Beside it, the two premises it replaced, each at its
own measured spread: the weak arm's gain from the third quarter of training to the last under 10% (one-sample t) for
a truly flat weak arm (gain 0) and one gaining 5%; and the strong arm's late slope above the weak arm's where both
arms are flat. The measured means are printed but only the spreads are simulated, so the power curve does not depend
on these runs' outcome.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark import claims  # noqa: E402
from benchmark.common import OneLineParser  # noqa: E402

# (claim, its conditions counted for Bonferroni, published tables' prefix, weak where, strong where, names)
PREMISES = [
    (2, 6, "com_eps", {"ewma-com": 8}, {"ewma-com": 256}, "COM 8 below COM 256"),
    (2, 6, "eps", {"clip-coef": 0.8}, {"clip-coef": 0.2}, "epsilon 0.8 below epsilon 0.2"),
    (3, 5, "com_eps", {"ewma-com": 8}, {"ewma-com": 256}, "COM 8 below COM 256"),  # every claim's seeds 6-10: in seeds_6-10/
    (4, 4, "resume_all", {"grid": "plateau_8"}, {"grid": "plateau_256"}, "COM 8 below COM 256 before the switch"),
]
SHIFTS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)  # true difference of the slopes' means, in the larger SD


def welch_low_high(a, b, level):
    """Welch's interval of mean(a) - mean(b) over the last axis, vectorised over the first."""
    na, nb = a.shape[1], b.shape[1]
    va, vb = a.var(1, ddof=1) / na, b.var(1, ddof=1) / nb
    se = np.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    q = scipy.stats.t.ppf(1 - (1 - level) / 2, dof)
    est = a.mean(1) - b.mean(1)
    return est - q * se, est + q * se


def rates(low, high, margin=0.0):
    return (low > margin).mean(), (high < margin).mean()


def main(argv=None):
    parser = OneLineParser(prog="plateau_power.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--published", default=str(Path(__file__).parent / "reproduce"), help="the claims' published folder")
    parser.add_argument("--sims", type=int, default=20000, help="simulated grids per row (default 20000)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds a side (default 5, the runners')")
    opts = parser.parse_args(argv)
    if opts.sims < 100:
        parser.error(f"--sims must be at least 100 (got {opts.sims})")
    if opts.seeds < 2:
        parser.error(f"--seeds must be at least 2: Welch's t needs 2 a side (got {opts.seeds})")
    rng = np.random.default_rng(0)
    print(f"{opts.sims} simulated grids per row, {opts.seeds} seeds a side; Welch's t at the claim's Bonferroni level")
    for claim, m, prefix, weak, strong, name in PREMISES:
        claims.Tables.published = Path(opts.published) / f"claim_{claim}" / "seeds_6-10"
        try:
            tables = claims.Tables(Path(prefix) / "analysis")
            slow, fast = claims.late_lines(tables, **weak), claims.late_lines(tables, **strong)
        finally:
            claims.Tables.published = None
        level = 1 - claims.ALPHA / m
        weak_at, strong_at = (lines[:, 1] + lines[:, 0] * lines[:, 2] for lines in (slow, fast))
        sd_slow, sd_fast = weak_at.std(ddof=1), strong_at.std(ddof=1)
        unit = max(sd_slow, sd_fast)
        print(f"\nclaim {claim}, {name} (level {level:.4f}): measured projected scores, weak {weak_at.mean():.2f} "
              f"(SD {sd_slow:.2f}; its slope {slow[:, 0].mean():+.2f} per 1M steps), strong {strong_at.mean():.2f} "
              f"(SD {sd_fast:.2f}; slope {fast[:, 0].mean():+.2f}); difference {strong_at.mean() - weak_at.mean():.2f} = "
              f"{(strong_at.mean() - weak_at.mean()) / unit:.2f} x the larger SD ({unit:.2f})")
        print("  true difference (x SD)   supported   contradicted   undecided")
        for shift in SHIFTS:
            a = rng.normal(shift * unit, sd_fast, (opts.sims, opts.seeds))
            b = rng.normal(0.0, sd_slow, (opts.sims, opts.seeds))
            s, c = rates(*welch_low_high(a, b, level))
            print(f"  {shift:>22.1f}   {s:>9.1%}   {c:>12.1%}   {1 - s - c:>9.1%}")
        flat_a = rng.normal(0.0, fast[:, 0].std(ddof=1), (opts.sims, opts.seeds))  # both arms flat: equal true slopes
        flat_b = rng.normal(0.0, slow[:, 0].std(ddof=1), (opts.sims, opts.seeds))
        s, c = rates(*welch_low_high(flat_a, flat_b, level))
        print(f"  the premise replaced second (strong slope above weak), both arms flat, slopes' SDs "
              f"{fast[:, 0].std(ddof=1):.2f} and {slow[:, 0].std(ddof=1):.2f}: supported {s:.1%}, contradicted {c:.1%}, "
              f"undecided {1 - s - c:.1%}")
        if claim == 2 or claim == 4:  # the premise replaced, at the same level, from the gains' spread
            where = weak
            claims.Tables.published = Path(opts.published) / f"claim_{claim}" / "seeds_6-10"
            try:
                tables = claims.Tables(Path(prefix) / "analysis")
                gains = []
                for x, v in tables.curves(claims.score_tag(tables), **where).values():
                    end, span = x.max(), x.max() - x.min()
                    last, third = v[x >= end - span / 4].mean(), v[(x >= end - span / 2) & (x < end - span / 4)].mean()
                    gains.append((last - third) / max(abs(third), 1e-8))
            finally:
                claims.Tables.published = None
            sd = np.std(gains, ddof=1)
            for true_gain in (0.0, 0.05):
                g = rng.normal(true_gain, sd, (opts.sims, opts.seeds))
                d = 0.1 - g
                q = scipy.stats.t.ppf(1 - (1 - level) / 2, opts.seeds - 1)
                half = q * d.std(1, ddof=1) / np.sqrt(opts.seeds)
                s, c = rates(d.mean(1) - half, d.mean(1) + half)
                print(f"  the premise replaced first (gain under 10%), gains' SD {sd:.2f}, true gain {true_gain:.0%}: "
                      f"supported {s:.1%}, contradicted {c:.1%}, undecided {1 - s - c:.1%}")


if __name__ == "__main__":
    main()
