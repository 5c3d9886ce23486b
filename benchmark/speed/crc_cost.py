"""What checking every record's checksums costs the analysis's reader (benchmark/events.py): one synthetic event file
in the scripts' layout (benchmark/speed/analysis_throughput.py's writer: 11 tags an iteration, a return every 8
iterations, the dynamics/ tags every 10), read with and without the checks, alternately, --reps times each, in this
one process. Prints the machine, the file's size and records, and each read's seconds; the result is the ratio of the
medians.

    python benchmark/speed/crc_cost.py --iterations 150000 --reps 7
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmark.common import describe_machine  # noqa: E402
from benchmark.events import read_event_file  # noqa: E402
from benchmark.speed.analysis_throughput import DYNAMICS, write_run  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=150_000, help="iterations of the synthetic run")
    parser.add_argument("--reps", type=int, default=7, help="reads of each kind")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "events.out.tfevents.0.synthetic"
        records, _ = write_run(path, 128, opts.iterations, np.random.default_rng(0))
        tags = ["charts/episodic_return"]
        print(f"{describe_machine()}; {path.stat().st_size / 2**20:.0f} MiB, {records:,} records", flush=True)
        times = {True: [], False: []}
        for _ in range(opts.reps):
            for check in (True, False):
                started = time.perf_counter()
                found, _ = read_event_file(path, tags, prefixes=("dynamics/",), check=check)
                times[check].append(time.perf_counter() - started)
        assert sorted(found) == sorted(tags + DYNAMICS)
    for check in (True, False):
        print(f"check={check}: " + " ".join(f"{t:.3f}" for t in times[check]) + f" s; median {statistics.median(times[check]):.3f} s")
    print(f"ratio of the medians (checked / unchecked): {statistics.median(times[True]) / statistics.median(times[False]):.2f}")


if __name__ == "__main__":
    main()
