"""ppo_kinetix_sfl.py: what each SFL buffer refresh moves between devices, measured and extrapolated to Table 3.

Measured: the collectives XLA compiles into the script's sharded `sfl_update` on --devices forced host
devices (a tiny config: --num-envs envs, as many candidates, buffer --buffer-size), read from the
compiled HLO. The refresh gathers (score, p, id) of every device's local top K (three 4-byte values
per level) and then assembles the K winning levels with one psum. The all-gather must equal the
formula below and the psum must not exceed it (XLA drops the psum of level fields it proves
constant), which this script checks before extrapolating; the extrapolation is then an upper bound.

Extrapolated by formula to Table 3's presets at App. D's 8192 envs per GPU (D = envs / 8192, at
least 1), with the level bytes of --preset-size (Kinetix's size-l level by default):
  gather  = D x min(K, N / D) x 12 bytes            (all-gather result on every device)
  winners = K x level bytes                          (psum result; a ring all-reduce moves ~2 (D - 1) / D of it)
  before  = D x min(K, N / D) x level bytes          (the all-gather of every device's local top-K levels it replaced)

    python benchmark/speed/sfl_gather_bytes.py --devices 4
"""
import argparse
import os
import re
import sys


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=4, help="forced host devices of the measurement")
    parser.add_argument("--env-size", default="s", help="Kinetix size of the measured tiny config")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--buffer-size", type=int, default=4)
    parser.add_argument("--preset-size", default="l", help="Kinetix size whose level bytes the presets are extrapolated with")
    parser.add_argument("--hlo", help="also write the compiled HLO of the measured sfl_update to this file")
    return parser.parse_args()


OPTS = parse_args()
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={OPTS.devices}"  # before jax starts

from functools import partial  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import jax_machine, load_script  # noqa: E402

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
               "s64": 8, "u64": 8, "f64": 8}


def shape_bytes(text):
    """Bytes of every array type `f32[4,10]` in an HLO type string."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", text):
        if dtype in DTYPE_BYTES:
            total += DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
    return total


def collective_bytes(hlo):
    """{op: total result bytes} of the all-gathers and all-reduces of a compiled HLO module."""
    found = {"all-gather": 0, "all-reduce": 0}
    for line in hlo.splitlines():
        for op in found:
            match = re.search(rf"=\s*(.*?)\s+{op}(-start)?\(", line)
            if match:
                found[op] += shape_bytes(match.group(1))
    return found


def level_bytes(module, size):
    """Bytes of one random level of this Kinetix size (shapes only, nothing compiled)."""
    args = module.resolve_args(module.RunArgs(env_size=size, model="mlp", num_envs=2, sfl_num_candidates=2, sfl_buffer_size=1,
                                           num_minibatches=1, filter_levels=False), num_devices=1)
    env = module.make_env(args)
    level = jax.eval_shape(lambda key: env.sample_levels(key, 1), jax.random.PRNGKey(0))
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(level))


def main():
    module = load_script("ppo_kinetix_sfl")
    d, n, k = OPTS.devices, OPTS.num_envs, OPTS.buffer_size
    args = module.resolve_args(module.RunArgs(env_size=OPTS.env_size, model="mlp", num_envs=n, num_steps=4, num_minibatches=1,
                                           sfl_num_candidates=n, sfl_buffer_size=k, sfl_rollout_length=4,
                                           filter_levels=False, eval_every=0))
    assert args.num_devices == d, f"{args.num_devices} devices visible, asked for {d}"
    env = module.make_env(args)
    init, _, sfl_update, _, _ = module.make_train(args, env)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    shard = partial(jax.shard_map, mesh=mesh, check_vma=False)
    shared = jax.jit(shard(init, in_specs=P(), out_specs=P()))(jax.random.PRNGKey(0))
    hlo = jax.jit(shard(sfl_update, in_specs=(P(), P()), out_specs=P())).lower(shared, jax.random.PRNGKey(1)).compile().as_text()
    if OPTS.hlo:
        with open(OPTS.hlo, "w") as f:
            f.write(hlo)
    measured = collective_bytes(hlo)
    level = level_bytes(module, OPTS.env_size)
    k_local = min(k, n // d)
    expected = {"all-gather": d * k_local * 12, "all-reduce": k * level}
    print(f"measured on {d} forced devices ({jax_machine()}), size {OPTS.env_size} ({level:,} bytes per level), "
          f"{n} candidates, K = {k}:")
    for op in measured:
        print(f"  {op}: {measured[op]:,} bytes compiled, formula {expected[op]:,}")
    if measured["all-gather"] != expected["all-gather"] or not 0 < measured["all-reduce"] <= expected["all-reduce"]:
        raise SystemExit("the compiled collectives do not match the formula: nothing extrapolated")

    per_level = level_bytes(module, OPTS.preset_size)
    print(f"\nTable 3's presets, size {OPTS.preset_size} ({per_level:,} bytes per level), 8192 envs per GPU:")
    print("| preset | GPUs | N | K | gather (score, p, id) | K winning levels (psum, at most) | before: all-gather of D x K levels |")
    print("|---|---|---|---|---|---|---|")
    for name, preset in module.SFL_PRESETS.items():
        gpus = max(1, preset["num_envs"] // 8192)
        top = min(preset["sfl_buffer_size"], preset["sfl_num_candidates"] // gpus)
        gather, winners, before = gpus * top * 12, preset["sfl_buffer_size"] * per_level, gpus * top * (per_level + 12)
        print(f"| {name} | {gpus} | {preset['sfl_num_candidates']:,} | {preset['sfl_buffer_size']:,} | {gather / 2**20:,.2f} MiB | "
              f"{winners / 2**20:,.1f} MiB | {before / 2**30:,.2f} GiB |")


if __name__ == "__main__":
    main()
