"""Micro-batches in flight under interleaving, chunk by chunk (engine.pipeline.interleaved_in_flight):
the closed form against Megatron's schedule table written out forward by forward, and the
Llama 3 405B split (PP 16 × v 8, the first and last chunk without a layer) through estimate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine.pipeline import interleaved_in_flight, micro_batches_in_flight
from planner.evaluation.estimate import estimate
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset


def _table_held_layers(p: int, m: int, i: int, v: int, chunk_layers: list[int]) -> int:
    """Layers stage i holds before its first backward, from the forward order itself: groups
    of p micro-batches, each run through chunk 0, then chunk 1, … (Megatron's schedule table
    with microbatch_group_size_per_vp_stage = PP), the first 2(p − i − 1) + (v − 1)p + 1."""
    order = [(mb, k) for g in range(0, m, p) for k in range(v) for mb in range(g, min(g + p, m))]
    warm = min(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    return sum(chunk_layers[k] for _mb, k in order[:warm])


@settings(max_examples=200, deadline=None)
@given(p=st.integers(2, 12), groups=st.integers(1, 4), v=st.integers(2, 8),
       c=st.integers(1, 4), short=st.integers(0, 1), data=st.data())
def test_closed_form_equals_the_schedule_table(p, groups, v, c, short, data):
    m = p * groups
    i = data.draw(st.integers(0, p - 1))
    short_chunk = data.draw(st.sampled_from([0, v - 1]))
    layers = [c - (short if k == short_chunk else 0) for k in range(v)]
    held = _table_held_layers(p, m, i, v, layers)
    got = interleaved_in_flight(p, m, i, v, sum(layers), short_chunk)
    assert got == pytest.approx(held / sum(layers), rel=1e-12)
    if short == 0:   # equal chunks: Megatron's warm-up count over v, as before
        assert micro_batches_in_flight("interleaved", p, m, i, v) == pytest.approx(got)


def test_llama3_405b_v8_first_and_last_stage_hold_sixteen_micro_batches():
    # 126 layers, PP 16 × v 8, m = 32: stage 0 runs 2·15 + 7·16 + 1 = 143 forwards, 31 of them
    # through its empty chunk 0; the last stage's 113 include one through its empty last chunk
    assert interleaved_in_flight(16, 32, 0, 8, 7, 0) == pytest.approx(112 / 7)
    assert interleaved_in_flight(16, 32, 15, 8, 7, 7) == pytest.approx(112 / 7)
    assert micro_batches_in_flight("interleaved", 16, 32, 0, 8) == pytest.approx(143 / 8)
    assert micro_batches_in_flight("interleaved", 16, 32, 15, 8) == pytest.approx(113 / 8)


def test_estimate_counts_the_empty_chunks_of_meta_405b():
    m = get_preset("llama3.1-405b")
    lay = Layout(tp=8, pp=16, dp=64, zero=2, micro_batch=1, schedule="interleaved", chunks=8,
                 recompute="none")
    e = estimate(m, load_profile("h100"), 8192, lay, seq_len=8192, global_batch=2048)
    first, middle, last = (s.items["activations"] for s in e.stages)
    # one layer's bytes a micro-batch: the middle stage holds 141 (2·14 + 7·16 + 1 chunks of
    # one layer), the first 7 · 16 (its 31 through chunk 0 hold none), the last 7 · 16
    layer = middle / 141
    assert first == pytest.approx(112 * layer, rel=1e-9)
    # the last stage holds as many, and the final norm and output layer inputs of its 16
    assert 112 * layer < last < 112 * layer * 1.02
    rules = {r.name: r.status for r in e.rules}
    assert rules["layers-divisible-by-pp"] == "pass"
