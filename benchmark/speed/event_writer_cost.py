"""What a TensorBoard writer costs a JAX script: its import and its writes.

    python benchmark/speed/event_writer_cost.py      # tensorboardX is left out unless installed (pip install tensorboardX==2.6.5)
    python benchmark/speed/event_writer_cost.py --tags 30 --iterations 2000 --repeats 5

Three writers of the same scalars, each in a fresh interpreter per repeat:
- `scripts`: the JAX scripts' own writer (ppo_ewma_jax.py's SummaryWriter): tensorboard's EventFileWriter, every
  tag of an iteration in one event;
- `tensorboardX`: tensorboardX.SummaryWriter.add_scalar, an event a tag;
- `torch`: torch.utils.tensorboard.SummaryWriter.add_scalar (the torch scripts' and CleanRL's), an event a tag.
Per writer: the seconds its import takes (what a run pays at start; tensorboardX imports torch where torch is
installed) and the microseconds `--tags` scalars take to write per iteration (the host's time per iteration: a JAX
script's iterations take milliseconds on a GPU). Every writer's files are read back through TensorBoard's reader and
must hold the same values. Prints each repeat and the medians, with the ratios to `scripts`.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import describe_machine, read_tensorboard_run  # noqa: E402

IMPORTS = {
    "scripts": "from tensorboard.summary.writer import event_file_writer\n"
               "from tensorboard.compat.proto.event_pb2 import Event\n"
               "from tensorboard.compat.proto.summary_pb2 import Summary",
    "tensorboardX": "from tensorboardX import SummaryWriter",
    "torch": "from torch.utils.tensorboard import SummaryWriter",
}
WRITES = {  # `tags`, `values` (an iteration's), `step`; the writer is `w`
    "scripts": ("w = event_file_writer.EventFileWriter(logdir)",
                "w.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[\n"
                "    Summary.Value(tag=t, simple_value=v) for t, v in zip(tags, values)])))"),
    "tensorboardX": ("w = SummaryWriter(logdir)", "for t, v in zip(tags, values): w.add_scalar(t, v, step)"),
    "torch": ("w = SummaryWriter(logdir)", "for t, v in zip(tags, values): w.add_scalar(t, v, step)"),
}
PROGRAM = """import time, json, sys
start = time.perf_counter()
try:
{imports}
except ModuleNotFoundError:
    sys.exit(3)
imported = time.perf_counter() - start
logdir, n_tags, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tags = [f"losses/tag_{{i}}" for i in range(n_tags)]
{open}
start = time.perf_counter()
for step in range(iterations):
    values = [step + i / n_tags for i in range(n_tags)]
{write}
written = time.perf_counter() - start
w.close()
print(json.dumps({{"import_s": imported, "write_us": 1e6 * written / iterations, "torch": "torch" in sys.modules}}))
"""


def measure(writer, opts, logdir):
    """One fresh interpreter: its import seconds, microseconds per iteration, and whether torch got imported."""
    open_, write = WRITES[writer]
    program = PROGRAM.format(imports="    " + IMPORTS[writer].replace("\n", "\n    "), open=open_, write="    " + write.replace("\n", "\n    "))
    result = subprocess.run([sys.executable, "-c", program, logdir, str(opts.tags), str(opts.iterations)],
                            capture_output=True, text=True)
    if result.returncode == 3:
        return None  # not installed
    if result.returncode:
        raise SystemExit(f"{writer}: {result.stderr.strip().splitlines()[-1]}")
    return json.loads(result.stdout)


def read_back(logdir):
    scalars, _ = read_tensorboard_run(logdir)
    return {tag: [(e.step, e.value) for e in events] for tag, events in scalars.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tags", type=int, default=30, help="scalars per iteration (ppo_ewma_jax.py logs 20-30)")
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    if min(opts.tags, opts.iterations, opts.repeats) < 1:
        parser.error("--tags, --iterations and --repeats must be at least 1")
    rows = {writer: [] for writer in WRITES}
    for repeat in range(opts.repeats):  # the writers in turn, so that a slow stretch of the host hits each
        files = {}
        for writer in rows:
            logdir = tempfile.mkdtemp(prefix=f"{writer}_")
            row = measure(writer, opts, logdir)
            if row is None:
                print(f"{writer}: not installed, left out (pip install tensorboardX==2.6.5)", flush=True)
                continue
            rows[writer].append(row)
            files[writer] = read_back(logdir)
            print(f"repeat {repeat} {writer}: {row}", flush=True)
        if any(values != files["scripts"] for values in files.values()):
            raise SystemExit("the writers' event files hold different values")
        rows = {writer: r for writer, r in rows.items() if r}
    median = {w: {k: statistics.median(r[k] for r in rows[w]) for k in ("import_s", "write_us")} for w in rows}
    print(f"medians of {opts.repeats} ({opts.tags} scalars an iteration, {opts.iterations} iterations; "
          f"{describe_machine()}); the same values read back from every writer's files:")
    for writer, m in median.items():
        print(f"  {writer:12s} import {m['import_s']:.2f} s (x{m['import_s'] / median['scripts']['import_s']:.1f}), "
              f"{m['write_us']:.0f} us an iteration (x{m['write_us'] / median['scripts']['write_us']:.1f})"
              + (", imports torch" if rows[writer][0]["torch"] else ""))


if __name__ == "__main__":
    main()
