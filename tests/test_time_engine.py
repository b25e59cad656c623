"""Time-model engine terms: attention kernels, layer-by-layer overlap, pipeline schedules, MoE,
fp8 — seeds from the formulas' sources and hypothesis invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import attention
from planner.engine import fp8
from planner.engine import moe
from planner.engine import overlap
from planner.engine import schedules
from planner.engine.pipeline import micro_batches_in_flight

# ---- attention ---------------------------------------------------------------------------------


def test_attention_flops_seed_and_causal_half():
    # 4·T·s·(a·d): T = s = 8192, a·d = 4096 → 1.1e15 per layer forward; causal half of it.
    full = attention.forward_flops(8192, 8192, 4096, causal=False)
    assert full == pytest.approx(4 * 8192 * 8192 * 4096)
    assert attention.forward_flops(8192, 8192, 4096, causal=True) == pytest.approx(full / 2)


def test_fa3_falls_back_to_fa2_without_hopper():
    assert attention.kernel_fraction("fa3", 0.5, None) == 0.5
    assert attention.kernel_fraction("fa3", 0.3, 0.5) == 0.5
    with pytest.raises(ValueError):
        attention.kernel_fraction("fa9", 0.5, None)


def test_sequence_efficiency_shape():
    # s½ = 512: causal 2K attends 1K keys on average → 2/3 of the long-sequence rate.
    assert attention.sequence_efficiency(2048, True, 512) == pytest.approx(2 / 3)
    assert attention.head_dim_efficiency(128) == pytest.approx(1.0)
    assert attention.head_dim_efficiency(64) == pytest.approx((64 / 112) / (128 / 176))


@settings(max_examples=100, deadline=None)
@given(s=st.integers(128, 262144), d=st.sampled_from([64, 96, 128, 256]), causal=st.booleans())
def test_longer_sequences_never_run_a_kernel_slower_per_flop(s, d, causal):
    r1 = attention.attention_rate(1e15, 0.5, s, d, causal, 512)
    r2 = attention.attention_rate(1e15, 0.5, 2 * s, d, causal, 512)
    assert r2 >= r1 and r2 <= 0.5e15
    f, b = attention.attention_time(s, s, 4096, d, causal, 1e15, 0.5, 512)
    assert b == pytest.approx(2.5 * f)


# ---- overlap -----------------------------------------------------------------------------------


def test_layerwise_overlap_seed():
    # 32 layers, gather 3 ms, compute 2 ms: 32·1 ms + the first 3 ms = 35 ms exposed.
    assert overlap.layerwise_exposed(3e-3, 2e-3, 32) == pytest.approx(35e-3)
    # compute hides it all but the first gather
    assert overlap.layerwise_exposed(1e-3, 2e-3, 32) == pytest.approx(1e-3)
    # blocking gathers (no prefetch): every one exposed
    assert overlap.layerwise_exposed(1e-3, 2e-3, 32, prefetch_depth=0) == pytest.approx(32e-3)


def test_backward_exposes_the_last_reduce_scatter():
    assert overlap.backward_exposed(1e-3, 1e-3, 4e-3, 10) == pytest.approx(2e-3)


def test_bucketed_seed():
    # 100 ms of reduction, 400 ms of backward, 4 buckets: the last bucket (25 ms) stays exposed.
    assert overlap.bucketed_exposed(0.1, 0.4, 4) == pytest.approx(0.025)
    assert overlap.bucketed_exposed(0.1, 0.4, 4, overlap=False) == pytest.approx(0.1)
    assert overlap.bucketed_exposed(0.5, 0.4, 4) == pytest.approx(0.2)
    assert overlap.bucket_count(1e9, 4e7) == 25


@settings(max_examples=150, deadline=None)
@given(g=st.floats(0, 1), c=st.floats(0, 1), n=st.integers(1, 200), shrink=st.floats(0.1, 1))
def test_less_compute_never_hides_more(g, c, n, shrink):
    """The ZeRO-3 property: fewer tokens per GPU (less compute per layer) never lowers the
    exposed gather time, and exposure is bounded by the blocking case."""
    e = overlap.layerwise_exposed(g, c, n)
    assert overlap.layerwise_exposed(g, c * shrink, n) >= e - 1e-15
    assert e <= n * g + 1e-15


@settings(max_examples=150, deadline=None)
@given(a=st.floats(0, 10), c=st.floats(0, 10), sigma=st.floats(0, 0.99), more=st.floats(0, 5))
def test_a_collective_beside_compute_costs_its_slowdown_or_its_excess(a, c, sigma, more):
    """The overlap law (overlap.beside, Lee et al. 2025's compute slowdown): the pair lasts
    max(c + σ·a, a), so the exposure lies in [σ·a, a], never grows with more compute, never
    shrinks with more slowdown, and with no slowdown is the plain excess max(0, a − c)."""
    e = float(overlap.beside(a, c, sigma))
    assert sigma * a - 1e-12 <= e <= a + 1e-12
    assert c + e == pytest.approx(max(c + sigma * a, a), abs=1e-9)
    assert float(overlap.beside(a, c + more, sigma)) <= e + 1e-12
    assert float(overlap.beside(a, c, min(sigma + 0.01, 0.99))) >= e - 1e-12
    assert float(overlap.beside(a, c, 0.0)) == pytest.approx(max(0.0, a - c), abs=1e-12)


# ---- schedules ---------------------------------------------------------------------------------


def test_bubbles_seed():
    # p = 4, t_f = 1, t_b = 2: 1F1B 9, interleaved v = 3 → 3, ZB-H1 (p−1)·t_f = 3.
    assert schedules.bubble_time("1f1b", 4, 1.0, 2.0) == pytest.approx(9.0)
    assert schedules.bubble_time("interleaved", 4, 1.0, 2.0, chunks=3) == pytest.approx(3.0)
    assert schedules.bubble_time("zb-h1", 4, 1.0, 2.0) == pytest.approx(3.0)
    assert schedules.bubble_time("1f1b", 1, 1.0, 2.0) == 0.0


def test_zb_h1_keeps_1f1b_memory_and_interleaving_costs_more():
    assert micro_batches_in_flight("zb-h1", 8, 32) == micro_batches_in_flight("1f1b", 8, 32) == 8
    assert micro_batches_in_flight("interleaved", 8, 32, chunks=2) == pytest.approx(8 * (1 + 7 / 16))
    assert micro_batches_in_flight("gpipe", 8, 32) == 32


@settings(max_examples=100, deadline=None)
@given(p=st.integers(2, 64), tf=st.floats(1e-3, 1), r=st.floats(1.0, 3.0), v=st.integers(2, 8))
def test_less_memory_in_flight_never_buys_a_smaller_bubble(p, tf, r, v):
    tb = r * tf
    one = schedules.bubble_time("1f1b", p, tf, tb)
    assert schedules.bubble_time("zb-h1", p, tf, tb) <= one
    assert schedules.bubble_time("interleaved", p, tf, tb, v) <= one
    assert micro_batches_in_flight("interleaved", p, 4 * p, 0, v) >= micro_batches_in_flight("1f1b", p, 4 * p)


# ---- MoE, fp8 ----------------------------------------------------------------------------------


def test_moe_seed():
    # Mixtral-like: T = 4096, h = 4096, E = 8, k = 2, W_e = 3·4096·14336.
    w = 3 * 4096 * 14336
    assert moe.expert_flops(4096, 2, w) == pytest.approx(2 * 4096 * 2 * w)
    assert moe.router_flops(4096, 4096, 8) == pytest.approx(2 * 4096 * 4096 * 8)
    f, b = moe.moe_layer_time(4096, 4096, 8, 2, w, 500e12, 0.85, 3e12)
    dense = 2 * 4096 * 2 * w / 500e12
    assert f > dense / 0.85 and b > 2 * dense / 0.85


def test_expert_shape_share_is_one_for_the_dense_shape_and_falls_with_narrow_experts():
    # an expert as wide per rank as the dense layer, and every expert as many rows as T: no change
    assert moe.expert_shape_share(4096, 8, 32, 256, 1024, 1024, 128, 64) == pytest.approx(1.0)
    # Qwen3-30B-A3B on TP 2 (expert TP 2): 768/2 = 384 wide against h/TP = 1024, T·k·EP/E = 4,096
    # rows of 8,192: (384/512)/(1024/1152) × (4096/4160)/(8192/8256)
    got = moe.expert_shape_share(8192, 8, 8, 128, 384, 1024, 128, 64)
    assert got == pytest.approx((384 / 512) / (1024 / 1152) * (4096 / 4160) / (8192 / 8256))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 65536), st.integers(1, 16), st.integers(1, 64), st.integers(8, 512),
       st.integers(16, 16384), st.integers(16, 16384))
def test_an_expert_no_larger_than_the_dense_gemm_runs_no_faster(tokens, k, ep, experts, width,
                                                                  dense):
    share = float(moe.expert_shape_share(tokens, k, ep, experts, width, dense, 128, 64))
    if width <= dense and k * ep <= experts:
        assert share <= 1.0 + 1e-12
    assert share > 0


def test_fp8_seed():
    rate = fp8.fp8_gemm_rate(1978.9e12, 1402.6 / 1978.9, 1.0, 1.0)
    assert rate == pytest.approx(1402.6e12)
    f, b = fp8.cast_time(1e6, 1e6, 1e12)
    assert f == pytest.approx(1e-5) and b == pytest.approx(5e-6)
    assert fp8.linear_time(1e12, 500e12, 1000e12, fp8.RECIPES["tensorwise"])[1] == pytest.approx(2e-3)
