"""The text readers stream (issue 29): a training log, a memory summary or an nccl-tests table
is read a block of lines at a time from the file, never whole, and gives exactly what the
same bytes read in memory give (the line numbers, the blocks, a last line cut short); the
training log's state is its per-step values (8 bytes each, what exact medians need, and 8
per step where the steps do not rise by one interval), not its bytes; the warm-up rule and the median on arrays equal the list formulas they replace."""

from __future__ import annotations

import json
import statistics
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.evidence.source as source
from planner.errors import InputError
from planner.evidence import read_file
from planner.evidence.stats import Series, spread, steady
from planner.evidence.memory import read_summary
from planner.evidence.nccl import read_nccl
from planner.evidence.training import read_training

from evidence_paths import DATA, real_dir


TITAN = ("[rank0]:[titan] 2026-01-05 12:00:{i:02d},000 - root - INFO - step: {i}  loss: 7.1  "
         "memory: 81.85GiB(86.17%)  tps: {t}  tflops: 389.87  mfu: 39.42%")
LINES = [
    TITAN,
    " iteration {i}/ 100 | elapsed time per iteration (ms): 12{i}.5 | throughput per GPU "
    "(TFLOP/s/GPU): 40{i}.1 |",
    "step: {i}  loss: 2.0  tps: x5",                    # a bad number: an error (or a cut)
    "[2024-05-01 12:00:00,123] some other text {i}",
    "",
    "   ",
    "\x1b[32mstep: {i}  loss: 2.0  tps: 1,00{i}\x1b[0m",
]


def _evidence(path: Path, data: bytes | None) -> str:
    try:
        return json.dumps(read_training(path, data).to_dict(), sort_keys=True)
    except InputError as e:
        return f"error {e}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.integers(0, len(LINES) - 1), st.integers(1, 40),
                               st.sampled_from(["1,874", "7", "2.5e3"])), min_size=1,
                     max_size=40),
       block=st.sampled_from([1, 50, 300, 1 << 20]), newline=st.booleans())
def test_a_log_streamed_from_its_file_equals_it_read_from_memory(tmp_path_factory, rows, block,
                                                                 newline):
    text = "\n".join(LINES[k].format(i=i, t=t) for k, i, t in rows) + ("\n" if newline else "")
    path = tmp_path_factory.mktemp("log") / "train.log"
    path.write_bytes(text.encode())
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(source, "LINE_BLOCK_BYTES", block)   # blocks cut inside lines and at them
        assert _evidence(path, None) == _evidence(path, text.encode())
        streamed = source.LineBlocks(path)
        in_memory = source.LineBlocks(path, text.encode())
        assert list(streamed) == list(in_memory)
        assert streamed.newline_end == in_memory.newline_end == text.endswith("\n")
    finally:
        mp.undo()


def test_every_text_fixture_reads_the_same_streamed_and_in_memory():
    # the real logs, summaries and nccl-tests tables (where present) and the repo's own: the
    # file streamed (read_file) equals its bytes read in memory, line blocks and Evidence
    readers = {"training-log": read_training, "memory": read_summary, "nccl-tests": read_nccl}
    files = [p for d in (DATA, real_dir()) if d is not None for p in sorted(d.rglob("*"))
             if p.is_file() and p.suffix in (".log", ".txt")]
    assert len(files) >= 4
    for p in files:
        raw = p.read_bytes()
        blocks = [source.LineBlocks(p, block_bytes=64), source.LineBlocks(p, raw, block_bytes=64)]
        assert list(blocks[0]) == list(blocks[1]), p
        ev = read_file(p)
        assert readers[ev.kind](p, raw).to_dict() == ev.to_dict(), p


def _log(path: Path, steps: int) -> Path:
    """A training log of `steps` torchtitan steps, each after 30 lines no reader matches."""
    junk = "[2026-01-05 12:00:00] INFO dataloader worker heartbeat " + "x" * 200 + "\n"
    with path.open("w") as fh:
        for i in range(1, steps + 1):
            fh.write(junk * 30 + TITAN.format(i=0, t=1000 + i).replace("step: 0", f"step: {i}")
                     + "\n")
    return path


def _peak(path: Path) -> tuple[int, int]:
    """(values read, peak bytes the reader allocated) of the log streamed from its file."""
    tracemalloc.start()
    try:
        ev = read_training(path)
        return ev.steps.tokens_per_s_per_gpu.n, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_readers_memory_does_not_grow_with_the_files_bytes(tmp_path, monkeypatch):
    # 2.4 MB and 9.6 MB of the same lines: the reader holds a block of lines (64 kB here)
    # and 8 bytes per step value, never the file (read whole it peaked at twice the file)
    monkeypatch.setattr(source, "LINE_BLOCK_BYTES", 1 << 16)
    small, big = _log(tmp_path / "small.log", 300), _log(tmp_path / "big.log", 1200)
    read_training(small)   # imports and compiled patterns: not the reader's state
    (n_small, p_small), (n_big, p_big) = _peak(small), _peak(big)
    assert (n_small, n_big) == (299, 1199)
    assert big.stat().st_size > 9e6 and p_big < 1.5e6 and p_big < 1.25 * p_small + 60_000, \
        (p_small, p_big)


def test_the_content_bound_holds_while_streaming(tmp_path, monkeypatch):
    # two gzip members, the last one small (its trailer's size is no bound of the whole): the
    # bound is met while the content streams, not by a size known up front
    import gzip
    path = tmp_path / "train.log.gz"
    path.write_bytes(gzip.compress((TITAN.format(i=1, t=5) + "\n" + "y" * 6000 + "\n").encode())
                     + gzip.compress(b"z\n"))
    monkeypatch.setattr(source, "MAX_TEXT_BYTES", 4096)
    with pytest.raises(InputError, match="larger than 0 MiB"):
        list(source.LineBlocks(path))


def test_binary_data_is_refused_streamed_as_in_memory(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"step: 1 \x00 tps: 5\n")
    for data in (None, path.read_bytes()):
        with pytest.raises(InputError, match="binary data"):
            list(source.LineBlocks(path, data))


# ---- the array formulas equal the list ones they replace -----------------------------------

def _steady_lists(points, warmup, averaged=True):
    """The warm-up rule as it was written on lists of (step, value)."""
    if len(points) <= 1:
        return [v for _, v in points], 0
    if points[0][0] == 0:
        points = [(s + 1, v) for s, v in points]
    steps = [s for s, _ in points]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    interval = (min(gaps) if gaps else 1) if averaged else 1
    kept, prev = [], steps[0] - interval
    for s, v in points:
        if (prev + 1 if averaged else s) > warmup:
            kept.append(v)
        prev = s
    if not kept:
        return [v for _, v in points], 0
    return kept, len(points) - len(kept)


VALUES = st.floats(-1e15, 1e15) | st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.3, 1e15])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**15) | st.integers(0, 30), VALUES), max_size=40),
       st.integers(0, 40), st.booleans(), st.booleans())
def test_steady_on_arrays_equals_the_list_rule(points, warmup, averaged, as_series):
    if as_series:   # a Series keeps the first value of a step, in step order
        s = Series()
        for step, v in points:
            s.add(step, v)
        points, given_as = s.items(), s
    else:
        given_as = points
    kept, dropped = steady(given_as, warmup, averaged)
    ref_kept, ref_dropped = _steady_lists(points, warmup, averaged)
    assert [float(x) for x in kept] == ref_kept and dropped == ref_dropped


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=40))
def test_spread_on_arrays_equals_the_statistics_formula(values):
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    got = spread(values)
    assert got is not None and got.median == med and repr(float(got.median)) == repr(med) \
        or med == 0.0   # -0.0 and 0.0 may trade places in a sort: equal, either sign
    assert got.n == len(values) and got.min == min(values) and got.max == max(values)
    assert got.spread_pct == (100.0 * 1.4826 * mad / med if med else 0.0)


@settings(max_examples=300, deadline=None)
@given(st.integers(-5, 5), st.integers(1, 4), st.integers(0, 12),
       st.lists(st.tuples(st.integers(-20, 80), st.booleans(), st.integers(1, 5)), max_size=12))
def test_a_series_of_regular_steps_equals_the_first_value_of_each_step(first, stride, run, more):
    # a run at one interval (kept as first step, stride and count), then steps that continue
    # it, break it, repeat one, fall below it, in blocks (extend) or one by one (add)
    s, ref = Series(), {}
    blocks = [[first + stride * i for i in range(run)]] + [
        [x + stride * i for i in range(n)] if block else [x] for x, block, n in more]
    for k, steps in enumerate(blocks):
        values = [float(k * 100 + i) for i in range(len(steps))]
        if len(steps) > 1:
            s.extend(steps, values)
        else:
            for step, v in zip(steps, values):
                s.add(step, v)
        for step, v in zip(steps, values):
            ref.setdefault(step, v)
    assert len(s) == len(ref) and s.items() == sorted(ref.items())
    steps, values = s.arrays()
    assert list(zip(steps.tolist(), values.tolist())) == sorted(ref.items())
    assert all(step in s for step in ref) and not any(x in s for x in range(-30, 200)
                                                      if x not in ref)


# ---- empty lines cost no Python step each -------------------------------------------------

def _ev(path: Path) -> object:
    """The file's Evidence without its path, or its error with the path as F."""
    try:
        return {k: v for k, v in read_file(path).to_dict().items() if k != "path"}
    except InputError as e:
        return str(e).replace(str(path), "F")


def test_an_nccl_row_wrapped_before_an_empty_line_ends_there_as_before_a_blank_one(tmp_path):
    # empty lines are left out of the nccl reader's lines (a gap in their numbers): a gap ends
    # a wrapped row exactly as a line of blanks does, and between rows changes nothing
    lines = (DATA / "nccl_wrapped_tagged.txt").read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if x.lstrip().startswith("48.70"))
    got = {}
    for name, filler in (("blank", "   "), ("empty", ""), ("many", "\n" * 5000)):
        text = lines[:at] + [filler] + lines[at:]          # inside the wrapped row
        p = tmp_path / f"{name}_all_reduce_perf.txt"
        p.write_text("\n".join(text) + "\n")
        got[name] = _ev(p)
    assert got["blank"] == got["empty"] == got["many"]
    spaced = tmp_path / "spaced_all_reduce_perf.txt"
    plain = tmp_path / "plain_all_reduce_perf.txt"
    plain.write_text("\n".join(lines) + "\n")
    spaced.write_text("".join(("" if i == at else "\n") + x + "\n"   # between every two
                              for i, x in enumerate(lines)))          # lines but in the row
    a, b = _ev(plain), _ev(spaced)
    assert isinstance(a, dict) and a == b


@pytest.mark.parametrize("reader,head", [
    ("planner.evidence.training._megatron", LINES[1].format(i=2)),   # read line by line
    ("planner.evidence.nccl._row_start", None),
])
def test_empty_lines_reach_no_line_matcher(tmp_path, monkeypatch, reader, head):
    # 200,000 empty lines after a log's lines: the matchers see the lines that hold text only
    # (a Python step per empty line made 256 MB of newlines a few minutes' read)
    import importlib
    module, name = reader.rsplit(".", 1)
    mod = importlib.import_module(module)
    real, calls = getattr(mod, name), []
    monkeypatch.setattr(mod, name, lambda *a: calls.append(1) or real(*a))
    text = head if head else (DATA / "nccl_wrapped_tagged.txt").read_text()
    p = tmp_path / "all_reduce_perf.txt"
    p.write_text(text + "\n" * 200_000 + (LINES[1].format(i=3) if head else "# end") + "\n")
    read_file(p)
    assert 0 < len(calls) < 100, len(calls)
