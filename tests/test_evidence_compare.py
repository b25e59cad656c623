"""`dtplan compare`: a real trace's categories sum to its step; JSON has one key per term."""

from __future__ import annotations

import pytest

from evidence_paths import DATA, real

PLAN = DATA / "gpt2_2xa100_ddp.yaml"


def test_compare_real_trace_sums_to_step(dtplan):
    trace = real("traces/hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz")
    r = dtplan("compare", trace, "--plan", PLAN, "-f", "json")
    assert r.code == 0, r
    terms = r.json()["terms"]
    parts = [k for k in terms if k.startswith(("compute.", "comm.")) or k in ("memcpy", "idle")]
    total = sum(terms[k]["measured_s"] for k in parts)
    assert total == pytest.approx(terms["step"]["measured_s"], rel=0.02)
    assert {"step", "compute", "comm.all_reduce", "comm.broadcast", "idle", "memcpy"} <= set(terms)
    assert terms["comm.all_reduce"]["estimate_s"] > 0            # DDP's gradient all-reduce
    assert r.json()["largest_discrepancy"].startswith("idle: measured 169.9 ms where the "
                                                      "estimate has 0.0 ms")


def test_compare_table_and_markdown(dtplan):
    trace = real("traces/hta_rank0_128rank-job_sampled.pt.trace.json.gz")
    r = dtplan("compare", trace, "--plan", PLAN)
    assert r.code == 0 and "comm.all_to_all" in r.out and "idle: measured 341.3 ms" in r.out, r.out
    md = dtplan("compare", trace, "--plan", PLAN, "-f", "markdown")
    assert md.code == 0 and "| term | measured | estimate | ratio |" in md.out


def test_compare_log_only_and_memory(dtplan):
    log = DATA / "torchtitan_llama3.1-8b_8xh100.log"
    r = dtplan("compare", log, "--plan", DATA / "llama3.1-8b-8xh100-fsdp8.yaml", "-f", "json")
    assert r.code == 0, r
    d = r.json()
    assert list(d["terms"]) == ["step"]
    # 16 sequences x 8192 tokens / 5,762 tok/s/GPU / 8 GPUs
    assert d["terms"]["step"]["measured_s"] == pytest.approx(16 * 8192 / 5762 / 8)
    assert d["memory"]["peak_reserved"]["measured_bytes"] == pytest.approx(82.40 * 2**30)


def test_compare_needs_plan(dtplan):
    r = dtplan("compare", DATA / "torchtitan_llama3.1-8b_8xh100.log")
    assert r.code == 2 and "--plan" in r.err


def test_largest_discrepancy_names_the_link():
    """A synthetic two-node FSDP step whose reduce-scatter is far slower than the estimate."""
    from planner.calibration.compare import compare_run
    from planner.calibration.fit_compute import RunSpec, predict
    from planner.evidence.model import Evidence, StepStats, TraceSummary
    from planner.evidence.stats import spread
    from planner.specs.hardware_toml import load_profile
    from planner.specs.layout import Layout
    from planner.specs.presets import get_preset

    hw = load_profile("h100")
    run = RunSpec(get_preset("llama3.1-8b"), 16, 4096, 32, Layout(dp=16, zero=3, micro_batch=2,
                                                                  recompute="full"))
    est = predict(run, hw)
    compute_ms = (est["t.compute"] + est["t.recompute"] + est["t.optimizer"]) * 1e3
    ex = {"gemm": compute_ms, "attention": 0.0, "other_compute": 0.0,
          "comm:reduce_scatter": 900.0, "comm:all_gather": 0.0, "memcpy": 0.0, "idle": 5.0}
    tr = TraceSummary(steps=["ProfilerStep#1"], step_ms=[sum(ex.values())], exclusive_ms=ex,
                      overlapped_ms={}, busy_ms=dict(ex))
    ev = Evidence(path="rank0.json", kind="profiler-trace", format="kineto", trace=tr,
                  steps=StepStats(1, 0, step_time_s=spread([sum(ex.values()) / 1e3])))
    line = compare_run([ev], run, hw).largest
    assert line.startswith("comm.reduce_scatter") and "x the estimate" in line
    eff = hw.scale_out.bus_efficiency   # the profile's own (0.94: nccl-tests NDR busbw)
    assert f"scale_out.bus_efficiency {eff:.2f} ->" in line and "dp_exposed+zero3_exposed" in line


def test_two_rank_traces_and_idle_at_step_start(dtplan):
    t0 = real("traces/hta_rank0_128rank-job_sampled.pt.trace.json.gz")
    t1 = real("traces/hta_rank1_128rank-job_sampled.pt.trace.json.gz")
    r = dtplan("compare", t0, t1, "--plan", PLAN, "-f", "json")
    assert r.code == 0, r
    d = r.json()
    assert any("slowest hta_rank1" in n for n in d["notes"])
    start = d["terms"]["idle.at_step_start"]["measured_s"]
    assert 0 <= start <= d["terms"]["idle"]["measured_s"]


def test_megatron_timers_term_by_term(dtplan):
    log = real("training/bigscience_megatron-lm_gpt-18b_v100-32gb_4x4_tp4-pp4.log")
    r = dtplan("compare", log, "--plan", DATA / "gpt-18b_16xa100_tp4-pp4.yaml", "-f", "json")
    assert r.code == 0, r
    t = r.json()["terms"]
    assert t["compute"]["measured_s"] == pytest.approx((175.99 + 514.86) / 1e3)   # timer medians
    assert t["embedding all-reduce"]["measured_s"] == pytest.approx(0.4186)
    assert t["step"]["measured_s"] == pytest.approx(1.3806)
    assert r.json()["largest_discrepancy"].startswith("compute ")   # V100 run vs A100 profile


def test_report_compare_section(dtplan):
    trace = real("traces/hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz")
    r = dtplan("report", PLAN, "--compare", trace, "--no-charts", "-o", "-")
    assert r.code == 0, r
    tail = r.out.split("Measured run versus the estimate", 1)[1]
    assert "**Largest discrepancy:** idle: measured 169.9 ms" in tail
    assert "| comm.all_reduce | 13.15 |" in tail
