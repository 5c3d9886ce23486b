"""How fast, and in how much memory, benchmark/analyze.py reads a grid of the Atari-10 N_envs study's shape.

    python benchmark/speed/analysis_throughput.py --scale 0.0025 0.01 --out /tmp/synthetic

Writes a synthetic grid with the shape of `runners/atari10_nenvs.sh` at the paper's size -- 10 games x 5 seeds x
(N_envs 1..64 at 128 steps, at a fixed batch of 1024, and 8 envs at 256/512/1024 steps: 16 configs, 800 runs),
100M steps per run, one record per iteration for each of
11 per-iteration tags, an episodic return every 8 iterations and the 6 dynamics/ tags every 10 -- but with only
--scale of each run's iterations (the full grid is ~1.2 billion records, ~60 GB of event files). Then runs the
analysis as a user would (a separate process, --jobs workers) and reports records/s, wall time and peak memory
(the largest process, and main + jobs x the largest worker as a bound), and extrapolates the wall time to the full
grid at the measured rate. Event records are framed, serialised and checksummed as TensorBoard's writer does them (the
analysis checks every record's CRCs). records/s is the grid's records over the time the analysis took to read them,
whatever it skipped.
"""
import argparse
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import google_crc32c
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2

ROOT = Path(__file__).resolve().parents[2]
GAMES = ["Amidar-v5", "Bowling-v5", "Frostbite-v5", "KungFuMaster-v5", "Riverraid-v5", "BattleZone-v5", "DoubleDunk-v5",
         "NameThisGame-v5", "Phoenix-v5", "Qbert-v5"]
PER_ITERATION = ["charts/learning_rate", "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
                 "losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "charts/SPS", "charts/ddr", "charts/kl"]
DYNAMICS = ["dynamics/feature_rank", "dynamics/dormant_percent", "dynamics/weight_norm", "dynamics/grad_kurtosis",
            "dynamics/ess_percent", "dynamics/policy_variance"]


def configs(budget, steps, batch, nenvs, base_envs=8, rollouts=(256, 512, 1024)):
    """(num_envs, num_steps, iterations) of the grid: Fig. 1a's fixed batch, Fig. 1b's N_envs arm and rollout arm
    (8 x 128, in all three, once)."""
    grid = {(n, steps) for n in nenvs} | {(n, batch // n) for n in nenvs} | {(base_envs, t) for t in rollouts}
    return sorted((n, t, budget // (n * t)) for n, t in grid)


def masked_crc(data):
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(event):
    data = event.SerializeToString()
    length = struct.pack("<Q", len(data))
    return length + masked_crc(length) + data + masked_crc(data)


def write_run(path, batch, iterations, rng):
    """One run's event file: per iteration the 11 tags, a return every 8 iterations and dynamics every 10;
    (records, records of the tags the analysis reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks, count, wanted = [], 0, 0
    with open(path, "wb") as f:
        for i in range(1, iterations + 1):
            step = i * batch
            tags = PER_ITERATION + (["charts/episodic_return"] if i % 8 == 0 else []) + (DYNAMICS if i % 10 == 0 else [])
            values = rng.random(len(tags))
            for tag, value in zip(tags, values):
                event = event_pb2.Event(wall_time=time.time(), step=step,
                                        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))
                chunks.append(record(event))
            count += len(tags)
            wanted += len(tags) - len(PER_ITERATION)
            if len(chunks) > 20000:
                f.write(b"".join(chunks))
                chunks = []
        f.write(b"".join(chunks))
    return count, wanted


def write_grid(out, scale, opts):
    """The synthetic grid in launch.py's layout; (records written, records of the tags the analysis reads)."""
    shutil.rmtree(out, ignore_errors=True)
    rng, total, wanted = np.random.default_rng(0), 0, 0
    for env in GAMES[:opts.games]:
        for seed in range(1, opts.seeds + 1):
            for n, t, iterations in configs(opts.budget, opts.num_steps, opts.batch, opts.nenvs):
                name = f"ppo_atari_envpool__{env}__num-envs={n}__num-steps={t}__s{seed}"
                d = out / "runs" / name
                count, reads = write_run(d / "runs" / f"{env}__run" / f"events.out.tfevents.{1700000000 + seed}.synthetic",
                                         n * t, max(1, int(iterations * scale)), rng)
                total, wanted = total + count, wanted + reads
                command = {"name": name, "id": name, "script": "ppo_atari_envpool", "env": env, "env_field": "env_id",
                           "seed": seed, "flags": {"--num-envs": str(n), "--num-steps": str(t)}, "argv": [],
                           "resolved": {"env_id": env, "seed": seed, "num_envs": n, "num_steps": t, "total_timesteps": opts.budget},
                           "batch_size": n * t}
                (d / "command.json").write_text(json.dumps(command))
                (d / "done.json").write_text("{}")
    return total, wanted


def full_records(opts):
    per = len(PER_ITERATION) + 1 / 8 + len(DYNAMICS) / 10
    return int(opts.games * opts.seeds * sum(it for _, _, it in configs(opts.budget, opts.num_steps, opts.batch, opts.nenvs)) * per)


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, nargs="+", default=[0.0025, 0.01], help="share of each run's iterations written")
    parser.add_argument("--out", default="/tmp/analysis_throughput", help="where the synthetic grids go (removed after)")
    parser.add_argument("--games", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=100_000_000)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--nenvs", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="analysis workers")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic grids")
    opts = parser.parse_args()
    if not all(0 < s <= 1 for s in opts.scale):
        parser.error("--scale values must lie in (0, 1]")
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    print(f"full grid: {full_records(opts):,} records; machine: {machine}")
    rows = []
    for scale in opts.scale:
        out = Path(opts.out) / f"scale_{scale}"
        t = time.time()
        written, wanted = write_grid(out, scale, opts)
        size = sum(p.stat().st_size for p in out.rglob("events.out.*"))
        print(f"scale {scale}: wrote {written:,} records ({size / 2**20:.0f} MiB) in {time.time() - t:.0f} s", flush=True)
        t = time.time()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "analyze.py"), str(out), "--jobs", str(opts.jobs),
                                 "--reps", "200"], capture_output=True, text=True)
        seconds = time.time() - t
        if result.returncode:
            raise SystemExit(result.stderr[-3000:])
        read = re.search(r"read (\d+) values from [\d.]+ MiB of event files of \d+ runs in ([\d.]+) s", result.stdout)
        if not read or int(read.group(1)) != wanted:
            raise SystemExit(f"the analysis did not read every value of its tags ({wanted} written):\n{result.stdout[-2000:]}")
        # analyze.py prints milliseconds: a tiny grid can read in under one, so the rate is bounded by that resolution
        read_seconds = max(float(read.group(2)), 1e-3)
        largest = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2**20  # KiB -> GiB
        rate = written / read_seconds
        rest = seconds - read_seconds  # statistics, figures and report: grows with configs and points, not records
        rows.append({"scale": scale, "records": written, "read_seconds": round(read_seconds, 3), "records_per_s": round(rate),
                     "rest_seconds": round(rest, 1), "largest_process_gib": round(largest, 2),
                     "bound_gib": round(largest * (1 + opts.jobs), 2),
                     "full_grid_minutes": round((full_records(opts) / rate + rest) / 60, 1)})
        print(f"scale {scale}: read in {read_seconds:.3f} s ({rate:,.0f} records/s), {rest:.1f} s for the rest, largest process "
              f"{largest:.2f} GiB (bound {largest * (1 + opts.jobs):.2f} GiB); full grid at this rate: "
              f"{rows[-1]['full_grid_minutes']} min", flush=True)
        if not opts.keep:
            shutil.rmtree(out, ignore_errors=True)
    if len(rows) > 1:  # the marginal rate between the two largest scales leaves out per-run and start-up costs
        a, b = rows[-2], rows[-1]
        if b["read_seconds"] - a["read_seconds"] < 0.01:  # within the timer's resolution: no rate to extrapolate
            print(f"marginal rate between scales {a['scale']} and {b['scale']}: not resolved (read times "
                  f"{a['read_seconds']} and {b['read_seconds']} s); use larger --scale values")
        else:
            marginal = (b["records"] - a["records"]) / (b["read_seconds"] - a["read_seconds"])
            full = b["read_seconds"] + (full_records(opts) - b["records"]) / marginal + b["rest_seconds"]
            print(f"marginal rate between scales {a['scale']} and {b['scale']}: {marginal:,.0f} records/s; "
                  f"full grid: {full / 60:.1f} min")
    print(json.dumps({"machine": machine, "jobs": opts.jobs, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
