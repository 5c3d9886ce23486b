"""Does a script log the same numbers as it did at a git revision? Runs the revision's copy and the working copy with
the same flags, one after the other, each alone in a temporary directory, and compares every TensorBoard scalar of
every run (tag, step, value, to the last bit) but the wall-time ones, and the rows of the hyperparameters text.

    python benchmark/speed/same_numbers.py --script ppo_atari_envpool --revision 4d1e4e7 -- --num-envs 4 --num-steps 32 \\
        --total-timesteps 640

Exit 0 when every number is the same, 1 when one differs (each difference printed), 2 on bad input. A run that
fails fails the comparison. Several flag sets: repeat the command (the output says which flags it ran)."""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmark.common import describe_machine, read_tensorboard_run, run_copy, run_dirs, script_at  # noqa: E402

# wall times, never the same twice
WALL_TIME_TAGS = ("charts/SPS", "charts/first_iteration_seconds", "charts/train_seconds", "charts/compile_seconds")


def logged(workdir):
    """{run's name without its time stamp: ({tag: [(step, value)]}, {hyperparameters row})} of a working directory."""
    runs = {}
    for run_dir in run_dirs(workdir):
        scalars, texts = read_tensorboard_run(run_dir)
        name = run_dir.name.rsplit("__", 1)[0]
        rows = set()
        for tag, values in texts.items():
            if "hyperparameters" in tag:
                rows |= {row for text in values for row in text.splitlines()[2:]}
        runs[name] = ({tag: [(e.step, e.value) for e in events] for tag, events in scalars.items()
                       if tag not in WALL_TIME_TAGS}, rows)
    return runs


def compare(before, after):
    """The differences between two logged() reads, as lines (none: the same numbers)."""
    lines = []
    if set(before) != set(after):
        return [f"runs differ: {sorted(before)} before, {sorted(after)} after"]
    for name in sorted(before):
        (old, old_rows), (new, new_rows) = before[name], after[name]
        for tag in sorted(set(old) | set(new)):
            if tag not in new or tag not in old:
                lines.append(f"{name}: {tag} only {'before' if tag in old else 'after'}")
            elif [s for s, _ in old[tag]] != [s for s, _ in new[tag]]:
                lines.append(f"{name}: {tag} at other steps")
            else:
                for (step, a), (_, b) in zip(old[tag], new[tag]):
                    if a != b and not (a != a and b != b):  # nan logged on both sides is the same
                        lines.append(f"{name}: {tag} at step {step}: {a!r} before, {b!r} after")
        for row in sorted(old_rows ^ new_rows):
            lines.append(f"{name}: hyperparameters row {row!r} only {'before' if row in old_rows else 'after'}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True, help="a script of cleanrl_scale/, without .py")
    parser.add_argument("--revision", required=True, help="the git revision to compare with")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds each run may take")
    parser.add_argument("flags", nargs="*", help="the script's flags, after --")
    opts = parser.parse_args()
    if not (Path(__file__).resolve().parents[2] / "cleanrl_scale" / f"{opts.script}.py").is_file():
        parser.error(f"--script: no cleanrl_scale/{opts.script}.py")
    revision = subprocess.run(["git", "rev-parse", "--short", opts.revision], capture_output=True, text=True)
    if revision.returncode:
        parser.error(f"--revision: {opts.revision!r} is not a git revision here")
    print(f"{opts.script} at {revision.stdout.strip()} against the working copy, flags: {' '.join(opts.flags)}")
    print(f"machine: {describe_machine()}")
    reads = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("before", "after"):
            workdir = Path(tmp) / side
            workdir.mkdir()
            source = script_at(opts.script, opts.revision, tmp) if side == "before" else None
            result = run_copy(opts.script, opts.flags, workdir, timeout=opts.timeout, source=source)
            if result.returncode:
                print(f"{side}: the run failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
                sys.exit(1)
            reads.append(logged(workdir))
    differences = compare(*reads)
    values = sum(len(v) for run in reads[0].values() for v in run[0].values())
    tags = sum(len(run[0]) for run in reads[0].values())
    for line in differences:
        print(line)
    print(f"{'SAME' if not differences else 'DIFFERENT'}: {len(reads[0])} runs, {tags} tags, {values} values "
          f"(wall-time tags {', '.join(WALL_TIME_TAGS)} left out), {len(differences)} differences")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
