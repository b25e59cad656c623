"""Calibrating on measured evidence: link fits, the compute factor, the written profile."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from planner.evidence import read_file
from planner.calibration.fit_links import fit_fragmentation, fit_nccl
from planner.calibration.fit_compute import RunSpec, predict
from planner.specs.hardware_toml import load_profile, load_profile_file
from planner.specs.layout import Layout
from planner.specs.presets import get_preset
from evidence_paths import DATA, real

REFERENCE = Path(__file__).resolve().parent.parent.parent / "shared" / "reference"


def test_nvlink_fit_from_superbench_all_reduce():
    """A100 NVLink3: nccl-tests busbw 235.26 GB/s of 300 GB/s -> bus efficiency ~0.78."""
    e = read_file(real("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt"))
    eff, lat = fit_nccl(e, load_profile("a100-40g"))
    assert eff.key == "scale_up.bus_efficiency" and lat.key == "scale_up.latency_us"
    assert eff.after == pytest.approx(235.26 / 300, rel=0.03)
    assert 1.0 < lat.after < 5.0                               # µs per ring step
    assert eff.residual_after_pct < eff.residual_before_pct and eff.residual_after_pct < 5


def test_gb200_rack_fit_and_unidentified_latency():
    e = read_file(real("nccl/coreweave-pr43_gb200-nvl72-1rack-72gpu_all_reduce_perf.txt"))
    eff, lat = fit_nccl(e, load_profile("gb200-nvl72"))
    assert eff.key == "scale_up.bus_efficiency"                # 72 ranks in one NVLink domain
    assert eff.after == pytest.approx(835 / 900, rel=0.05)     # busbw / NVLink5 900 GB/s
    assert lat.after is None and "no latency-bound rows" in lat.note   # rows from 512 MiB up


def test_small_sendrecv_identifies_latency_only():
    e = read_file(real("nccl/nccl-tests-issue214_a40-2node-1gpu-each_sendrecv_perf_EXCERPT.txt"))
    eff, lat = fit_nccl(e, load_profile("l40s"))
    assert eff.key == "scale_out.bus_efficiency" and eff.after is None
    assert 25 < lat.after < 40                                  # ~31 µs one-way at 256 B - 4 KiB


def test_fragmentation_from_megatron_memory_line():
    e = read_file(real("training/megatron-lm-issue756_mixtral-8x7b_h100-16gpu_EXCERPT.log"))
    f = fit_fragmentation(e, 0.08)
    assert f.after == pytest.approx(61480.0 / 54250.98583984375 - 1)


def test_cli_writes_profile_no_clobber_and_fit_takes_it(dtplan, tmp_path):
    src = real("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt")
    out = tmp_path / "mycluster.toml"
    r = dtplan("calibrate", "--from", src, "--hardware", "a100-40g", "-o", out, "-f", "json")
    assert r.code == 0, r
    cal = r.json()["calibration"]
    assert set(cal["calibrated"]) == {"scale_up.bus_efficiency", "scale_up.latency_us"}
    assert "scale_out.bus_efficiency" in cal["unchanged"]
    prof = load_profile_file(out)
    assert prof.name == "mycluster"
    assert prof.scale_up.bus_efficiency == pytest.approx(cal["calibrated"]["scale_up.bus_efficiency"],
                                                         rel=1e-3)
    assert prof.scale_out.bus_efficiency == load_profile("a100-40g").scale_out.bus_efficiency
    again = dtplan("calibrate", "--from", src, "--hardware", "a100-40g", "-o", out)
    assert again.code == 2 and "exists" in again.err and "--force" in again.err
    fit = dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "--hardware-file", out, "-f", "json")
    assert fit.code in (0, 1), fit


def test_cli_needs_a_base_profile_for_output(dtplan, tmp_path):
    src = real("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt")
    r = dtplan("calibrate", "--from", src, "-o", tmp_path / "x.toml")
    assert r.code == 2 and "-o" in r.err and "--hardware" in r.err


def _modern() -> list[dict]:
    for base in (REFERENCE, Path("/work/shared/reference")):
        if (base / "calibration_modern.json").is_file():
            return json.loads((base / "calibration_modern.json").read_text())["cases"]
    pytest.skip("shared/reference/calibration_modern.json not present")


def _run(case: dict) -> RunSpec:
    from planner.specs.framework import load_framework

    i = case["inputs"]
    lay = Layout(tp=i["tp"], pp=i["pp"], dp=i["dp"], zero=i["zero"], micro_batch=i["micro_batch"],
                 recompute=i["recompute"], sp=i["tp"] > 1)
    return RunSpec(get_preset(i["model"]["preset"]), i["gpus"], i["seq_len"], i["global_batch"], lay,
                   framework=load_framework("torchtitan"))


def test_calibrating_on_one_torchtitan_run_predicts_the_others_closer(dtplan, tmp_path):
    """Calibrate on torchtitan's 8B / 8 H100 run (our log line with its published 5,762 tps),
    then predict the other bf16 runs of the same cluster (calibration_modern.json)."""
    cases = {c["id"]: c for c in _modern()}
    out = tmp_path / "grand-teton.toml"
    r = dtplan("calibrate", "--from", DATA / "torchtitan_llama3.1-8b_8xh100.log",
               "--plan", DATA / "llama3.1-8b-8xh100-fsdp8.yaml", "-o", out, "-f", "json")
    assert r.code == 0, r
    base, calibrated = load_profile("h100"), load_profile_file(out)
    others = [c for cid, c in cases.items() if c["set"] == "throughput" and cid !=
              "torchtitan-llama3.1-8b-8xh100-fsdp8-eager" and c["inputs"]["precision"] == "mixed"
              and c["inputs"]["pp"] == 1]
    assert len(others) >= 4
    err = {}
    for name, hw in (("before", base), ("after", calibrated)):
        err[name] = [abs(math.log(predict(_run(c), dataclasses.replace(hw, gpu=dataclasses.replace(
            hw.gpu, memory_bytes=95 * 2**30)))["tokens_per_s_per_gpu"]
            / c["published"]["value"])) for c in others]
    assert sum(err["after"]) < sum(err["before"])
    assert max(err["after"]) < max(err["before"])


def test_compute_factor_from_a_trace_ignores_communication():
    """A trace's compute kernels (not the step) set the factor: twice the estimated compute
    time is matched, whatever the exposed communication."""
    from planner.calibration.fit_compute import fit_compute
    from planner.evidence.model import Evidence, StepStats, TraceSummary

    hw = load_profile("h100")
    run = RunSpec(get_preset("llama3.1-8b"), 8, 8192, 16, Layout(dp=8, zero=3, micro_batch=2,
                                                                 recompute="selective"))
    est = predict(run, hw)
    compute_ms = (est["t.compute"] + est["t.recompute"] + est["t.optimizer"]) * 1e3
    ex = {"gemm": 1.5 * compute_ms, "attention": 0.5 * compute_ms, "other_compute": 0.0,
          "comm:all_gather": 300.0, "idle": 10.0}
    tr = TraceSummary(["ProfilerStep#3"], [sum(ex.values())], ex, {}, dict(ex))
    ev = Evidence(path="rank0.json", kind="profiler-trace", format="kineto", trace=tr,
                  steps=StepStats(1, 0))
    f = fit_compute(ev, run, hw)
    assert 0.3 < f.after < 0.6             # below 1/2: not all of compute scales with kernel speed
    assert f.residual_before_pct == pytest.approx(50, abs=1) and f.residual_after_pct < 1


def test_compute_calibration_drops_the_base_error_bands(dtplan, tmp_path):
    out = tmp_path / "v100ish.toml"
    r = dtplan("calibrate", "--from", real("training/bigscience_megatron-lm_gpt-18b_v100-32gb_4x4_"
                                           "tp4-pp4.log"),
               "--plan", DATA / "gpt-18b_16xa100_tp4-pp4.yaml", "-o", out, "-f", "json")
    assert r.code == 0, r
    assert load_profile("a100-40g").efficiency.error_bands           # the base has bands
    prof = load_profile_file(out)
    assert prof.efficiency.error_bands == {}
    assert prof.efficiency.sustained_matmul_fraction < load_profile(
        "a100-40g").efficiency.sustained_matmul_fraction             # a V100 run: slower kernels
