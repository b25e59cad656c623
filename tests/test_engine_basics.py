"""Exact seed and paper figures for the issue-2 formulas, and their invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import batch
from planner.engine import checkpoint
from planner.engine import comm
from planner.engine import memory
from planner.engine import pipeline
from planner.engine import scaling


@pytest.mark.parametrize("stage,expected", [(0, 112.00), (1, 38.50), (2, 26.25), (3, 14.00)])
def test_seed_7b_on_8_gpus(stage, expected):
    # DESIGN.md: the seed prints 50.00/36.00 for stages 1/2, contradicting its own formulas.
    assert memory.model_state_bytes(7e9, stage, 8) / 1e9 == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("stage,expected", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_7_5b_on_64(stage, expected):
    assert round(memory.model_state_bytes(7.5e9, stage, 64) / 1e9, 1) == expected


# ZeRO paper Table 1 (GB, per device), rows DP = 1, 4, 16, 64, 256, 1024.
ZERO_TABLE1 = {
    7.5e9: [(120, 120, 120), (52.5, 41.3, 30), (35.6, 21.6, 7.5), (31.4, 16.6, 1.88),
            (30.4, 15.4, 0.47), (30.1, 15.1, 0.12)],
    128e9: [(2048, 2048, 2048), (896, 704, 512), (608, 368, 128), (536, 284, 32),
            (518, 263, 8), (513, 257, 2)],
    1e12: [(16000, 16000, 16000), (7000, 5500, 4000), (4750, 2875, 1000), (4187, 2218, 250),
           (4046, 2054, 62.5), (4011, 2013, 15.6)],
}


@pytest.mark.parametrize("psi", list(ZERO_TABLE1))
def test_zero_table1_every_cell(psi):
    for nd, row in zip((1, 4, 16, 64, 256, 1024), ZERO_TABLE1[psi]):
        for stage, printed in zip((1, 2, 3), row):
            got = memory.model_state_bytes(psi, stage, nd) / 1e9
            # The paper rounds or truncates to its printed precision.
            assert got == pytest.approx(printed, rel=0.006, abs=0.011), (psi, nd, stage)


def test_recipes():
    assert sum(memory.optimizer_bytes_per_param("mixed", "adam")) == 16
    assert sum(memory.optimizer_bytes_per_param("mixed-fp32-grads", "adam")) == 18
    assert sum(memory.optimizer_bytes_per_param("fp32", "adam")) == 16
    assert sum(memory.optimizer_bytes_per_param("mixed", "sgd-momentum")) == 12
    # bitsandbytes 8-bit states: 2 bytes + an fp32 absmax per 256-element block of each state
    assert sum(memory.optimizer_bytes_per_param("mixed", "adam-8bit")) == 10 + 8 / 256
    assert sum(memory.optimizer_bytes_per_param("bf16-pure", "adam-8bit")) == 6 + 8 / 256
    assert sum(memory.optimizer_bytes_per_param("mixed", "muon")) == 12
    assert sum(memory.optimizer_bytes_per_param("bf16-pure", "adam")) == 8


def test_split_sums_to_total():
    for z in range(4):
        parts = memory.state_split_bytes(7e9, z, 8)
        assert sum(parts) == pytest.approx(memory.model_state_bytes(7e9, z, 8))


@given(psi=st.floats(1e6, 1e13), n=st.integers(1, 4096), z=st.integers(0, 2))
def test_higher_stage_never_raises_state(psi, n, z):
    assert memory.model_state_bytes(psi, z + 1, n) <= memory.model_state_bytes(psi, z, n) * (1 + 1e-12)


@given(psi=st.floats(1e6, 1e13), n=st.integers(1, 4096), z=st.integers(0, 3))
def test_more_sharding_never_raises_state(psi, n, z):
    assert memory.model_state_bytes(psi, z, n + 1) <= memory.model_state_bytes(psi, z, n) * (1 + 1e-12)


def test_vectorised_equals_scalar():
    z = np.array([0, 1, 2, 3, 3])
    n = np.array([8, 8, 8, 8, 64])
    got = memory.model_state_bytes(7e9, z, n)
    assert np.allclose(got, [memory.model_state_bytes(7e9, a, b) for a, b in zip(z, n)])


def test_seed_ring_figures():
    assert comm.bytes_per_gpu("all-reduce", 14e9, 8) / 1e9 == pytest.approx(24.50)
    assert comm.collective_time("all-reduce", 14e9, 8, 200e9) * 1e3 == pytest.approx(122.5)
    assert comm.bytes_per_gpu("all-gather", 14e9, 8) / 1e9 == pytest.approx(12.25)
    assert round(comm.collective_time("all-gather", 14e9, 8, 200e9) * 1e3, 1) == 61.2
    assert round(comm.bytes_per_gpu("all-reduce", 14e9, 64) / 1e9, 2) == 27.56
    assert round(comm.collective_time("all-reduce", 14e9, 64, 200e9) * 1e3, 1) == 137.8
    assert round(comm.bytes_per_gpu("all-reduce", 14e9, 512) / 1e9, 2) == 27.95
    assert round(comm.collective_time("all-reduce", 14e9, 512, 200e9) * 1e3, 1) == 139.7


def test_latency_term():
    t0 = comm.collective_time("all-reduce", 1e6, 8, 100e9)
    t1 = comm.collective_time("all-reduce", 1e6, 8, 100e9, latency_s=5e-6)
    assert t1 - t0 == pytest.approx(2 * 7 * 5e-6)


@given(m=st.floats(1.0, 1e12), n=st.integers(1, 100_000))
def test_allreduce_rises_with_n_and_stays_below_twice(m, n):
    a, b = comm.bytes_per_gpu("all-reduce", m, n), comm.bytes_per_gpu("all-reduce", m, n + 1)
    assert a <= b < 2 * m
    assert comm.bytes_per_gpu("all-gather", m, n) == pytest.approx(a / 2)


def test_allreduce_tends_to_twice():
    assert comm.bytes_per_gpu("all-reduce", 1.0, 10**7) == pytest.approx(2.0, rel=1e-6)


def test_seed_bubble():
    assert round(pipeline.bubble_fraction(4, 8) * 100, 1) == 27.3
    assert [round(pipeline.bubble_fraction(4, m) * 100, 1) for m in (1, 4, 16, 64)] == \
        [75.0, 42.9, 15.8, 4.5]
    assert pipeline.bubble_overhead(4, 8, 2) == pytest.approx(3 / 16)
    assert pipeline.bubble_fraction(4, 8, 2) == pytest.approx(3 / 19)


@given(p=st.integers(2, 128), m=st.integers(1, 4096), v=st.integers(1, 8))
def test_bubble_falls_with_micro_batches(p, m, v):
    assert pipeline.bubble_fraction(p, m + 1, v) < pipeline.bubble_fraction(p, m, v)
    assert pipeline.bubble_fraction(p, m, v + 1) < pipeline.bubble_fraction(p, m, v)


def test_in_flight():
    assert pipeline.micro_batches_in_flight("1f1b", 4, 8, 0) == 4
    assert pipeline.micro_batches_in_flight("1f1b", 4, 8, 3) == 1
    assert pipeline.micro_batches_in_flight("1f1b", 4, 2, 0) == 2
    assert pipeline.micro_batches_in_flight("gpipe", 4, 8, 0) == 8
    assert pipeline.micro_batches_in_flight("interleaved", 8, 64, 0, 3) == pytest.approx(8 * (1 + 7 / 24))


def test_seed_batch():
    assert batch.global_batch(4, 8, 8) == 256
    assert batch.accumulation_steps(256, 4, 8) == 8
    assert not batch.batch_divides(250, 4, 8)
    assert batch.batch_divides(256, 4, 8)


@given(b=st.integers(1, 64), a=st.integers(1, 64), dp=st.integers(1, 1024),
       tp=st.integers(1, 8), pp=st.integers(1, 64))
def test_global_batch_never_depends_on_tp_pp(b, a, dp, tp, pp):
    # The batch is a function of (b, a, dp) only: the world (dp·tp·pp) does not enter.
    assert batch.global_batch(b, a, dp) == b * a * dp


def test_seed_checkpoint_table():
    wasted = [checkpoint.waste_fraction(t, 3, 50 * 60) * 100 for t in (15, 60, 240, 480)]
    assert wasted == pytest.approx([20.25, 6.0, 5.25, 8.625])
    assert round(checkpoint.young_interval(3, 3000)) == 134


@pytest.mark.parametrize("m,published,eq37", [(1440, 117, 116.69), (360, 57, 56.71), (15, 9.1, 9.14)])
def test_daly_examples(m, published, eq37):
    tau = checkpoint.daly_interval(5, m)
    assert round(tau, 2) == eq37
    assert tau == pytest.approx(published, abs=0.5)


def test_daly_beyond_range():
    assert checkpoint.daly_interval(10, 4) == 4


@given(d=st.floats(0.1, 60), m=st.floats(30, 1e5))
@settings(max_examples=50)
def test_swept_optimum_within_one_step_of_young(d, m):
    step = max(d / 10, 0.5)
    taus = np.arange(step, 20 * math.sqrt(2 * d * m), step)
    best = taus[np.argmin(checkpoint.waste_fraction(taus, d, m))]
    assert abs(best - checkpoint.young_interval(d, m)) <= step


def test_seed_scaling():
    assert scaling.ideal_time(800, 8) == 100
    assert round(scaling.strong_speedup(800, 140), 2) == 5.71
    assert round(scaling.strong_efficiency(800, 140, 8) * 100, 1) == 71.4
    assert scaling.weak_efficiency(100, 125) == 0.8
