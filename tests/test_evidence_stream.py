"""The streamed profiler-trace reader (evidence.stream): the same summary as parsing the whole
file, whatever the buffer size; malformed, oversized and compressed traces. Every trace here is
generated in tmp_path."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.evidence import read_file
from planner.evidence import source, stream
from planner.evidence.trace import read_trace, read_trace_file

KERNELS = ["sm90_xmma_gemm_bf16", "flash_fwd_kernel", "ncclDevKernel_AllGather_RING",
           "ncclKernel_ReduceScatter_RING", "elementwise_kernel"]


def _trace(n_steps: int, per_step: int, launches: bool) -> dict:
    """A Kineto-shaped trace: ProfilerSteps, kernels (some NCCL, launched inside `nccl:`
    annotations), a memcpy, device properties after the events."""
    events, t = [], 0.0
    for s in range(n_steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                       "ts": t, "dur": per_step * 10.0, "pid": 1, "tid": 1})
        for k in range(per_step):
            corr = s * per_step + k
            name = KERNELS[corr % len(KERNELS)]
            if launches:
                if name.startswith("nccl"):
                    events.append({"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce",
                                   "ts": t, "dur": 2.0, "pid": 1, "tid": 2})
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "ts": t + 0.5, "dur": 1.0, "pid": 1, "tid": 2,
                               "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "ts": t + 1, "dur": 7.5,
                           "pid": 0, "tid": 7, "args": {"device": 0, "correlation": corr}})
            t += 10.0
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 3.0, "dur": 4.0,
                   "pid": 0, "tid": 8, "args": {"device": 0}})
    return {"schemaVersion": 1, "traceEvents": events,
            "deviceProperties": [{"id": 0, "name": "H100 \u2603"}],
            "distributedInfo": {"rank": 3, "world_size": 8}}


def _same(a, b) -> None:
    da, db = a.to_dict(), b.to_dict()
    assert da == db


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.booleans(), st.integers(7, 400),
       st.sampled_from(["", " ", "\n", "\n\t  "]))
def test_streamed_equals_parsed_for_any_buffer(tmp_path_factory, n_steps, per_step, launches,
                                               chunk, ws):
    doc = _trace(n_steps, per_step, launches)
    text = json.dumps(doc, separators=("," + ws, ":" + ws))
    path = tmp_path_factory.mktemp("t") / "trace.json"
    path.write_text(ws + text + ws)
    parsed = read_trace(path, json.loads(text))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream, "CHUNK_CHARS", chunk)   # many refills; values straddle them
        streamed = read_trace_file(path)
    _same(parsed, streamed)
    assert streamed.gpu == "H100 \u2603" and streamed.config["rank"] == 3


def test_gzip_trace_and_dispatch(tmp_path):
    doc = _trace(3, 9, True)
    plain, packed = tmp_path / "a.json", tmp_path / "a.json.gz"
    plain.write_text(json.dumps(doc))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = read_file(plain), read_file(packed)
    assert a.kind == b.kind == "profiler-trace"
    assert a.trace.exclusive_ms == b.trace.exclusive_ms
    assert set(a.trace.exclusive_ms) >= {"gemm", "attention", "comm:all_reduce", "memcpy"}


@pytest.mark.parametrize("text, needle", [
    ('{"traceEvents": [{"ph": "X", "cat": "kernel"', "invalid trace JSON"),
    ('{"traceEvents": [1 2]}', "',' or ']'"),
    ('{"traceEvents": []} {}', "extra data"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]}',
     "without a numeric ts/dur"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 1}]}',
     "without GPU kernels"),
])
def test_malformed_traces_are_one_error_naming_file_and_line(tmp_path, text, needle):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match="bad.json") as e:
        read_file(path)
    assert needle in e.value.message


def test_one_value_over_the_bound_and_content_over_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"traceEvents": [{"name": "x" * 5000, "ph": "X"}]}))
    monkeypatch.setattr(stream, "CHUNK_CHARS", 64)
    monkeypatch.setattr(stream, "MAX_VALUE_CHARS", 1024)
    with pytest.raises(InputError, match="one JSON value over"):
        read_trace_file(path)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 200_000 + b"]}"))
    with pytest.raises(InputError, match="larger than"):
        read_trace_file(bomb, limit=100_000)


def test_limited_stream_counts_what_it_hands_out(tmp_path):
    s = source.Bounded(io.BytesIO(b"x" * 10), 10, tmp_path / "f")
    assert s.read(4) + s.read(100) == b"x" * 10 and s.read(5) == b""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 60) | st.integers(2**63 - 2, 2**64),
                          st.floats(-1e3, 1e3)), max_size=80))
def test_series_keeps_the_first_value_of_each_step_in_step_order(adds):
    from planner.evidence.stats import Series
    s, ref = Series(), {}
    for step, value in adds:
        s.add(step, value)
        ref.setdefault(step, value)
    assert len(s) == len(ref) and s.items() == sorted(ref.items())
    assert all(step in s for step in ref) and 61 not in s and "x" not in s
