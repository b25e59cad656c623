"""One range check (validate.within) behind calculators, durations and parse_real: the messages
each printed before, byte for byte, through the real entry point; open bounds; NaN refused."""

from __future__ import annotations

import math

import pytest

from planner.errors import InputError, Name, naming
from planner.io.numbers import parse_real
from planner.io.validate import within

CASES = [
    ("comm --bandwidth 1e30 --gpus 8 --message-gb 1",
     "--bandwidth: must be between 1e-06 and 1e+06 GB/s, got 1e+30"),
    ("comm --bandwidth 400 --gpus 8 --latency 1e30 --message-gb 1",
     "--latency: must be between 0 and 1e+21 µs, got 1e+30"),
    ("comm --bandwidth 400 --gpus 8 --message-gb 1e30",
     "--message-gb: must be between 0 and 1e+06 GB, got 1e+30"),
    ("scaling --baseline-ms 1e-20 --measured-ms 5 --gpus 8",
     "--baseline-ms: must be between 1e-06 and 1e+18, got 1e-20"),
    ("checkpoint --cost-min 1e30 --job-mtbf-hours 10",
     "--cost-min: must be between 1.66667e-11 and 1.66667e+13, got 1e+30"),
    ("memory --model llama3-8b --gpus 8 --gpu-memory-gib 1e9",
     "--gpu-memory-gib: must be between 0.0009765625 and 1048576, got '1e9'"),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_each_range_error_reads_as_before(dtplan, argv, message):
    r = dtplan(*argv.split())
    assert r.code == 2, r
    assert r.err.splitlines() == [f"dtplan: error: {message}"]


def _message(call) -> str:
    with pytest.raises(InputError) as e:
        call()
    return str(e.value)


def test_open_bounds_and_units():
    assert within("--x", 5.0, 1.0, None) == 5.0
    assert _message(lambda: within("--x", 0.5, 1.0)) == "--x: must be at least 1, got 0.5"
    with naming(lambda p: Name("--x", 1e9, "GB") if p == "x" else Name(p)):
        assert _message(lambda: within("x", 3e9, None, 2e9)) == "--x: must be at most 2 GB, got 3"
    assert _message(lambda: parse_real("--y", "0.1", lower=0.25)) == \
        "--y: must be at least 0.25, got '0.1'"


def test_nan_is_outside_every_range():
    assert "got nan" in _message(lambda: within("--x", math.nan, 0.0, 1.0))
    assert "got nan" in _message(lambda: within("--x", math.nan, None, 1.0))
