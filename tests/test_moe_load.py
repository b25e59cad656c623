"""Routing load on the busiest rank, a stated factor (#27): the framework profile's
ep_load_imbalance (dropless routing) and moe_capacity_factor (padded expert buffers), through
engine.moe.load_factor into the experts' GEMMs and permutation, the EP all-to-all and the
permuted activations; and the fast search pricing each EP's expert GEMMs apart."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.engine import moe
from planner.evaluation import timing
from planner.evaluation import timing_terms as terms
from planner.evaluation.candidates import Candidates, shape
from planner.evaluation.evaluate import evaluate, evaluate_memory
from planner.specs.framework import list_frameworks, load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

H100 = load_profile("h100")


def _problem(preset: str = "qwen3-30b-a3b", fw: str = "megatron", **time: float):
    f = load_framework(fw)
    return problem(get_preset(preset), H100, 16, seq_len=4096, global_batch=64,
                   framework=replace(f, time=replace(f.time, **time)))


def _eval(p, **lay):
    return evaluate(p, Candidates.from_layouts([Layout(zero=1, **lay)]))


def test_load_factor_cases():
    # dropless: the stated imbalance where EP > 1, 1 at EP 1 (every expert local)
    assert moe.load_factor(1, 1.4, 0.0) == 1.0
    assert moe.load_factor(8, 1.4, 0.0) == pytest.approx(1.4)
    # a capacity pads every expert's buffer to it, whatever the EP or the routing
    assert moe.load_factor(1, 1.4, 1.25) == pytest.approx(1.25)
    assert moe.load_factor(8, 1.4, 0.5) == pytest.approx(0.5)
    np.testing.assert_allclose(moe.load_factor(np.array([1, 2, 16]), 1.2, 0.0), [1.0, 1.2, 1.2])


def test_every_profile_states_both_with_a_source():
    for fw in list_frameworks():
        for key in ("time.ep_load_imbalance", "time.moe_capacity_factor"):
            assert fw.provenance[key].source, (fw.name, key)
    # Megatron-Core and torchtitan route dropless; DeepSpeed-MoE pads to a capacity of 1
    assert load_framework("megatron").time.moe_capacity_factor == 0.0
    assert load_framework("torchtitan").time.moe_capacity_factor == 0.0
    assert load_framework("deepspeed").time.moe_capacity_factor == 1.0


@settings(max_examples=15, deadline=None)
@given(f=st.floats(1.0, 2.0), ep=st.sampled_from([2, 4, 8, 16]))
def test_imbalance_scales_the_all_to_all_and_slows_the_step(f, ep):
    base, hot = _problem(), _problem(ep_load_imbalance=f)
    b, h = _eval(base, ep=ep, dp=16), _eval(hot, ep=ep, dp=16)
    assert h.time.ep_total[0] == pytest.approx(f * b.time.ep_total[0], rel=1e-12)
    assert h.time.compute[0] >= b.time.compute[0]
    assert h.time.step[0] >= b.time.step[0]
    if f > 1.01:
        assert h.time.compute[0] > b.time.compute[0]


def test_dropless_imbalance_changes_nothing_at_ep_1_nor_for_a_dense_model():
    for preset, ep in (("qwen3-30b-a3b", 1), ("llama3-8b", 1)):
        b = _eval(_problem(preset), ep=ep, dp=16)
        h = _eval(_problem(preset, ep_load_imbalance=1.5), ep=ep, dp=16)
        assert h.time.step[0] == b.time.step[0]
        assert h.memory.peak[0] == b.memory.peak[0]


def test_a_capacity_pads_the_permuted_activations():
    lay = Candidates.from_layouts([Layout(zero=1, ep=4, dp=16)])
    peak = {c: float(evaluate_memory(_problem(moe_capacity_factor=c), lay)[2].peak[0])
            for c in (0.0, 1.0, 1.5)}
    assert peak[1.0] == peak[0.0]          # a capacity of 1: the mean rows, as dropless
    assert peak[1.5] > peak[1.0]
    dense = Candidates.from_layouts([Layout(zero=1, dp=16)])
    assert float(evaluate_memory(_problem("llama3-8b", moe_capacity_factor=1.5), dense)[2]
                 .peak[0]) == float(evaluate_memory(_problem("llama3-8b"), dense)[2].peak[0])


def test_compute_is_priced_per_ep_where_rows_share_their_activations():
    """Rows alike in every activation column but EP (one activation group) get each its own
    expert GEMM shape: the grouped compute equals the row-by-row one."""
    p = _problem("deepseek-v2-lite").resolved()
    c = Candidates.from_layouts([Layout(zero=1, ep=e, dp=16) for e in (1, 2, 8, 16)])
    x = shape(p, c)
    acts = evaluate_memory(p, c)[1]
    a = acts["per_mode"] if "per_mode" in acts else acts
    one = timing.compute_terms(p, c, x, a, terms.Groups())
    grouped = timing.compute_terms(p, c, x, a, terms.Groups(act=(np.zeros(4, dtype=np.int64), 1)))
    np.testing.assert_array_equal(grouped.per_micro_batch, one.per_micro_batch)
    assert len(set(one.per_micro_batch.tolist())) > 1


def test_a_stated_imbalance_through_the_cli(dtplan, tmp_path):
    """A copy of the megatron profile stating 1.25: a slower step, and the note says why."""
    text = load_framework("megatron").source_file
    assert text is not None
    body = open(text, encoding="utf-8").read().replace(
        "ep_load_imbalance = { value = 1.0,", "ep_load_imbalance = { value = 1.25,")
    mine = tmp_path / "mine.toml"
    mine.write_text(body.replace('name = "megatron"', 'name = "megatron-hot"'), encoding="utf-8")
    args = ("estimate", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "h100",
            "--ep", "8", "--zero", "1", "--recompute", "full", "--format", "json")
    base = json.loads(dtplan(*args).stdout)
    run = dtplan(*args, "--framework", str(mine))
    assert run.code == 0, run.stderr
    hot = json.loads(run.stdout)
    assert hot["step_time_s"] > base["step_time_s"]
    assert any("1.25x the mean routed tokens" in n for n in hot["notes"])


def test_dropless_imbalance_grows_the_busiest_ranks_activations_beyond_ep_1():
    """The permuted activations on the busiest rank: more with a stated imbalance at EP > 1,
    the same at EP 1 (rows alike but in EP are then apart in the activations' tuple)."""
    lay = Candidates.from_layouts([Layout(zero=1, ep=e, dp=16) for e in (1, 4)])
    base = evaluate_memory(_problem(), lay)[2].peak
    hot_p = _problem(ep_load_imbalance=1.5)
    assert "ep" in hot_p.activation_columns and "ep" not in _problem().activation_columns
    hot = evaluate_memory(hot_p, lay)[2].peak
    assert hot[0] == base[0] and hot[1] > base[1]
