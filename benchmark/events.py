"""A grid's TensorBoard logs, read for the analysis (benchmark/analyze.py) and the advisor (benchmark/advise.py): only
the wanted tags, straight from the event files' bytes, every record's checksums checked; a run's attempts (a run
resumed from a checkpoint writes a new TensorBoard run) merged; one run summarised (its final and best score, its
median DDR and its curves downsampled), in a worker process of its own.

What counts as a damaged event file (a `Damage`, which the callers name with what was read of the file):
- a record whose length or data fails its checksum (TFRecord framing: uint64 length, masked CRC-32C of the length,
  data, masked CRC-32C of the data), wherever it lies;
- a record cut short with a whole record after it (the file lost bytes in its middle);
- a file whose run finished (its run directory has done.json) that ends inside a record: its writer closed it whole;
- a file with no whole record (empty) once its writer is over: its run finished, or a later attempt followed it.
Not damage: an incomplete last record of a file whose writer may still be writing (a live run) or was killed (an
earlier attempt: a resume followed it), which is what such a writer leaves; and an empty file of a live run (its
writer has not flushed yet). A damaged file's values are those of its records before the first damaged one."""
import json
import mmap
import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

import google_crc32c
import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

TRAIN_SECONDS = "charts/train_seconds"  # the training clock the JAX scripts log, carried over resumptions
DYNAMICS = "dynamics/"
LENGTH, FLOAT = struct.Struct("<Q"), struct.Struct("<f")
HEADER, CRC = struct.Struct("<QI"), struct.Struct("<I")
CRC_HEADER = struct.Struct("<IQI")  # a record's data CRC and the next record's header, read in one call
FINISHED = "done.json"  # the launcher's record of a run that ended well: its writers closed their files


@dataclass
class Damage:
    """A damaged event file: what is wrong (`what`), and what was read of it: its whole records before the damage
    and the values of the wanted tags in them. `subrun`: its sub-run in its run (read_merged_scalars)."""
    path: str
    what: str
    records: int
    values: int
    subrun: str = ""

    @property
    def detail(self):
        """What is wrong and what was read, as the tools print it after the file's path."""
        read = f"read {self.records:,} records, {self.values:,} values of the tags read" if self.records else "read nothing"
        return f"{self.what}; {read}"

    def __str__(self):
        return f"{self.path}: {self.detail}"


class DamagedEventFile(Exception):
    """A damaged event file read without a list to collect its damage in (read_event_file's `damaged`)."""


def _masked(crc):
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant, so that a CRC of CRCs is not trivially 0."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_event_file(path, tags, prefixes=(), fast=True, check=True, ended=None, damaged=None):
    """({tag: (steps int64 array, values float64 array)}, bytes read) of the wanted scalars of one event file.

    An event file is a sequence of records (8-byte length, 4-byte CRC, an Event proto, 4-byte CRC). First every
    record's framing and both its checksums are checked (`check_records`, CRC-32C in C by google-crc32c); then, over
    the whole records before any damage, the fast path finds the wanted tags' bytes and reads each scalar event around
    them (`_scalar_at`); if any occurrence is not exactly a one-value `simple_value` event framed as a record, the
    file is read record by record instead, parsing (with TensorBoard's protobuf) only the records that contain a
    wanted tag's bytes. `check=False` skips the checksums (to measure what they cost: docs/grids.md).

    `ended`: what is known of the file's writer: None while it may still be writing (an incomplete last record is
    the record it is writing, an empty file one it has not flushed yet: neither is damage); ("stopped", why) when a
    later attempt followed it (it may have been killed mid-record: an incomplete last record is dropped, but a file
    with no whole record is damage); ("closed", why) when its run finished (it closed the file, which must end on a
    whole record). `damaged`: a list that receives the file's `Damage` (its values before the damage are returned);
    None: a damaged file raises DamagedEventFile, as damage is never passed over in silence."""
    keys = [t.encode() for t in tags] + [p.encode() for p in prefixes]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            problem = (1, 0, f"is empty though {ended[1]}") if ended and ended[0] in ("stopped", "closed") else None
            return _report(path, {}, problem, damaged), 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            end, problem = check_records(buf, ended) if check else (size, None)
            found = _find_scalars(buf, keys, tags, prefixes, end) if fast else None
            if found is None:
                found = _walk_records(buf, keys, tags, prefixes, end)
    found = {tag: (np.frombuffer(s, np.int64), np.frombuffer(v, np.float64)) for tag, (s, v) in found.items()}
    return _report(path, found, problem, damaged), size


def _report(path, found, problem, damaged):
    """`found`, once a problem (record number, byte, what) of the file is handed to `damaged` (or raised)."""
    if problem is None:
        return found
    record, _, what = problem
    damage = Damage(str(path), what, record - 1, sum(len(steps) for steps, _ in found.values()))
    if damaged is None:
        raise DamagedEventFile(str(damage))
    damaged.append(damage)
    return found


def check_records(buf, ended=None):
    """(end, problem) of an event file's bytes: [0, end) are whole records whose length and data checksums hold;
    problem is None where what follows is nothing or what `ended` allows (read_event_file), else (the number of the
    first damaged record, counted from 1, its byte, what is wrong with it). One C call per record (its data's CRC) in
    a tight loop; a length's CRC is computed once per distinct length."""
    size, value = len(buf), google_crc32c.value
    lengths, end = {}, 0  # length -> its masked CRC as a header holds it; the end of the whole records so far
    if size >= 12:
        n, length_crc = HEADER.unpack_from(buf, 0)
        pos, unpack, stop = 12, CRC_HEADER.unpack_from, size - 16  # pos: the data of the record headed (n, length_crc)
        while True:
            if lengths.get(n) != length_crc:
                if length_crc != _masked(value(buf[pos - 12:pos - 4])):
                    return _problem(buf, pos - 12, "fails its length checksum")
                lengths[n] = length_crc
            if pos + n > stop:  # no whole header after this record: the last one, read below
                break
            data_crc, next_n, next_crc = unpack(buf, pos + n)
            c = value(buf[pos:pos + n])
            if data_crc != (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF:  # _masked(c), without a call a record
                return _problem(buf, pos - 12, "fails its data checksum")
            pos, n, length_crc = pos + n + 16, next_n, next_crc
        if pos + n + 4 <= size:  # the last record is whole: at most a part of a header follows
            if CRC.unpack_from(buf, pos + n)[0] != _masked(value(buf[pos:pos + n])):
                return _problem(buf, pos - 12, "fails its data checksum")
            end = pos + n + 4
        else:  # cut short: the end of the file, unless a whole record follows inside the bytes it claims
            end = pos - 12
            after = _whole_record_after(buf, pos)
            if after is not None:
                return _problem(buf, end, f"is cut short: a whole record starts at byte {after:,}, inside its {n:,} "
                                          "bytes of data (the file lost bytes in its middle)")
    if end < size and ended and ended[0] == "closed":
        return _problem(buf, end, f"is cut short by the end of the file ({size - end:,} bytes of it) though {ended[1]}")
    if end == 0 and ended and ended[0] in ("stopped", "closed"):
        return 0, (1, 0, f"holds no whole record ({size:,} bytes) though {ended[1]}")
    return end, None


def _whole_record_after(buf, start):
    """The byte of the first whole record (its length and data checksums hold) at or after `start`, or None. A
    header is looked for where a length below 2**24 could start (its five high bytes zero, found at once by numpy),
    then checked: a cut record's bytes are searched, not the file."""
    tail = np.frombuffer(buf[start:], np.uint8)
    q = np.arange(max(len(tail) - 15, 0))  # where a header and a data CRC still fit
    zeros = np.concatenate([[0], np.cumsum(tail == 0)])
    length = tail[q].astype(np.int64) | tail[q + 1].astype(np.int64) << 8 | tail[q + 2].astype(np.int64) << 16
    crc_set = (tail[q + 8] | tail[q + 9] | tail[q + 10] | tail[q + 11]) != 0  # (a run of zero bytes is no header)
    for at in np.flatnonzero((zeros[q + 8] - zeros[q + 3] == 5) & (q + 16 + length <= len(tail)) & crc_set):
        at, n = start + int(at), int(length[at])
        if (CRC.unpack_from(buf, at + 8)[0] == _masked(google_crc32c.value(buf[at:at + 8]))
                and CRC.unpack_from(buf, at + 12 + n)[0] == _masked(google_crc32c.value(buf[at + 12:at + 12 + n]))):
            return at
    return None


def _problem(buf, at, what):
    """(at, (the record's number, at, what)) of the record starting at byte `at`: its number counted through the
    records' lengths before it."""
    pos, record = 0, 1
    while pos < at:
        pos += 16 + LENGTH.unpack_from(buf, pos)[0]
        record += 1
    return at, (record, at, f"record {record:,} (byte {at:,}) {what}")


def _walk_records(buf, keys, tags, prefixes, size):
    """The wanted scalars of the records in buf[:size], each record that holds a wanted tag's bytes parsed."""
    found, pos, parse, find = {}, 0, event_pb2.Event.FromString, buf.find
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


def _find_scalars(buf, keys, tags, prefixes, size=None):
    """The wanted scalars of buf[:size] (the whole of it by default) located by their tag bytes, or None when an
    occurrence is not a plain scalar record."""
    size = len(buf) if size is None else size
    hits = set()
    for key in keys:
        p = buf.find(key, 0, size)
        while p != -1:
            hits.add(p)
            p = buf.find(key, p + 1, size)
    found = {}
    for p in sorted(hits):
        scalar = _scalar_at(buf, p, size)
        if scalar is None:
            return None
        tag, step, value = scalar
        if tag in tags or tag.startswith(prefixes):  # (the key may be the start of a longer tag: not wanted)
            steps, values = found.setdefault(tag, (array("q"), array("d")))
            steps.append(step)
            values.append(value)
    return found


def _scalar_at(buf, p, size):
    """(tag, step, value) of the record whose scalar tag starts at byte p, or None unless the bytes around p are
    exactly one record [length][crc] Event{1: wall_time, 2: step, 5: Summary{1: Value{1: tag, 2: simple_value}}}
    with one-byte lengths, as TensorBoard's writers serialise a scalar: the record's own length field, 12 bytes
    before the event, must equal the event's length."""
    if p < 30:
        return None
    taglen = buf[p - 1]
    end = p + taglen + 5  # the tag, then 0x15 and a float32
    if (taglen > 112 or end > size or buf[p + taglen] != 0x15 or buf[p - 2] != 0x0A or buf[p - 3] != taglen + 7
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


def read_texts(path, names):
    """{tag: [text]} of the text summaries (the text plugin's string tensors) of one event file whose tag is one of
    `names` (a script's `hyperparameters` text: hyperparameters/text_summary), parsed from the records that hold a
    name's bytes. Its checksums are not checked here: a script logs its text first, and this reads the records up to
    the last one that holds a name, not the file; the scalars' reader checks and reports the file, and a record
    that does not parse is passed over."""
    keys, texts = [n.encode() for n in names], {}
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return texts
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            last = -1
            for key in keys:
                p = buf.find(key)
                while p != -1:
                    last = max(last, p)
                    p = buf.find(key, p + 1)
            pos, parse = 0, event_pb2.Event.FromString
            while pos + 12 <= min(last + 1, len(buf)):
                (n,) = LENGTH.unpack_from(buf, pos)
                start, pos = pos + 12, pos + 16 + n
                if pos > len(buf) or not any(buf.find(k, start, start + n) != -1 for k in keys):
                    continue
                try:
                    event = parse(buf[start:start + n])
                except DecodeError:
                    continue
                for value in event.summary.value:
                    if value.tag in names and value.tensor.string_val:
                        texts.setdefault(value.tag, []).append(value.tensor.string_val[0].decode(errors="replace"))
    return texts


def read_merged_scalars(run_dir, tags, prefixes=(), only=None, damaged=None):
    """({subrun: {tag: (steps, values)}}, bytes read) of the wanted scalars of a launched run (a directory of the
    launcher's store, its TensorBoard runs under runs/); attempts (a run resumed from a
    checkpoint writes a new TensorBoard run) are merged in the order they started: each replaces the earlier
    ones' values from its first logged step on. The sub-run is the event file's directory below its TensorBoard run.
    `only`: the TensorBoard runs under runs/ to read, a collection of names (a script's working directory holds
    several runs). `damaged`: a list that receives each damaged file's `Damage` (read_event_file; None: raise
    DamagedEventFile). A file's writer is over when a later attempt (or a later file beside it) followed it, and
    closed its file when the run finished (done.json) and it is of the newest attempt."""
    attempts = {}
    for file in Path(run_dir, "runs").rglob("events.out.tfevents.*"):
        tb_run = file.relative_to(Path(run_dir, "runs")).parts[0]
        if only is not None and tb_run not in only:
            continue
        started = int(file.name.split(".")[3]) if file.name.split(".")[3].isdigit() else 0
        attempts.setdefault(tb_run, []).append((started, file))
    order = [(tb_run, file) for tb_run in sorted(attempts, key=lambda r: (min(s for s, _ in attempts[r]), r))
             for _, file in sorted(attempts[tb_run])]
    finished = Path(run_dir, FINISHED).exists()
    merged, nbytes = {}, 0
    for i, (tb_run, file) in enumerate(order):
        subrun = "/".join(file.parent.relative_to(Path(run_dir, "runs", tb_run)).parts)
        later = next((f for r, f in order[i + 1:] if r != tb_run or f.parent == file.parent), None)
        ended = (("stopped", f"a later attempt followed it ({later.relative_to(run_dir)})") if later is not None else
                 ("closed", f"its run finished ({FINISHED})") if finished else None)
        own = None if damaged is None else []
        found, n = read_event_file(file, tags, prefixes, ended=ended, damaged=own)
        for damage in own or ():
            damage.subrun = subrun
            damaged.append(damage)
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


def final_score(steps, values, fraction):
    """A run's final score: the mean of the values logged over the last `fraction` of its steps (analyze.py's
    --final-fraction)."""
    steps, values = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    cut = steps.max() - fraction * (steps.max() - steps.min())
    return float(values[steps >= cut].mean())


def summarise_run(task):
    """Everything the report needs of one run (a worker's job): (run directory, command, per sub-run its final and best
    score, median DDR and downsampled curves, (bytes read, values of the wanted tags read), why it cannot be read or
    None, [Damage of its damaged event files] (what was read of them is summarised))."""
    run_dir, tag, opts = task
    command = json.loads(Path(run_dir, "command.json").read_text())
    tags = {tag} | ({"charts/ddr"} if opts["ddr"] else set()) | ({TRAIN_SECONDS} if opts["x_unit"] == "seconds" else set())
    damaged = []
    data, nbytes = read_merged_scalars(run_dir, tags, (DYNAMICS,) if opts["dynamics"] else (), damaged=damaged)
    wanted = sum(len(steps) for found in data.values() for steps, _ in found.values())
    out = {}
    for subrun, found in data.items():
        if tag not in found or not len(found[tag][0]):
            continue
        clock = found.pop(TRAIN_SECONDS, None) if opts["x_unit"] == "seconds" else None
        if opts["x_unit"] == "seconds" and clock is None:
            return str(run_dir), command, {}, (nbytes, wanted), f"logs no {TRAIN_SECONDS}", damaged
        if clock is not None:
            at = np.argsort(clock[0], kind="stable")
            clock = (clock[0][at], clock[1][at])
        steps, values = found[tag]
        entry = {"final": final_score(steps, values, opts["final_fraction"]), "best": float(values.max()),
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
    return str(run_dir), command, out, (nbytes, wanted), None, damaged
