"""Issue #30 Must-show 2 on the short-step runs: the Megatron profile's host time per optimizer
step (framework_profiles/megatron.toml step_host_s, refitted per leave-one-family-out fold), the
bucket that holds the embedding, and the v5.1 Llama 3.1 8B runs' own settings."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from planner.calibration import host_fit, lofo, published
from planner.calibration.runs import (evaluate_run, load_runs, run_framework, run_layout,
                                     run_problem)
from planner.engine import overlap
from planner.engine import step_time as stt
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile

GB200_8B = ("mlperf-v5.1-nvidia-tyche-ngpu72-ngc25.09-nemo-llama31-8b",
            "mlperf-v5.1-nvidia-tyche-ngpu512-ngc25.09-nemo-llama31-8b")


def _run(run_id: str):
    return next(r for r in load_runs().runs if r.id == run_id)


@pytest.fixture(scope="module")
def cv():
    return lofo.cross_validate()


# ---- engine ---------------------------------------------------------------------------------------

def test_the_optimizer_phase_is_the_longer_of_gpu_and_host():
    assert stt.optimizer_phase_time(0.0066, 0.0632) == pytest.approx(0.0632)
    assert stt.optimizer_phase_time(0.5, 0.0632) == pytest.approx(0.5)
    got = stt.optimizer_phase_time(np.array([0.01, 0.2]), 0.05)
    assert np.allclose(got, [0.05, 0.2])


def test_the_embedding_bucket_caps_the_bucket_count():
    # Llama 3.1 8B at TP 1: 8.03e9 parameters, embedding 128256 x 4096 = 525.3e6, UF's buckets
    # of 134217728 parameters (60 of them), but the last one holds the whole embedding
    emb = 128256 * 4096
    assert overlap.bucket_count(8.03e9, 134217728) == 60
    assert overlap.bucket_count(8.03e9, 134217728, emb) == pytest.approx(8.03e9 / emb)
    # NVIDIA's 768M-parameter buckets are bigger than the embedding: 11, as before
    assert overlap.bucket_count(8.03e9, 768e6, emb) == 11
    assert overlap.bucket_count(1e9, 4e7, 2e9) == 1.0      # never below one bucket


def test_only_a_once_per_step_reduction_and_the_gather_see_the_embedding_bucket():
    # 60 buckets, the embedding's bucket worth 1/15 of the buffer; no compute to run beside: all
    kw = dict(overlap=True, backward=0.0, forward=0.0, slowdown=0.0)
    _, once = stt.dp_time_per_step(0.3, 0.15, 60, 1, last_buckets=15, **kw)
    assert once == pytest.approx(0.3 + 0.15)
    kw.update(backward=1.0, forward=1.0)
    _, once = stt.dp_time_per_step(0.3, 0.15, 60, 1, last_buckets=15, **kw)
    assert once == pytest.approx(0.3 / 15 + 0.15 / 15)
    _, zero2 = stt.dp_time_per_step(0.3, 0.15, 60, 4, last_buckets=15, **kw)
    assert zero2 == pytest.approx(4 * 0.3 / 60 + 0.15 / 15)   # ZeRO-2: every micro-batch's
    _, plain = stt.dp_time_per_step(0.3, 0.15, 60, 1, **kw)
    assert plain == pytest.approx(0.3 / 60 + 0.15 / 60)
    # the buckets run beside the compute slow it by σ of their time
    kw["slowdown"] = 0.189
    _, slowed = stt.dp_time_per_step(0.3, 0.15, 60, 1, last_buckets=15, **kw)
    assert slowed == pytest.approx((0.3 + 0.15) * (1 / 15 + 0.189 * 14 / 15))


# ---- the host time ----------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(st.floats(min_value=0.0, max_value=0.2))
def test_the_step_at_any_host_time_is_the_evaluated_one(host):
    """host_fit.step_at (one evaluation, the optimizer term moved) equals evaluating the run with
    that host time in its framework profile."""
    run = _run(GB200_8B[1])
    hw = load_profile(run.hardware)
    step0, update, declared = host_fit.gpu_only(run, hw)
    assert declared == load_framework("megatron").time.step_host_s
    p = run_problem(run, hw)
    assert p.framework is not None
    fw = replace(p.framework, time=replace(p.framework.time, step_host_s=host))
    t = evaluate(replace(p, framework=fw), Candidates.from_layouts([run_layout(run)])).time
    assert float(host_fit.step_at(step0, update, 0.0, host)) == pytest.approx(float(t.step[0]),
                                                                               rel=1e-12)


def test_the_shipped_host_time_is_the_fit_on_every_family():
    """megatron.toml's step_host_s is refit_host on all the run set's Megatron families (to the
    grid's 0.1 ms): re-fit it when the runs or the profiles change."""
    obs = [o for p in lofo._profiles() for o in lofo._curves(p)[0].values()]
    fams = {o.family for o in obs if o.host_s is not None}
    assert "mlperf-nvidia/megatron/GB200" in fams and "mlperf-uf/megatron/B200" in fams
    fitted = host_fit.refit_host(obs, fams)
    assert fitted == pytest.approx(load_framework("megatron").time.step_host_s, abs=1e-4)
    prov = load_framework("megatron").provenance["time.step_host_s"]
    assert prov.kind == "fitted" and "MLPerf" in prov.data


def test_the_paper_rows_keep_no_host_time():
    assert published.megatron_2021().time.step_host_s == 0.0
    assert load_framework("torchtitan").time.step_host_s == 0.0


def test_each_family_is_predicted_with_the_host_time_fitted_without_it(cv):
    key = f"{host_fit.FRAMEWORK}.{host_fit.KEY}"
    seen = 0
    for f in cv.families:
        for c in (c for c in f.constants if c.key == key):
            seen += 1
            assert f.family not in c.source, c.source
            assert c.kind == "fitted end to end, this family left out"
    assert seen >= 5
    gb = next(f for f in cv.families if f.family == "mlperf-nvidia/megatron/GB200")
    host = next(c.value for c in gb.constants if c.key == key)
    # the GB200 fold's host time is not the all-family one: GB200's own runs are out of it
    assert host != pytest.approx(load_framework("megatron").time.step_host_s, abs=1e-4)


def test_the_gb200_8b_runs_meet_the_worst_case_target_out_of_sample(cv):
    """Issue #30: leave-one-family-out worst |error| <= 25 %. The two v5.1 8B GB200 runs missed
    by 27.8 % and 57.3 % (fast) before the host time and their own bucket size, and the 512-GPU
    one by +27.0 % (slow) with a host time that also carried the UF runs' slower overlapped
    reduction, until the compute slowdown beside overlapped collectives was priced."""
    gb = next(f for f in cv.families if f.family == "mlperf-nvidia/megatron/GB200")
    errs = {r.run: r.error_pct for r in gb.residuals}
    for run_id in GB200_8B:
        assert abs(errs[run_id]) <= cv.target_worst_pct, (run_id, errs[run_id])


# ---- the runs' settings ---------------------------------------------------------------------------

def test_the_8b_runs_carry_their_configs_bucket_size_and_dtypes():
    for run_id in GB200_8B:   # BUCKET_SIZE=768000000 in config_common_8b.sh
        t = run_framework(_run(run_id)).time
        assert (t.bucket_params, t.bucket_params_per_dp_rank) == (768e6, 0.0)
        assert t.reduce_dtype == "bf16"
    uf = [r for r in load_runs().runs
          if r.family == "mlperf-uf/megatron/B200" and r.tuning is None]   # the pretraining runs
    assert len(uf) == 8
    for r in uf:   # UF's b200_nemo/pretrain.py: grad_reduce_in_fp32=False; custom.yaml's bucket
        fw = run_framework(r)
        assert (fw.time.reduce_dtype, fw.time.bucket_params) == ("bf16", 134217728.0)
        assert fw.memory.fp8_params
    # the measured step of the 512-GPU run is the log's
    assert _run(GB200_8B[1]).measured.step_time_s == 0.0889


def test_the_host_time_shows_in_the_optimizer_term():
    ev = evaluate_run(_run(GB200_8B[1]))
    assert float(ev.time.optimizer[0]) == pytest.approx(load_framework("megatron").time.step_host_s)


def test_runs_that_clip_gradients_on_the_device_state_no_host_time_and_stay_out_of_the_fit():
    """The v5.1 llama2_70b_lora configs of NVIDIA's implementation (and UF's copy of it) set
    ON_DEVICE_CLIP_GRAD=1 (config_common.sh:37): those runs, and only those, state a host time
    of 0; they are predicted with it and left out of the host-time fit (Obs.host_s None)."""
    stated = {r.id for r in load_runs().runs if "time.step_host_s" in r.settings}
    lora_nv = {r.id for r in load_runs().runs if r.tuning is not None
               and r.source.config.startswith(("NVIDIA/", "University-of-Florida/"))}
    assert stated == lora_nv and len(stated) == 7
    for run in (r for r in load_runs().runs if r.id in stated):
        assert run.settings["time.step_host_s"] == 0.0
        assert run_framework(run).time.step_host_s == 0.0
        assert "ON_DEVICE_CLIP_GRAD=1" in run.assumed["settings"]
    obs = {o.id: o for p in lofo._profiles() for o in lofo._curves(p)[0].values()}
    assert all(obs[i].host_s is None for i in stated)
    assert all(obs[r.id].host_s is not None for r in load_runs().runs
               if r.id not in stated and run_framework(r).name == "megatron")
