"""A grid's TensorBoard logs, read for the analysis (benchmark/analyze.py): only the wanted tags, straight from the
event files' bytes; a run's attempts (a run resumed from a checkpoint writes a new TensorBoard run) merged; one run
summarised (its final and best score, its median DDR and its curves downsampled), in a worker process of its own."""
import json
import mmap
import os
import struct
from array import array
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2

TRAIN_SECONDS = "charts/train_seconds"  # the training clock the JAX scripts log, carried over resumptions
DYNAMICS = "dynamics/"
LENGTH, FLOAT = struct.Struct("<Q"), struct.Struct("<f")


def read_event_file(path, tags, prefixes=(), fast=True):
    """({tag: (steps int64 array, values float64 array)}, bytes read) of the wanted scalars of one event file.

    An event file is a sequence of records (8-byte length, 4-byte CRC, an Event proto, 4-byte CRC). The fast path
    finds the wanted tags' bytes in the whole file and reads each scalar event around them (`_scalar_at`); if any
    occurrence is not exactly a one-value `simple_value` event framed as a record, the file is read record by
    record instead, parsing (with TensorBoard's protobuf) only the records that contain a wanted tag's bytes. CRCs
    are not checked (TensorBoard's own reader checks them, in pure Python); a truncated last record (a
    killed run) is dropped."""
    keys = [t.encode() for t in tags] + [p.encode() for p in prefixes]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return {}, 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            found = _find_scalars(buf, keys, tags, prefixes) if fast else None
            if found is None:
                found = _walk_records(buf, keys, tags, prefixes)
    return {tag: (np.frombuffer(s, np.int64), np.frombuffer(v, np.float64)) for tag, (s, v) in found.items()}, size


def _walk_records(buf, keys, tags, prefixes):
    found, size, pos, parse, find = {}, len(buf), 0, event_pb2.Event.FromString, buf.find
    while pos + 12 <= size:
        (n,) = LENGTH.unpack_from(buf, pos)
        start, pos = pos + 12, pos + 16 + n
        if pos > size:
            break
        for key in keys:
            if find(key, start, start + n) != -1:
                break
        else:
            continue
        event = parse(buf[start:start + n])
        for value in event.summary.value:
            if value.tag in tags or value.tag.startswith(prefixes):
                number = value.simple_value if value.HasField("simple_value") else _tensor_value(value.tensor)
                steps, values = found.setdefault(value.tag, (array("q"), array("d")))
                steps.append(event.step)
                values.append(number)
    return found


def _find_scalars(buf, keys, tags, prefixes):
    """The wanted scalars located by their tag bytes, or None when an occurrence is not a plain scalar record."""
    hits = set()
    for key in keys:
        p = buf.find(key)
        while p != -1:
            hits.add(p)
            p = buf.find(key, p + 1)
    found = {}
    for p in sorted(hits):
        scalar = _scalar_at(buf, p)
        if scalar is None:
            return None
        tag, step, value = scalar
        if tag in tags or tag.startswith(prefixes):  # (the key may be the start of a longer tag: not wanted)
            steps, values = found.setdefault(tag, (array("q"), array("d")))
            steps.append(step)
            values.append(value)
    return found


def _scalar_at(buf, p):
    """(tag, step, value) of the record whose scalar tag starts at byte p, or None unless the bytes around p are
    exactly one record [length][crc] Event{1: wall_time, 2: step, 5: Summary{1: Value{1: tag, 2: simple_value}}}
    with one-byte lengths, as TensorBoard's writers serialise a scalar: the record's own length field, 12 bytes
    before the event, must equal the event's length."""
    if p < 30:
        return None
    taglen = buf[p - 1]
    end = p + taglen + 5  # the tag, then 0x15 and a float32
    if (taglen > 112 or end > len(buf) or buf[p + taglen] != 0x15 or buf[p - 2] != 0x0A or buf[p - 3] != taglen + 7
            or buf[p - 4] != 0x0A or buf[p - 5] != taglen + 9 or buf[p - 6] != 0x2A):
        return None
    start = p - 15  # step 0 is not written (protobuf leaves out default values): 0x09 and the wall time, then 0x2A
    if start >= 12 and buf[start] == 0x09 and LENGTH.unpack_from(buf, start - 12)[0] == end - start:
        return buf[p:p + taglen].decode(), 0, FLOAT.unpack_from(buf, p + taglen + 1)[0]
    if buf[p - 7] & 0x80:  # else 0x09, the wall time, 0x10 and the step's varint: its last byte is at p - 7
        return None
    k = p - 8  # (its other bytes have the high bit set)
    while k > p - 17 and buf[k] & 0x80:
        k -= 1
    start = k - 9
    if buf[k] != 0x10 or start < 12 or buf[start] != 0x09 or LENGTH.unpack_from(buf, start - 12)[0] != end - start:
        return None
    step, shift = 0, 0
    for byte in buf[k + 1:p - 6]:
        step |= (byte & 0x7F) << shift
        shift += 7
    if step >= 1 << 63:  # int64 varints of negative steps
        step -= 1 << 64
    return buf[p:p + taglen].decode(), step, FLOAT.unpack_from(buf, p + taglen + 1)[0]


def _tensor_value(tensor):
    for field in ("float_val", "double_val", "int_val", "int64_val"):
        if getattr(tensor, field):
            return float(getattr(tensor, field)[0])
    return float("nan")


def read_merged_scalars(run_dir, tags, prefixes=(), only=None):
    """({subrun: {tag: (steps, values)}}, bytes read) of the wanted scalars of a launched run (a directory of the
    launcher's store, its TensorBoard runs under runs/); attempts (a run resumed from a
    checkpoint writes a new TensorBoard run) are merged in the order they started: each replaces the earlier
    ones' values from its first logged step on. The sub-run is the event file's directory below its TensorBoard run.
    `only`: the TensorBoard runs under runs/ to read, a collection of names (a script's working directory holds
    several runs)."""
    attempts = {}
    for file in Path(run_dir, "runs").rglob("events.out.tfevents.*"):
        tb_run = file.relative_to(Path(run_dir, "runs")).parts[0]
        if only is not None and tb_run not in only:
            continue
        started = int(file.name.split(".")[3]) if file.name.split(".")[3].isdigit() else 0
        attempts.setdefault(tb_run, []).append((started, file))
    merged, nbytes = {}, 0
    for tb_run in sorted(attempts, key=lambda r: (min(s for s, _ in attempts[r]), r)):
        for _, file in sorted(attempts[tb_run]):
            subrun = "/".join(file.parent.relative_to(Path(run_dir, "runs", tb_run)).parts)
            found, n = read_event_file(file, tags, prefixes)
            nbytes += n
            if not found:
                continue
            first = min(int(steps[0]) for steps, _ in found.values())
            into = merged.setdefault(subrun, {})
            for tag in sorted(set(into) | set(found)):
                old_steps, old_values = into.get(tag, (np.zeros(0, np.int64), np.zeros(0)))
                keep = old_steps < first
                new_steps, new_values = found.get(tag, (np.zeros(0, np.int64), np.zeros(0)))
                into[tag] = (np.concatenate([old_steps[keep], new_steps]), np.concatenate([old_values[keep], new_values]))
    return merged, nbytes


def downsample(steps, values, points):
    """A curve of at most `points` points: the values themselves (mean per step) when there are few
    steps, else the mean step and value of `points` equal-width bins of the step range."""
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order].astype(np.float64), values[order]
    unique, index = np.unique(steps, return_inverse=True)
    if len(unique) <= points:
        return unique, np.bincount(index, values) / np.bincount(index)
    edges = np.linspace(steps[0], steps[-1], points + 1)
    bins = np.minimum(np.searchsorted(edges, steps, side="right") - 1, points - 1)
    count = np.bincount(bins, minlength=points)
    used = count > 0
    return (np.bincount(bins, steps, points)[used] / count[used], np.bincount(bins, values, points)[used] / count[used])


def summarise_run(task):
    """Everything the report needs of one run (a worker's job): per sub-run, final and best score, median DDR
    and downsampled curves; also the bytes read and the number of values of the wanted tags."""
    run_dir, tag, opts = task
    command = json.loads(Path(run_dir, "command.json").read_text())
    tags = {tag} | ({"charts/ddr"} if opts["ddr"] else set()) | ({TRAIN_SECONDS} if opts["x_unit"] == "seconds" else set())
    data, nbytes = read_merged_scalars(run_dir, tags, (DYNAMICS,) if opts["dynamics"] else ())
    wanted = sum(len(steps) for found in data.values() for steps, _ in found.values())
    out = {}
    for subrun, found in data.items():
        if tag not in found or not len(found[tag][0]):
            continue
        clock = found.pop(TRAIN_SECONDS, None) if opts["x_unit"] == "seconds" else None
        if opts["x_unit"] == "seconds" and clock is None:
            return str(run_dir), command, {}, (nbytes, wanted), f"logs no {TRAIN_SECONDS}"
        if clock is not None:
            at = np.argsort(clock[0], kind="stable")
            clock = (clock[0][at], clock[1][at])
        steps, values = found[tag]
        cut = steps.max() - opts["final_fraction"] * (steps.max() - steps.min())
        entry = {"final": float(values[steps >= cut].mean()), "best": float(values.max()),
                 "ddr": float(np.median(found["charts/ddr"][1])) if "charts/ddr" in found else np.nan,
                 "last_step": int(steps.max()), "curves": {}}
        for name, (s, v) in found.items():
            if name == "charts/ddr":
                continue
            x, y = downsample(s, v, opts["points"])
            if opts["x_unit"] == "iterations":
                x = x / command["batch_size"]
            elif clock is not None:  # the training clock at each point's step
                x = np.interp(x, clock[0], clock[1])
            entry["curves"][name] = (x, y)
        out[subrun] = entry
    return str(run_dir), command, out, (nbytes, wanted), None
