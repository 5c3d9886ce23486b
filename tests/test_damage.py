"""Damaged event files and refused command lines of the analysis tools. benchmark/events.py checks every record of an
event file TensorBoard's own writer wrote: a byte flipped in a record's data or length, a file cut in its middle, at
its end, or empty; analyze.py (--on-damage error by default) and advise.py (warn by default) name each damaged file
and what was read of it, on stderr and in the report, while a killed or live writer's incomplete last record is
passed over in silence. analyze.py's --output and the argparse errors of analyze.py and claims.py are refused with
one line, exit 2, nothing written."""
import json
import struct
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from benchmark import advise, analyze, events
from benchmark.common import ROOT
from helpers import assert_bad_input, read_only

TAG, KL = "charts/episodic_return", "losses/approx_kl"
BATCH, ITERATIONS = 128, 60
ENV, SCRIPT = "CartPole-v1", "ppo_ewma_jax"
ANALYSE = ["--jobs", "1", "--tag", TAG, "--reps", "100", "--points", "4", "--no-dynamics"]


def scalar(tag, value, step):
    return Event(wall_time=time.time(), step=int(step), summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]))


def write_attempt(tb, start=0, stop=ITERATIONS):
    """One TensorBoard run as TensorBoard's writer writes it (its file-version record, then a record a scalar): per
    iteration i its KL, its entropy and an episode's return i (so the best return read tells how far a file was
    read); the event file's path."""
    writer = EventFileWriter(str(tb))
    for i in range(start, stop):
        step = (i + 1) * BATCH
        for tag, value in ((KL, 0.02), ("losses/entropy", 1.0), (TAG, i)):
            writer.add_event(scalar(tag, value, step))
    writer.close()
    (file,) = tb.glob("events.out.tfevents.*")
    return file


def write_launched(out, seed, num_envs, done=True, attempts=((0, ITERATIONS),)):
    """A launcher run directory under out/runs (command.json; done.json when `done`), one TensorBoard run per
    attempt (start, stop iteration), later attempts later time stamps: their event files, in order."""
    name = f"{SCRIPT}__{ENV}__num-envs={num_envs}__s{seed}"
    run_dir = out / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "command.json").write_text(json.dumps({
        "name": name, "script": SCRIPT, "env": ENV, "env_field": "env_id", "seed": seed, "flags": {"--num-envs": str(num_envs)},
        "argv": ["--env-id", ENV, "--num-envs", str(num_envs), "--seed", str(seed)], "batch_size": BATCH,
        "resolved": {"env_id": ENV, "seed": seed, "num_envs": num_envs}}))
    if done:
        (run_dir / "done.json").write_text(json.dumps({"returncode": 0}))
    return [write_attempt(run_dir / "runs" / f"{ENV}__{SCRIPT}__{seed}__{1764300000 + k}", a, b)
            for k, (a, b) in enumerate(attempts)]


def write_grid(out):
    """Two configs x two seeds; the event file of num-envs=8, seed 2 (the one the tests damage)."""
    for seed in (1, 2):
        write_launched(out, seed, 4)
    write_launched(out, 1, 8)
    (file,) = write_launched(out, 2, 8)
    return file


def records(data):
    """[(start byte, Event)] of the whole records of an event file's bytes, framed plainly (no checksum read): the
    tests' own count of what a reader should have read."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        if pos + 16 + n > len(data):
            break
        out.append((pos, Event.FromString(data[pos + 12:pos + 12 + n])))
        pos += 16 + n
    return out


def values(recs, tags=(TAG,)):
    """The values of `tags` in the records."""
    return [v.simple_value for _, e in recs for v in e.summary.value if v.tag in tags]


def damage(file, kind, tags=(TAG,)):
    """Damage the file as `kind` says; (its line, as the tools print it: the path, what is wrong, what was read of it,
    the values of the tags read, `tags`; the whole records before the damage)."""
    data = file.read_bytes()
    recs = records(data)
    k = len(recs) // 2  # a record in the middle
    start = recs[k - 1][0]
    if kind == "data byte":  # one bit of the event's bytes
        file.write_bytes(data[:start + 20] + bytes([data[start + 20] ^ 0x10]) + data[start + 21:])
        what = f"record {k:,} (byte {start:,}) fails its data checksum"
    elif kind == "length byte":
        file.write_bytes(data[:start] + bytes([data[start] ^ 0x01]) + data[start + 1:])
        what = f"record {k:,} (byte {start:,}) fails its length checksum"
    elif kind == "cut mid-way":  # 50 bytes gone from inside record k: its data runs on into the records after it
        file.write_bytes(data[:start + 20] + data[start + 70:])
        what = f"record {k:,} (byte {start:,}) fails its data checksum"
    elif kind == "cut at the end":  # half the file, as a copy that stopped half-way leaves it
        half = len(data) // 2
        k = next(i for i, (s, _) in enumerate(recs, 1) if s + 16 + len(recs[i - 1][1].SerializeToString()) > half)
        start = recs[k - 1][0]
        file.write_bytes(data[:half])
        what = (f"record {k:,} (byte {start:,}) is cut short by the end of the file ({half - start:,} bytes of it) "
                "though its run finished (done.json)")
    else:  # empty
        file.write_bytes(b"")
        k, what = 1, "is empty though its run finished (done.json)"
    said = f"read {k - 1:,} records, {len(values(recs[:k - 1], tags)):,} values of the tags read" if k > 1 else "read nothing"
    return f"{file}: {what}; {said}", recs[:k - 1]


KINDS = ["data byte", "length byte", "cut mid-way", "cut at the end", "empty"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_names_a_damaged_file_and_keeps_its_records_before_the_damage(tmp_path, kind):
    """Both the fast path and the record walk return exactly the values of the records before the damage, and the
    damage, once, with the tests' own count of them; without a list to collect it a damaged file raises."""
    file = write_attempt(tmp_path / "tb")
    line, before = damage(file, kind)
    read = values(before)
    for fast in (True, False):
        damaged = []
        found, _ = events.read_event_file(file, {TAG}, fast=fast, ended=("closed", "its run finished (done.json)"),
                                          damaged=damaged)
        assert [str(d) for d in damaged] == [line]
        assert found.get(TAG, (None, np.zeros(0)))[1].tolist() == read
    with pytest.raises(events.DamagedEventFile, match="checksum|cut short|empty"):
        events.read_event_file(file, {TAG}, ended=("closed", "its run finished (done.json)"))


def test_an_incomplete_last_record_is_damage_only_where_the_writer_closed_the_file(tmp_path):
    """A writer still writing (None) or killed before a resume ("stopped") leaves its last record incomplete: passed
    over; a run that finished closed its files whole. An empty file is damage once its writer is over."""
    file = write_attempt(tmp_path / "tb")
    data = file.read_bytes()
    file.write_bytes(data[:-7])
    whole = events.read_event_file(file, {TAG}, damaged=[])[0][TAG][1].tolist()
    assert whole == list(range(ITERATIONS - 1))  # the last record (the last return) cut: the rest read
    for ended, said in ((None, []), (("stopped", "a later attempt followed it"), []),
                        (("closed", "its run finished (done.json)"), ["is cut short by the end of the file (54 bytes"])):
        damaged = []
        assert events.read_event_file(file, {TAG}, ended=ended, damaged=damaged)[0][TAG][1].tolist() == whole
        assert len(damaged) == len(said) and all(s in str(d) for s, d in zip(said, damaged))
    file.write_bytes(b"")
    for ended, damaged_too in ((None, False), (("stopped", "a later attempt followed it"), True),
                               (("closed", "its run finished (done.json)"), True)):
        damaged = []
        assert events.read_event_file(file, {TAG}, ended=ended, damaged=damaged) == ({}, 0)
        assert [str(d) for d in damaged] == ([f"{file}: is empty though {ended[1]}; read nothing"] if damaged_too else [])


def test_a_record_cut_short_with_whole_records_after_it_is_damage_even_while_written(tmp_path):
    """A long record (the scripts' hyperparameters text) cut in its data, with whole records after it inside the bytes
    it claims: not a writer's last record but a file that lost bytes in its middle, damage even where the writer may
    still be writing."""
    tb = tmp_path / "tb"
    writer = EventFileWriter(str(tb))
    writer.add_event(Event(step=0, summary=Summary(value=[Summary.Value(tag="text", simple_value=0.0,
                                                                        node_name="x" * 4000)])))
    for i in range(10):
        writer.add_event(scalar(TAG, i, i + 1))
    writer.close()
    (file,) = tb.glob("events.out.tfevents.*")
    data = file.read_bytes()
    recs = records(data)
    long_start, tail_start = recs[1][0], recs[2][0]
    assert tail_start - long_start > 4000
    file.write_bytes(data[:long_start + 100] + data[tail_start:])  # 3,900 bytes of the long record gone
    damaged = []
    found, _ = events.read_event_file(file, {TAG}, damaged=damaged)
    assert found == {}
    assert [str(d) for d in damaged] == [
        f"{file}: record 2 (byte {long_start:,}) is cut short: a whole record starts at byte {long_start + 100:,}, inside "
        f"its {tail_start - long_start - 16:,} bytes of data (the file lost bytes in its middle); read 1 records, 0 values "
        "of the tags read"]


@pytest.mark.parametrize("kind", KINDS)
def test_analyze_stops_on_a_damaged_file_before_writing_anything(tmp_path, capsys, kind):
    """--on-damage error, the default: the damaged file and what was read of it, then the flag; exit 1, no analysis
    folder (this analysed what it could read, exit 0, without a word)."""
    file = write_grid(tmp_path)
    line, _ = damage(file, kind)
    with pytest.raises(SystemExit) as stop:
        analyze.main([str(tmp_path), *ANALYSE])
    assert stop.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"analyze.py: error: {line}",
        "analyze.py: error: 1 damaged event file: nothing written; --on-damage warn analyses what was read of them and "
        "lists them in report.md"]
    assert not (tmp_path / "analysis").exists()


@pytest.mark.parametrize("kind", ["data byte", "empty"])
def test_analyze_on_damage_warn_analyses_what_was_read_and_lists_the_file_in_the_report(tmp_path, capsys, kind):
    """--on-damage warn: the same line as a warning, the file listed in report.md, and the damaged run's scores from
    the records before the damage (the returns count the iterations: its best is the last one read)."""
    file = write_grid(tmp_path)
    line, before = damage(file, kind)
    read = values(before)
    analyze.main([str(tmp_path), *ANALYSE, "--on-damage", "warn"])
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"analyze.py: warning: {line}"]
    assert "1 damaged event files, read up to their damage (listed in report.md)" in captured.out
    report = (tmp_path / "analysis" / "report.md").read_text()
    assert "## Damaged event files" in report and f"- `{file}`: {line[len(str(file)) + 2:]}" in report
    scores = pd.read_csv(tmp_path / "analysis" / "scores.csv").set_index("run")
    damaged_run = file.parents[2].name
    if read:  # its best return is the last one read
        assert scores.loc[damaged_run, "best"] == read[-1] and scores.drop(damaged_run).best.eq(ITERATIONS - 1).all()
    else:  # nothing read: the run logged nothing, and says so
        assert damaged_run not in scores.index and f"| {damaged_run} | finished without logging `{TAG}` |" in report


def test_an_earlier_attempts_incomplete_last_record_is_silent_and_its_emptiness_is_not(tmp_path, capsys):
    """A run killed mid-record and resumed: its first attempt's last record incomplete is what the kill left, read
    without a word (the analysis is the same as with that attempt whole); an empty first attempt is damage though
    the resume logged every value after it."""
    first, _ = write_launched(tmp_path / "killed", 1, 4, attempts=((0, 40), (30, ITERATIONS)))
    write_launched(tmp_path / "whole", 1, 4, attempts=((0, 40), (30, ITERATIONS)))
    first.write_bytes(first.read_bytes()[:-7])
    analyses = []
    for grid in ("killed", "whole"):
        analyze.main([str(tmp_path / grid), *ANALYSE])
        analyses.append(pd.read_csv(tmp_path / grid / "analysis" / "runs.csv"))
        assert "Damaged" not in (tmp_path / grid / "analysis" / "report.md").read_text()
    assert capsys.readouterr().err == ""
    pd.testing.assert_frame_equal(analyses[0], analyses[1])
    first.write_bytes(b"")
    with pytest.raises(SystemExit) as stop:
        analyze.main([str(tmp_path / "killed"), *ANALYSE])
    later = first.parents[2] / "runs" / f"{ENV}__{SCRIPT}__1__1764300001"
    (later_file,) = later.glob("events.out.*")
    assert stop.value.code == 1 and capsys.readouterr().err.splitlines()[0] == (
        f"analyze.py: error: {first}: is empty though a later attempt followed it "
        f"({later_file.relative_to(first.parents[2])}); read nothing")


def test_analyze_cli_exits_1_with_a_line_per_damaged_file_then_one_naming_the_flag(tmp_path):
    """Two damaged files of two runs, read by the worker processes: both named, nothing on stdout, nothing written."""
    file = write_grid(tmp_path)
    line, _ = damage(file, "data byte")
    other = next(f for f in tmp_path.glob("runs/*/runs/*/events.out.*") if f != file)
    line_2, _ = damage(other, "empty")
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "analyze.py"), str(tmp_path), *ANALYSE],
                            capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert sorted(lines[:2]) == sorted([f"analyze.py: error: {line}", f"analyze.py: error: {line_2}"])
    assert lines[2:] == ["analyze.py: error: 2 damaged event files: nothing written; --on-damage warn analyses what "
                         "was read of them and lists them in report.md"]
    assert not (tmp_path / "analysis").exists()


def advise_run(tmp_path, done, kind="cut at the end"):
    """A launched run of 60 iterations for advise.py, its event file damaged as `kind` says (by default cut to half
    its size: a copy that stopped half-way, or a run half-way through writing it): (its run directory, its line, the
    iterations read: its KLs)."""
    (file,) = write_launched(tmp_path, 1, 4, done=done)
    line, before = damage(file, kind, tags=advise.wanted_tags(None))
    return file.parents[2], line, len(values(before, (KL,)))


def test_advise_names_a_finished_runs_cut_file_and_advises_on_what_was_read(tmp_path, capsys):
    """A finished run (done.json) whose event file is half its size: its writer closed it whole, so the cut is damage,
    named on stderr and in the report, which reads the iterations before it (this reported them without a word);
    --on-damage error stops before any report, exit 1."""
    run_dir, line, iterations = advise_run(tmp_path, done=True)
    (report,) = advise.main([str(run_dir)])
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"advise.py: warning: {line}"]
    assert report["iterations"] == iterations < ITERATIONS and report["damaged"] == [line]
    assert f"  damaged event file, read up to its damage: {line}" in captured.out.splitlines()
    with pytest.raises(SystemExit) as stop:
        advise.main([str(run_dir), "--on-damage", "error"])
    captured = capsys.readouterr()
    assert stop.value.code == 1 and captured.out == ""
    assert captured.err.splitlines() == [f"advise.py: error: {line}", "advise.py: error: 1 damaged event file: no advice; "
                                         "--on-damage warn advises on what was read of them and names them in each run's report"]


def test_advise_reads_a_live_runs_half_written_file_in_silence(tmp_path, capsys):
    """The same file of a run still running (no done.json): its incomplete last record is the one being written."""
    run_dir, _, iterations = advise_run(tmp_path, done=False)
    (report,) = advise.main([str(run_dir), "--on-damage", "error"])
    captured = capsys.readouterr()
    assert captured.err == "" and report["damaged"] == [] and "damaged" not in captured.out
    assert report["iterations"] == iterations


def test_advise_cli_names_a_data_checksum_failure_on_stderr_and_in_the_report(tmp_path):
    """A flipped byte is damage in a live run too: warned (advise.py's default), the run advised on what was read."""
    run_dir, line, iterations = advise_run(tmp_path, done=False, kind="data byte")
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "advise.py"), str(run_dir)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"advise.py: warning: {line}"]
    assert f"  damaged event file, read up to its damage: {line}" in result.stdout.splitlines()
    assert f", {iterations} iterations," in result.stdout.splitlines()[0]


# ---------------------------------------------------------------------------------------------
# Command lines refused with one line
# ---------------------------------------------------------------------------------------------
def files_under(directory):
    """Every path under `directory`: the grid has runs/ of its own, so "nothing written" is this list unchanged (the
    workdir given to assert_bad_input, a folder that never exists, only adds its one-line rule)."""
    return sorted(p for p in directory.rglob("*"))


def run_tool(tool, *argv, cwd):
    return subprocess.run([sys.executable, str(ROOT / "benchmark" / tool), *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd)


def test_analyze_refuses_an_output_under_a_file(tmp_path):
    """--output under a regular file (or that file itself), refused before any event file is read (this exited 1
    with a traceback after the whole analysis had run)."""
    write_grid(tmp_path / "grid")
    (tmp_path / "notes").write_text("")
    before = files_under(tmp_path)
    result = run_tool("analyze.py", tmp_path / "grid", *ANALYSE, "--output", tmp_path / "notes" / "analysis", cwd=tmp_path)
    assert_bad_input(result, tmp_path / "nothing", f"--output {tmp_path}/notes/analysis: {tmp_path}/notes is a file, not a directory")
    result = run_tool("analyze.py", tmp_path / "grid", *ANALYSE, "--output", tmp_path / "notes", cwd=tmp_path)
    assert_bad_input(result, tmp_path / "nothing", f"--output {tmp_path}/notes: {tmp_path}/notes is a file, not a directory")
    assert files_under(tmp_path) == before


def test_analyze_refuses_an_output_it_cannot_write(tmp_path):
    """An --output whose nearest existing folder is read-only (for root too: a read-only mount), and the default
    output in a read-only grid."""
    write_grid(tmp_path / "grid")
    (tmp_path / "shared").mkdir()
    before = files_under(tmp_path)
    with read_only(tmp_path / "shared"):
        result = run_tool("analyze.py", tmp_path / "grid", *ANALYSE, "--output", tmp_path / "shared" / "a" / "b", cwd=tmp_path)
    assert_bad_input(result, tmp_path / "nothing", f"--output {tmp_path}/shared/a/b: {tmp_path}/shared cannot be written")
    with read_only(tmp_path / "grid"):  # the default output, <out_dir>/analysis
        result = run_tool("analyze.py", tmp_path / "grid", *ANALYSE, cwd=tmp_path)
    assert_bad_input(result, tmp_path / "nothing", f"--output {tmp_path}/grid/analysis (the default, <out_dir>/analysis): "
                                                   f"{tmp_path}/grid cannot be written")
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("tool, argv, text", [
    ("claims.py", ["1", "--scale", "huge"], "claims.py: error: argument --scale: invalid choice: 'huge'"),
    ("claims.py", [], "claims.py: error: the following arguments are required: claim"),
    ("claims.py", ["one"], "claims.py: error: argument claim: invalid int value: 'one'"),
    ("analyze.py", [".", "--points", "many"], "analyze.py: error: argument --points: invalid int value: 'many'"),
    ("analyze.py", [".", "--on-damage", "ignore"], "analyze.py: error: argument --on-damage: invalid choice: 'ignore'"),
    ("analyze.py", [], "analyze.py: error: the following arguments are required: out_dir"),
    ("advise.py", [".", "--on-damage", "skip"], "advise.py: error: argument --on-damage: invalid choice: 'skip'"),
])
def test_argparse_errors_are_one_line_without_the_usage_block(tmp_path, tool, argv, text):
    """argparse's own errors as the bad-input rule's one line (benchmark/common.py's OneLineParser), not its usage
    block and then the line."""
    result = run_tool(tool, *argv, cwd=tmp_path)
    assert_bad_input(result, tmp_path, text)
    assert result.stderr.startswith(text) and "usage:" not in result.stderr
    assert not any(tmp_path.iterdir())
