"""Issues #28 / #30: the MLPerf Training v5.1 llama2_70b_lora runs in the public-run set — each
states its LoRA recipe (`tuning`), is evaluated as LoRA on a frozen base, and is cross-validated
with the other families (planner/data/calibration_runs.json)."""

from __future__ import annotations

from dataclasses import replace

import pydantic
import pytest

from planner.calibration import lofo
from planner.calibration.runs import (PublicRun, RunTuning, evaluate_run, load_runs, run_model,
                                     run_problem)
from planner.evaluation import tuning as tun
from planner.specs.finetune import FULL
from planner.specs.records import validate

LORA = [r for r in load_runs().runs if r.tuning is not None]


def _run(run_id: str) -> PublicRun:
    return next(r for r in load_runs().runs if r.id == run_id)


def test_the_lora_rows_span_submitters_and_gpu_generations():
    assert len(LORA) >= 4
    assert {r.hardware for r in LORA} >= {"mi300x", "mi325x", "mi355x", "h100", "b200"}
    for r in LORA:
        assert r.source.result_dir and r.source.result_dir.endswith("llama2_70b_lora"), r.id
        assert len(r.source.commit) == 40 and r.source.config and r.source.system_json, r.id
        assert r.hardware.startswith(r.family.split("/")[2].lower()), r.id   # its generation


def test_each_lora_run_is_evaluated_as_lora_on_the_attention_projections():
    """MLPerf's recipe: rank 16, alpha 32, dropout 0.1, on linear_qkv and linear_proj (q, k, v, o);
    a run without `tuning` still trains every weight."""
    for r in LORA:
        t = run_problem(r).tuning
        assert (t.mode, t.rank, t.alpha, t.targets, t.dropout, t.frozen) == \
            ("lora", 16, 32, ("q", "k", "v", "o"), True, True), r.id
        assert t.fp8 != "none", r.id      # every row ran fp8 GEMMs
    full = next(r for r in load_runs().runs if r.tuning is None)
    assert run_problem(full).tuning == replace(FULL, fp8=run_problem(full).tuning.fp8)


def test_the_adapters_are_44_6m_parameters():
    """Llama-2-70B (hidden 8192, 8 KV heads of 128) under NeMo: one adapter on the fused
    linear_qkv, r·(d + d + 2·1024), and one on linear_proj, r·(d + d), × 80 layers =
    16 · 34816 · 80, the logs' "44.6 M Trainable params" (Cisco/results/1xC885A_M8-8xH200-SXM-
    141GB/llama2_70b_lora/result_0.txt:597; four PEFT adapters would be 65.5M)."""
    r = LORA[0]
    p = run_problem(r)
    assert run_model(r).layers * tun.adapter_params_per_layer(p) == 16 * 34816 * 80 == 44_564_480


def test_a_lora_step_is_shorter_than_the_same_layout_trained_in_full():
    """The frozen base computes no weight gradients: the same layout trained in full is slower."""
    for r in LORA:
        lora = float(evaluate_run(r).time.step[0])
        full = float(evaluate_run(replace(r, tuning=None)).time.step[0])
        assert lora < full, r.id


def test_the_throughput_rows_step_is_the_global_batch_over_the_median_throughput():
    """AMD's and Cisco's logs carry 'throughput' (samples/s) only: the step is B / that."""
    mi300x = _run("mlperf-v5.1-amd-MI300X-EPYC-9575F-pytorch-llama2-70b-lora")
    assert (mi300x.measured.value, mi300x.measured.step_time_s) == (2.1161, 3.7806)
    assert (mi300x.layout.recompute, mi300x.layout.recompute_layers) == ("full", 21)
    for r in LORA:
        if r.measured.metric == "samples_per_s":
            assert r.measured.step_time_s == pytest.approx(r.global_batch / r.measured.value,
                                                           abs=2e-4), r.id


@pytest.mark.parametrize("bad", [dict(targets="attn"), dict(rank=0), dict(mode="qlora")])
def test_a_bad_lora_recipe_is_refused(bad):
    good = dict(mode="lora", rank=16, alpha=32, targets="attention", dropout=True)
    assert validate(RunTuning, good).targets == "attention"
    with pytest.raises(pydantic.ValidationError):
        validate(RunTuning, {**good, **bad})


def test_every_lora_run_has_its_leave_one_family_out_residual():
    cv = lofo.cross_validate()
    seen = {res.run for f in cv.families for res in f.residuals}
    assert {r.id for r in LORA} <= seen
