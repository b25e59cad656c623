"""Micro-batches in flight under interleaving, chunk by chunk (engine.pipeline.interleaved_in_flight):
the closed form against Megatron's schedule table written out forward by forward, and the
Llama 3 405B split (PP 16 × v 8, the first and last chunk without a layer) through estimate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine.pipeline import (interleaved_in_flight, micro_batches_in_flight,
                                     vp_group_size)
from planner.evaluation.estimate import estimate
from planner.framework_configs.megatron_pipeline import group_flags
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset


def _group(p: int, m: int) -> int:
    """Megatron's smallest valid micro-batch group: p ≤ N ≤ m, m mod N 0 or ≥ p."""
    return next(n for n in range(p, m + 1) if m % n == 0 or m % n >= p)


def _table_held_layers(p: int, m: int, i: int, v: int, chunk_layers: list[int]) -> int:
    """Layers stage i holds before its first backward, from the forward order itself:
    Megatron's schedule table (groups of N micro-batches, each run through chunk 0, then chunk
    1, …; the last group whatever is left), its first 2(p − i − 1) + (v − 1)N + 1 forwards."""
    n = _group(p, m)
    order = []
    for g in range(0, m, n):
        last = m if g + n >= m else g + n
        order += [(mb, k) for k in range(v) for mb in range(g, last)]
    warm = min(2 * (p - i - 1) + (v - 1) * n + 1, m * v)
    return sum(chunk_layers[k] for _mb, k in order[:warm])


@settings(max_examples=300, deadline=None)
@given(p=st.integers(2, 12), extra=st.integers(0, 40), v=st.integers(2, 8),
       c=st.integers(1, 4), short=st.integers(0, 1), data=st.data())
def test_closed_form_equals_the_schedule_table(p, extra, v, c, short, data):
    m = p + extra
    i = data.draw(st.integers(0, p - 1))
    short_chunk = data.draw(st.sampled_from([0, v - 1]))
    layers = [c - (short if k == short_chunk else 0) for k in range(v)]
    held = _table_held_layers(p, m, i, v, layers)
    got = interleaved_in_flight(p, m, i, v, sum(layers), short_chunk)
    assert got == pytest.approx(held / sum(layers), rel=1e-12)
    assert vp_group_size(p, m) == _group(p, m)
    if short == 0:   # equal chunks: Megatron's warm-up count over v
        assert micro_batches_in_flight("interleaved", p, m, i, v) == pytest.approx(got)


def test_a_batch_pp_does_not_divide_takes_megatrons_smallest_valid_group():
    # m = 24 on PP 16: N = 16 leaves 8 (< PP), so N = 24 (schedules.py:975-995), and the
    # first stage holds every forward: 2·15 + 7·24 + 1 ≥ 24·8
    assert vp_group_size(16, 24) == 24 and vp_group_size(16, 32) == 16
    assert vp_group_size(4, 9) == 5 and vp_group_size(4, 13) == 7
    assert micro_batches_in_flight("interleaved", 16, 24, 0, 8) == pytest.approx(24)
    assert micro_batches_in_flight("interleaved", 4, 9, 3, 2) == pytest.approx((5 + 1) / 2)


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


def test_megatron_export_states_the_group_and_its_check_reads_it(dtplan, tmp_path):
    # Llama 3 405B v8 with 24 micro-batches on PP 16: Megatron's default group (PP) is refused,
    # so the export states N = 24, the group the memory counts; the check reads it back
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: llama3.1-405b\nhardware: h100\ngpus: 16384\nseq_len: 8192\n"
                    "layout:\n  tp: 8\n  pp: 16\n  dp: 128\n  zero: 2\n  sp: true\n"
                    "  micro_batch: 1\n  schedule: interleaved\n  chunks: 8\n"
                    "  recompute: none\nbatch:\n  global_batch: 3072\n")
    script = tmp_path / "train.sh"
    r = dtplan("export", plan, "--to", "megatron", "-o", script, "--allow-failing")
    assert r.code == 0, r.err
    text = script.read_text()
    assert "--microbatch-group-size-per-virtual-pipeline-stage 24" in text
    assert "--account-for-embedding-in-pipeline-split" in text
    assert "--num-layers-per-virtual-pipeline-stage 1" in text

    def group_rule(path):
        j = dtplan("check", path, "--engine", "megatron", "--hardware", "h100",
                   "-f", "json").json()
        return next(x for x in j["files"][0]["rules"] if x["name"] == "megatron-vpp-microbatches")

    assert group_rule(script)["status"] == "pass"
    lay = Layout(tp=8, pp=16, dp=128, schedule="interleaved", chunks=8)
    assert group_flags(lay, 32) == [] and group_flags(lay, 24) == [
        ("--microbatch-group-size-per-virtual-pipeline-stage", 24)]
    for edit, n in ((" 24", " 20"), (" 24", " 16")):   # 24 mod 20 = 4 < PP; 24 mod 16 = 8
        bad = tmp_path / f"group{n.strip()}.sh"
        bad.write_text(text.replace("--microbatch-group-size-per-virtual-pipeline-stage" + edit,
                                    "--microbatch-group-size-per-virtual-pipeline-stage" + n))
        rule = group_rule(bad)
        assert rule["status"] == "fail" and f"group {n.strip()}" in rule["measured"]
