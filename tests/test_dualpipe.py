"""DualPipe and DualPipeV (issue 27): the bubble as deepseek-ai/DualPipe's README states it
((S/2 − 1)(F&B + B − 3W) for S stages, F&B taken as F + B), the micro-batches in flight its
schedule holds (p + 1; the V's 2p + 1 half-stage chunks), DualPipe's two parameter copies per
rank, the rule its asserts impose (dualpipe-valid), which framework runs which (torchtitan:
DualPipeV), and the exports: torchtitan writes DualPipeV and reads it back, Megatron refuses both.
Also Megatron's --mtp-num-layers, written for a model with MTP modules and read back."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import one_input_error
from planner.api import problem
from planner.engine.pipeline import bubble_slots, micro_batches_in_flight
from planner.engine.schedules import SCHEDULES, bubble_time, dualpipe_choices
from planner.evaluation.calculators import bubble
from planner.evaluation.candidates import Candidates, shape
from planner.evaluation.evaluate import evaluate
from planner.evaluation.stage_balance import pace
from planner.framework_configs.megatron_args import _megatron_model
from planner.search.fast import SearchSpace, search
from planner.specs.framework import SCHEDULES as FRAMEWORK_SCHEDULES
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout, Schedule
from planner.specs.presets import get_preset


# ---- the bubble, as the README's table writes it ---------------------------------------------
def readme_dualpipe(stages: int, f: float, b: float, w: float) -> float:
    """deepseek-ai/DualPipe README: (PP/2 − 1)(F&B + B − 3W), PP the stage count, F&B = F + B."""
    return (stages / 2 - 1) * ((f + b) + b - 3 * w)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("f,b,w", [(1.0, 2.0, 1.0), (1.0, 2.0, 0.5), (3.0, 5.0, 2.0)])
def test_the_bubbles_are_the_readme_formulas(p, f, b, w):
    share = w / b
    # DualPipe: p stages on p ranks, a rank's F, B, W are a stage's
    assert bubble_time("dualpipe", p, f, b, weight_grad_share=share) == \
        pytest.approx(readme_dualpipe(p, f, b, w), rel=1e-12)
    # DualPipeV: 2p stages of half a rank's layers on p ranks
    assert bubble_time("dualpipev", p, f, b, weight_grad_share=share) == \
        pytest.approx(readme_dualpipe(2 * p, f / 2, b / 2, w / 2), rel=1e-12)
    # ZB1P and 1F1B rows of the same table
    assert bubble_time("zb-h1", p, f, b, weight_grad_share=share) == \
        pytest.approx((p - 1) * (f + b - 2 * w), rel=1e-12)
    assert bubble_time("1f1b", p, f, b) == pytest.approx((p - 1) * (f + b), rel=1e-12)


@pytest.mark.parametrize("p,m,dual,v_shape", [(4, 8, 2 / 26, 3 / 27), (8, 16, 6 / 54, 7 / 55),
                                              (16, 64, 14 / 206, 15 / 207)])
def test_bubble_fractions_with_backward_twice_forward(p, m, dual, v_shape):
    # t_b = 2·t_f, W = B/2: DualPipe idles (p − 2)/3 micro-batch slots, DualPipeV (p − 1)/3;
    # the share of the step is s/(m + s)
    assert bubble_slots(p, schedule="dualpipe") == pytest.approx((p - 2) / 3, rel=1e-12)
    assert bubble_slots(p, schedule="dualpipev") == pytest.approx((p - 1) / 3, rel=1e-12)
    assert bubble(p, [m], "dualpipe").rows[0].bubble_fraction == pytest.approx(dual, rel=1e-12)
    assert bubble(p, [m], "dualpipev").rows[0].bubble_fraction == pytest.approx(v_shape,
                                                                                  rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(half=st.integers(1, 64), f=st.floats(0.01, 10.0), b_ratio=st.floats(0.01, 2.0),
       w_ratio=st.floats(0.0, 0.5))
def test_dualpipe_idles_no_more_than_zb_h1_which_idles_no_more_than_1f1b(half, f, b_ratio,
                                                                           w_ratio):
    # where the README's comparison holds: a backward at most twice the forward and W at most
    # half of it (B ≤ 2F, W ≤ B/2); both DualPipe (p even) and DualPipeV on p ranks
    p, b = 2 * half, f * b_ratio
    share = w_ratio
    one = float(bubble_time("1f1b", p, f, b))
    zb = float(bubble_time("zb-h1", p, f, b, weight_grad_share=share))
    dual = float(bubble_time("dualpipe", p, f, b, weight_grad_share=share))
    v_shape = float(bubble_time("dualpipev", p, f, b, weight_grad_share=share))
    tol = 1e-9 * one
    assert dual <= zb + tol and v_shape <= zb + tol and zb <= one + tol
    assert dual <= v_shape + tol   # the V spends a half stage more per slot for half the params


# ---- what the schedule holds, counted from DualPipe's own step loops ------------------------
def _peak_held(ops: list[str]) -> int:
    held = peak = 0
    for op in ops:
        held += 1 if op == "F" else -1 if op == "B" else 0
        peak = max(peak, held)
    return peak


def _dualpipe_ops(ranks: int, rank: int, m: int) -> list[str]:
    """One rank's chunk sequence, from the loop counts of DualPipe.step (deepseek-ai/DualPipe
    dualpipe/dualpipe.py:359-423: steps 1-8), F a forward chunk, B a backward one, W a weight
    pass."""
    half, h = ranks // 2, min(rank, ranks - 1 - rank)
    outer = half - h - 1
    return (["F"] * 2 * outer + ["F", "F"] * (h + 1) + ["B", "W", "F"] * outer
            + ["F", "B", "F", "B"] * (m // 2 - ranks + h + 1) + ["B", "F", "B"] * outer
            + ["B", "B"] * (h + 1) + ["W", "B"] * outer + ["W"] * (h + 1))


def _dualpipev_ops(ranks: int, rank: int, m: int) -> list[str]:
    """The same from DualPipeV.step (dualpipe/dualpipev.py:331-394), chunks of half a rank."""
    outer = ranks - rank - 1
    return (["F"] * 2 * outer + ["F", "F"] * (rank + 1) + ["B", "W", "F"] * outer
            + ["F", "B", "F", "B"] * (m - 2 * ranks + rank + 1) + ["B", "F", "B"] * outer
            + ["B", "B"] * (rank + 1) + ["W", "B"] * outer + ["W"] * (rank + 1))


@settings(max_examples=60, deadline=None)
@given(half=st.integers(1, 16), extra=st.integers(0, 20), data=st.data())
def test_in_flight_is_what_the_schedules_hold(half, extra, data):
    p = 2 * half
    m = 2 * p + 2 * extra                    # even and ≥ 2p: what both schedules accept
    rank = data.draw(st.integers(0, p - 1))
    dual, v_shape = _dualpipe_ops(p, rank, m), _dualpipev_ops(p, rank, m)
    # every micro-batch passes each rank once (DualPipe: m/2 each way; the V: twice, once per
    # half stage), so the transcription is complete
    assert dual.count("F") == dual.count("B") == m
    assert v_shape.count("F") == v_shape.count("B") == 2 * m
    assert micro_batches_in_flight("dualpipe", p, m, rank) == _peak_held(dual) == p + 1
    assert micro_batches_in_flight("dualpipev", p, m, rank) == _peak_held(v_shape) / 2


# ---- rules, parameters, the search -----------------------------------------------------------
DEEPSEEK = ("--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--pp", "16",
            "--ep", "64", "--zero", "1", "--first-stage-layers", "4", "--last-stage-layers", "1",
            "--seq-len", "4096", "--precision", "fp8", "--recompute", "full")


def _rule(r, name: str) -> dict:
    return next(x for x in r.json()["rules"] if x["name"] == name)


@pytest.mark.parametrize("schedule,batch,ok", [
    ("dualpipe", 15360, True),     # m = 15360 / DP 128 = 120: even, ≥ 2 × PP = 32
    ("dualpipe", 3840, False),     # m = 30 < 32
    ("dualpipe", 4224, False),     # m = 33: odd
    ("dualpipev", 4224, True),     # the V takes an odd m ≥ 32
    ("dualpipev", 3840, False)])
def test_the_rule_names_what_dualpipe_asserts(dtplan, schedule, batch, ok):
    r = dtplan("estimate", *DEEPSEEK, "--schedule", schedule, "--global-batch", str(batch),
               "--format", "json")
    rule = _rule(r, "dualpipe-valid")
    assert rule["status"] == ("pass" if ok else "fail"), rule
    assert r.code == (0 if ok else 1)
    assert rule["measured"].startswith(f"{schedule}, PP 16, m = ")


def test_an_odd_pp_is_refused_for_dualpipe_only(dtplan):
    base = ("--model", "llama3-8b", "--gpus", "24", "--pp", "3", "--global-batch", "96")
    dual = dtplan("estimate", *base, "--schedule", "dualpipe", "--format", "json")
    assert dual.code == 1 and _rule(dual, "dualpipe-valid")["status"] == "fail"
    assert "PP even" in _rule(dual, "dualpipe-valid")["limit"]
    v_shape = dtplan("estimate", *base, "--schedule", "dualpipev", "--format", "json")
    assert _rule(v_shape, "dualpipe-valid")["status"] == "pass"


def _one(p, **knobs):
    return evaluate(p, Candidates.from_layouts([Layout(**knobs)]))


def test_dualpipe_holds_both_edge_stages_on_the_edge_ranks_and_two_middles():
    p = problem(get_preset("llama3-8b"), load_profile("h100"), 32, seq_len=4096,
                global_batch=256).resolved()
    lay = dict(tp=1, pp=8, dp=4, zero=0, micro_batch=1)
    one, dual, v_shape = (_one(p, **lay, schedule=s) for s in ("1f1b", "dualpipe", "dualpipev"))
    first, middle, last = (float(one.memory.stage(s).params[0])
                           for s in ("first", "middle", "last"))
    for stage in ("first", "last"):
        assert float(dual.memory.stage(stage).params[0]) == pytest.approx(first + last,
                                                                           rel=1e-12)
    assert float(dual.memory.stage("middle").params[0]) == pytest.approx(2 * middle, rel=1e-12)
    assert float(v_shape.memory.stage("middle").params[0]) == pytest.approx(middle, rel=1e-12)
    # the bubble is smaller than 1F1B's; the extra copy costs weights, gradients and state
    assert dual.time.bubble[0] < one.time.bubble[0]
    assert dual.memory.stage("middle").weights[0] == pytest.approx(
        2 * one.memory.stage("middle").weights[0], rel=1e-12)


def test_the_search_offers_dualpipe_only_where_a_framework_runs_it():
    assert dualpipe_choices(32, 8, ["1f1b", "dualpipev"]) == ["dualpipev"]
    assert dualpipe_choices(32, 8, ["1f1b", "interleaved"]) == []
    assert dualpipe_choices(32, 8, ["dualpipe", "dualpipev"]) == ["dualpipe", "dualpipev"]
    assert dualpipe_choices(24, 8, ["dualpipe", "dualpipev"]) == ["dualpipe"]   # 24 % 16
    assert dualpipe_choices(30, 3, ["dualpipe", "dualpipev"]) == ["dualpipev"]  # PP odd
    runs = {}
    for fw in ("megatron", "torchtitan"):
        p = problem(get_preset("llama3-8b"), load_profile("h100"), 32, seq_len=4096,
                    global_batch=256, framework=load_framework(fw)).resolved()
        res = search(p, SearchSpace(tp=1, pp=4, recompute="full"), dominated=True)
        runs[fw] = {res.candidates.layout(int(i), p.precision, p.optimizer).schedule
                    for i in range(len(res.candidates))}
    assert "dualpipev" in runs["torchtitan"] and "dualpipe" not in runs["torchtitan"]
    assert not {"dualpipe", "dualpipev"} & runs["megatron"]


# ---- exports ------------------------------------------------------------------------------
PLAN = """name: dp
model: llama3-8b
hardware: h100
gpus: 16
seq_len: 4096
framework: torchtitan
layout: {{tp: 1, pp: 4, zero: 2, micro_batch: 1, schedule: {schedule}, recompute: full}}
batch: {{global_batch: 64}}
"""


def _summary(dtplan, *args) -> dict:
    r = dtplan("check", *args, "-f", "json")
    assert r.code == 0, r
    return r.json()["files"][0]["summary"]


def test_torchtitan_writes_dualpipev_and_reads_it_back(dtplan, tmp_path):
    plan, one = tmp_path / "plan.yaml", tmp_path / "one.yaml"
    plan.write_text(PLAN.format(schedule="dualpipev"))
    one.write_text(PLAN.format(schedule="1f1b"))
    script = tmp_path / "titan.sh"
    assert dtplan("export", plan, "--to", "torchtitan", "-o", script).code == 0
    text = script.read_text()
    assert "--parallelism.pipeline-parallel-schedule DualPipeV" in text
    assert "--parallelism.pipeline-parallel-layers-per-stage 4" in text   # 32 over 2 × 4
    back = _summary(dtplan, script, "--engine", "torchtitan", "--hardware", "h100",
                    "--model", "llama3-8b", "--gpus", "16")
    planned = _summary(dtplan, plan)
    assert back["step_time_s"] == planned["step_time_s"]
    assert back["peak_memory_bytes"] == planned["peak_memory_bytes"]
    assert planned["step_time_s"] != _summary(dtplan, one)["step_time_s"]
    toml = tmp_path / "titan.toml"   # 0.2 wraps blocks in torch.compile, which the V refuses
    r = dtplan("export", plan, "--to", "torchtitan", "--torchtitan-version", "0.2", "-o", toml)
    assert r.code == 0 and "compile off" in r.err
    assert 'pipeline_parallel_schedule = "DualPipeV"' in toml.read_text()
    assert "[compile]\nenable = false" in toml.read_text()


@pytest.mark.parametrize("target,schedule,needle", [
    ("megatron", "dualpipe", "the dualpipe pipeline schedule (it runs 1f1b, interleaved); no "
                             "export target runs it: plan with another --schedule"),
    ("megatron", "dualpipev", "the dualpipev pipeline schedule (it runs 1f1b, interleaved); use "
                              "--to torchtitan"),
    ("torchtitan", "dualpipe", "DualPipe with two model copies per rank"),
    ("deepspeed", "dualpipev", "the dualpipev pipeline schedule (it runs 1f1b); use --to "
                               "torchtitan")])
def test_an_engine_without_the_schedule_refuses_it_by_name(dtplan, tmp_path, target, schedule,
                                                           needle):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(schedule=schedule).replace("framework: torchtitan\n", "")
                    .replace("zero: 2", "zero: 1"))
    out = tmp_path / "out"
    one_input_error(dtplan("export", plan, "--to", target, "--allow-failing", "-o", out),
                    "--to", needle)
    assert not out.exists()


def test_torchtitan_refuses_a_v_whose_stages_do_not_split(dtplan, tmp_path):
    plan = tmp_path / "plan.yaml"   # 32 layers over 2 × PP 8 = 16 stages split; over PP 4 × 2
    plan.write_text(PLAN.format(schedule="dualpipev").replace(
        "recompute: full", "recompute: full, first_stage_layers: 7, last_stage_layers: 9"))
    one_input_error(dtplan("export", plan, "--to", "torchtitan", "--allow-failing",
                           "-o", tmp_path / "t.sh"), "--to", "DualPipeV with 32 layers")


DS_PLAN = """name: ds
model: deepseek-v3
hardware: h800
gpus: 2048
seq_len: 4096
layout: {tp: 1, pp: 16, ep: 64, zero: 1, micro_batch: 1, first_stage_layers: 4,
         last_stage_layers: 1, recompute: full}
batch: {global_batch: 4096}
"""


def test_megatron_writes_the_mtp_modules_and_reads_them_back(dtplan, tmp_path):
    plan, script = tmp_path / "ds.yaml", tmp_path / "ds.sh"
    plan.write_text(DS_PLAN)
    assert dtplan("export", plan, "--to", "megatron", "-o", script).code == 0
    text = script.read_text()
    assert "--mtp-num-layers 1 " in text
    opts = ("--engine", "megatron", "--hardware", "h800", "--model", "deepseek-v3")
    planned, back = _summary(dtplan, plan), _summary(dtplan, script, *opts)
    assert back["step_time_s"] == planned["step_time_s"]
    without = tmp_path / "no_mtp.sh"   # Megatron builds no MTP module without the flag
    without.write_text(text.replace("--mtp-num-layers 1 ", ""))
    assert _summary(dtplan, without, *opts)["step_time_s"] < back["step_time_s"]


def test_the_model_flags_carry_the_mtp_modules():
    flags = {"--num-layers": 4, "--hidden-size": 256, "--num-attention-heads": 4,
             "--vocab-size": 1000, "--position-embedding-type": "rope"}
    assert "mtp_layers" not in _megatron_model(flags, "x.sh")
    assert _megatron_model({**flags, "--mtp-num-layers": 2}, "x.sh")["mtp_layers"] == 2


def test_the_report_states_the_schedules_own_bubble(dtplan, tmp_path):
    plan, out = tmp_path / "plan.yaml", tmp_path / "r.md"
    plan.write_text(PLAN.format(schedule="dualpipev"))   # p = 4, m = 16: s = 1, 1/17
    assert dtplan("report", plan, "-o", out).code == 0
    assert "s/(m + s), s = 1 idle micro-batch slots = **5.88%** (deepseek-ai/DualPipe README" \
        in out.read_text()


def test_dualpipe_paces_by_the_edge_ranks_mean_of_the_first_and_last_stage():
    # ranks 0 and p−1 each run stage 0 for one direction's half of the micro-batches and stage
    # p−1 for the other's: they are paced by the mean of the two, the middle ranks by theirs
    p = problem(get_preset("llama3-8b"), load_profile("h100"), 16, seq_len=4096,
                global_batch=64).resolved()

    def paced(first: int, last: int) -> tuple[list[float], list[float]]:
        rows = Candidates.from_layouts([Layout(tp=1, pp=4, dp=4, micro_batch=1, schedule=s,
                                               first_stage_layers=first, last_stage_layers=last)
                                        for s in ("1f1b", "dualpipe")])
        x = shape(p, rows)
        n = x.layers[1]                        # a layer's time 1: the middle's terms are n
        scale, edge = pace(x, np.full(2, 0.5), np.full(2, 1.0), [n],
                           mirrored=np.array([False, True]))
        return list(scale * n), list(edge)     # the paced stage's layers and its edge
    # 9 + 8 + 8 + 7: 1F1B by the first stage (9 layers + embedding 0.5 = 9.5 > last 8.0);
    # DualPipe by (9.5 + 8.0)/2 = 8.75 > the middle's 8
    assert paced(9, 7) == ([9.0, 8.0], [0.5, 0.75])
    # 7 + 9 + 9 + 7: the middle paces both (DualPipe's ends: (7.5 + 8)/2 < 9)
    assert paced(7, 7) == ([9.0, 9.0], [0.0, 0.0])


def test_the_capabilities_line_names_every_schedule_the_knob_has():
    assert set(FRAMEWORK_SCHEDULES) == set(typing.get_args(Schedule)) == set(SCHEDULES)


def test_the_bubble_calculator_refuses_an_odd_dualpipe(dtplan):
    one_input_error(dtplan("bubble", "--stages", "3", "--micro-batches", "8", "--schedule",
                           "dualpipe"), "--stages", "must be even")
    assert dtplan("bubble", "--stages", "3", "--micro-batches", "8", "--schedule",
                  "dualpipev").code == 0
