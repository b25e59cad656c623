"""Failure and checkpoint planning: planner.resilience.planning, engine.resilience and `dtplan checkpoint`
in its derived form. Published figures: Daly 2006 Fig. 3-5, Narayanan et al. SC21 Sec. 5.10,
Llama 3 (419 interruptions in 54 days); see shared/reference/CALIBRATION.md §6."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import run_dtplan
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import checkpoint as ckpt_eq
from planner.engine import resilience as res_eq
from planner.specs.presets import get_preset
from planner.resilience.contents import checkpoint_contents
from planner.resilience.planning import (checkpoint_write, failure_rate, interval_optimum,
                                         plan_resilience, restart_cost, straggler, training_time)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN, H, DAY = 60.0, 3600.0, 86400.0


def cli(*args: str):
    return run_dtplan(*args)


# --- interval: Daly's and Young's published figures through the API -------------------------

@pytest.mark.parametrize("mtbf_min,published,eq37", [(1440, 117, 116.69), (360, 57, 56.71),
                                                     (15, 9.1, 9.14)])
def test_daly_examples(mtbf_min, published, eq37):
    o = interval_optimum(5 * MIN, mtbf_min * MIN, restart_s=10 * MIN)
    assert o.daly_interval_s / MIN == pytest.approx(eq37, abs=0.005)
    assert round(o.daly_interval_s / MIN, 0 if published > 10 else 1) == published
    assert not (mtbf_min == 15 and o.first_order_valid)  # δ and R not small against M


def test_seed_optimum():
    o = interval_optimum(3 * MIN, 50 * H)
    assert o.young_interval_s / MIN == pytest.approx(134.16, abs=0.01)
    assert round(o.daly_interval_s / MIN, 1) == 132.2
    assert o.interval_s == o.daly_interval_s and not o.floored
    assert o.goodput_fraction == pytest.approx(1 - o.waste_fraction)
    assert o.waste_fraction == pytest.approx(o.overhead_fraction + o.lost_work_fraction
                                             + o.restart_fraction)


@settings(max_examples=60, deadline=None)
@given(delta=st.floats(1.0, 3600.0), mtbf=st.floats(3600.0, 1e7), restart=st.floats(0.0, 3600.0))
def test_waste_convex_and_minimal_at_optimum(delta, mtbf, restart):
    o = interval_optimum(delta, mtbf, restart)
    tau = np.linspace(0.01, 2.0, 400) * o.young_interval_s
    w = ckpt_eq.waste_fraction(tau, delta, mtbf, restart)
    assert np.all(np.diff(w, 2) >= -1e-12 * np.abs(w[1:-1]))            # convex
    assert abs(tau[np.argmin(w)] - o.young_interval_s) <= tau[1] - tau[0]  # minimum at Young
    if o.first_order_valid:
        # Daly's interval sits ≈ 2δ/3 below Young's (the first-order minimiser), so a sweep in
        # steps of 2δ lands within one step of it.
        step = 2 * delta
        coarse = np.arange(1, 2 * o.young_interval_s / step + 2) * step
        best = coarse[np.argmin(ckpt_eq.waste_fraction(coarse, delta, mtbf, restart))]
        assert abs(best - o.daly_interval_s) <= step


# --- size and write time -------------------------------------------------------------------

def test_narayanan_1T_size_and_write():
    assert res_eq.write_time(13.8e12, 273e9, 512, 50e9) == pytest.approx(50.55, abs=0.01)
    c = checkpoint_contents(1.008e12, 3072, tp=8, pp=64, zero_stage=0)
    assert c.bytes_per_param == 14
    assert c.total_bytes / 1e12 == pytest.approx(14.11, abs=0.01)       # +2% vs 13.8 TB
    assert c.total_bytes / 13.8e12 - 1 == pytest.approx(0.023, abs=0.002)
    w = checkpoint_write(c.total_bytes, 273e9, writers=c.effective_writers,
                         link_bytes_per_s=50e9, busiest_rank_bytes=c.busiest_rank_bytes)
    assert w.binds == "storage" and w.write_s == pytest.approx(51.7, abs=0.1)
    assert res_eq.reload_time(13.8e12, 1e12) == pytest.approx(13.8)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("tp,pp,gpus", [(1, 1, 64), (8, 4, 256), (2, 8, 512)])
def test_per_rank_times_ranks_is_total(zero, tp, pp, gpus):
    c = checkpoint_contents(70e9, gpus, tp=tp, pp=pp, zero_stage=zero)
    for x in c.items:
        assert x.per_rank_bytes * x.writers == pytest.approx(x.total_bytes)
    big = {x.name.split(" (")[0]: x for x in c.items}
    dp = gpus // (tp * pp)
    assert big["fp32 master weights"].writers == tp * pp * (dp if zero >= 1 else 1)
    assert big["weights"].writers == tp * pp * (dp if zero >= 3 else 1)
    # model states are ~all of it; gradients are not saved
    assert sum(x.total_bytes for x in c.items if not x.basis) == pytest.approx(14 * 70e9)


def test_recipes_and_small_items():
    c = checkpoint_contents(1e9, 8, precision="bf16-pure")
    assert [x.name for x in c.items][:2] == ["weights (16-bit)", "optimizer moments (adam)"]
    assert c.bytes_per_param == 2 + 4
    small = {x.name: x for x in c.items if x.basis}
    assert set(small) == {"LR scheduler", "RNG states", "data-loader cursor", "loss scale",
                          "parallel layout metadata"}
    assert small["RNG states"].total_bytes == 8 * small["RNG states"].per_rank_bytes
    assert small["loss scale"].writers == 1


def test_async_stall_and_link_bound():
    w = checkpoint_write(1e12, 1e12, writers=4, link_bytes_per_s=50e9,
                         busiest_rank_bytes=2.5e11, pcie_bytes_per_s=50e9, async_checkpoint=True)
    assert w.binds == "node links" and w.write_s == pytest.approx(5.0)
    assert w.stall_s == pytest.approx(5.0) and w.blocking_s == w.stall_s
    p = plan_resilience(70e9, 64, job_mtbf_s=50 * H, async_checkpoint=True)
    per_gpu = p.contents.busiest_rank_bytes                     # ≈ 14 × 70e9 / 64 = 15.3 GB
    assert p.write.blocking_s == pytest.approx(per_gpu / 50e9)  # PCIe copy only: 0.31 s
    assert p.write.write_s == pytest.approx(9.8, abs=0.01)      # 0.98 TB at 100 GB/s, background
    assert not p.optimum.floored and not p.async_write_exceeds_interval
    q = plan_resilience(70e9, 64, job_mtbf_s=0.03 * H, async_checkpoint=True)
    assert q.async_write_exceeds_interval and q.optimum.floored
    assert q.optimum.interval_s == q.write.write_s  # the background write floors the interval


# --- failures, restart, time to train ------------------------------------------------------

def test_llama3_mtti():
    f = failure_rate(interruptions=419, period_s=54 * DAY)
    assert round(f.job_mtbf_s / H, 2) == 3.09
    assert failure_rate(interruptions=466, period_s=54 * DAY).job_mtbf_s / H == pytest.approx(2.78,
                                                                                              abs=0.01)
    assert failure_rate(gpus=16384, gpu_mtbf_s=16384 * 3 * H).job_mtbf_s == pytest.approx(3 * H)
    assert failure_rate(gpus=16384, node_mtbf_s=2048 * 3 * H).job_mtbf_s == pytest.approx(3 * H)


def test_restart_defaults():
    r = restart_cost(reload_s=30)
    assert r.total_s == pytest.approx(15 * MIN + 30)  # MegaScale: back within 15 min + reload
    assert restart_cost(reload_s=30, total_s=600).total_s == 600


def test_time_to_train_405b():
    """Llama-3.1-405B, 15.6T tokens, 16,384 H100 at an ASSUMED 400 TFLOP/s each:
    tokens/s = 16384 × 400e12 / (6 × 405e9) ≈ 2.70M; MTTI 3 h; default h100 storage."""
    rate = 16384 * 400e12 / (6 * 405e9)
    p = plan_resilience(get_preset("llama3.1-405b").param_count(), 16384, job_mtbf_s=3 * H,
                        tokens=15.6e12, tokens_per_s=rate, price_per_gpu_hour=2.0)
    t = p.training
    assert t.ideal_s / DAY == pytest.approx(66.9, abs=0.1)
    assert p.write.write_s == pytest.approx(56.8, abs=0.1) and p.write.binds == "storage"
    assert p.optimum.daly_interval_s / MIN == pytest.approx(17.8, abs=0.1)
    assert p.optimum.goodput_fraction == pytest.approx(0.81, abs=0.005)
    assert t.with_failures_s / DAY == pytest.approx(82.6, abs=0.1)
    assert t.ideal_gpu_hours == pytest.approx(26.3e6, rel=0.002)
    assert t.cost == pytest.approx(2.0 * t.gpu_hours)
    assert training_time(1e9, 1e3, 8, 0.0).with_failures_s == float("inf")


def test_straggler():
    s = straggler(1.2, 1024, run_s=100 * DAY, restart_s=0)
    assert s.run_with_straggler_s == pytest.approx(120 * DAY)
    assert s.gpus_lost_on_eviction == 8
    assert s.run_after_eviction_s == pytest.approx(100 * DAY * 1024 / 1016)
    assert s.break_even_slowdown == pytest.approx(1024 / 1016) and s.evict
    # TP·PP = 32 > a node: evicting one node idles its whole replica
    assert straggler(1.2, 1024, replica_gpus=32).gpus_lost_on_eviction == 32
    assert not straggler(1.001, 64, replica_gpus=32).evict  # losing half the job costs more
    assert res_eq.straggler_step_time(np.array([1.0, 2.0]), 1.2).tolist() == [1.2, 2.4]


# --- CLI ----------------------------------------------------------------------------------

def test_cli_simple_form_unchanged():
    j = json.loads(cli("checkpoint", "--cost-min", "3", "--mtbf-hours", "50", "-f", "json").stdout)
    assert round(j["optimum"]["daly_interval_s"] / 60, 1) == 132.2


def test_cli_derived():
    rate = round(16384 * 400e12 / (6 * 405e9))
    args = ["checkpoint", "--model", "llama3.1-405b", "--gpus", "16384", "--job-mtbf-hours", "3",
            "--tokens-per-s", rate, "--train-tokens", "15.6e12"]
    p = cli(*args)
    assert p.returncode == 0, p.stderr
    for s in ("Checkpoint contents", "optimizer moments", "RNG states", "5.68 TB",
              "bound by the file system", "Daly", "goodput", "82.6", "66.9"):
        assert s in p.stdout
    j = json.loads(cli(*args, "--straggler", "1.2", "-f", "json").stdout)
    assert j["command"] == "checkpoint" and j["ok"]
    assert j["write"]["write_s"] == pytest.approx(56.8, abs=0.1)
    assert j["failures"]["job_mtbf_s"] == 3 * H
    assert j["training"]["with_failures_s"] / DAY == pytest.approx(82.6, abs=0.1)
    assert j["straggler"]["run_with_straggler_s"] > j["straggler"]["run_after_eviction_s"]
    k = json.loads(cli("checkpoint", "--params", "1.008e12", "--gpus", "3072", "--tp", "8",
                       "--pp", "64", "--zero", "0", "--storage-gbs", "273",
                       "--interruptions", "419", "--over-days", "54", "--intervals", "10,60",
                       "--async", "-f", "json").stdout)
    assert round(k["failures"]["job_mtbf_s"] / H, 2) == 3.09 and len(k["rows"]) == 2
    assert k["write"]["async_checkpoint"] and k["write"]["blocking_s"] < k["write"]["write_s"]


@pytest.mark.parametrize("args,option", [
    (("--model", "llama3.1-405b", "--job-mtbf-hours", "3"), "--gpus"),
    (("--model", "nosuch", "--gpus", "8", "--job-mtbf-hours", "3"), "--model"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "3", "--gpu-mtbf-hours", "9"),
     "--gpu-mtbf-hours"),
    (("--params", "7e9", "--gpus", "12", "--tp", "8", "--job-mtbf-hours", "3"), "--gpus"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "-3"), "--job-mtbf-hours"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "3", "--straggler", "0.5"),
     "--straggler"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "3", "--tokens-per-s", "1e6"),
     "--train-tokens"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "3", "--storage-gbs", "0"),
     "--storage-gbs"),
    (("--params", "7e9", "--gpus", "8", "--job-mtbf-hours", "3", "--zero", "4"), "--zero"),
    (("--gpus", "8", "--cost-min", "3", "--mtbf-hours", "50"), "--gpus"),
    (("--mtbf-hours", "50",), "--cost-min"),
])
def test_cli_bad_input(args, option):
    p = cli("checkpoint", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.startswith("dtplan: error:") and option in p.stderr
    assert p.stderr.strip().count("\n") == 0


def test_cli_no_progress_exits_1():
    p = cli("checkpoint", "--params", "1e12", "--gpus", "8", "--job-mtbf-hours", "0.2",
            "--restart-min", "30")
    assert p.returncode == 1 and "cannot make progress" in p.stdout


def _cp_inputs(tp: int, cp: int, dp: int, shard_group=None):
    from pathlib import Path

    from planner.resolve.job import resolve_plan
    from planner.resolve.plan_file import validate_plan
    layout = {"tp": tp, "cp": cp, "dp": dp, "zero": 1, "micro_batch": 1, "recompute": "full"}
    if shard_group:
        layout["shard_group"] = shard_group
    plan = validate_plan({"model": "llama3-70b", "hardware": "h100", "gpus": tp * cp * dp,
                          "seq_len": 32768, "layout": layout, "batch": {"global_batch": 64},
                          "checkpoint": {"interval_min": 30, "gpu_mtbf_hours": 50000}})
    return resolve_plan(plan, Path("."), "plan")


@pytest.mark.parametrize("tp,cp,dp,shard", [(4, 2, 8, None), (2, 4, 4, None), (4, 2, 8, 4)])
def test_check_and_report_share_one_checkpoint_plan(tp, cp, dp, shard):
    """`check` (gate.checkpoint_figures) and `report`/`estimate` (api.resilience_for) size and
    time the same checkpoint: all DP×TP×PP×CP GPUs write, ZeRO shards over DP×CP."""
    from planner.api import resilience_for
    from planner.evaluation.estimate import estimate
    from planner.gate.check import checkpoint_figures
    from planner.resilience.planning import layout_checkpoint
    inp = _cp_inputs(tp, cp, dp, shard)
    est = estimate(inp.model, inp.hardware, inp.gpus, inp.layout, seq_len=inp.seq_len,
                   global_batch=inp.global_batch)
    report = resilience_for(est, inp.hardware, inp.model, gpu_mtbf_s=50000 * H)
    check = checkpoint_figures(inp, "plan")
    assert check.cost_s == pytest.approx(report.write.blocking_s, rel=1e-12)
    assert check.mtbf_s == pytest.approx(report.failures.job_mtbf_s, rel=1e-12)
    contents = layout_checkpoint(inp.model.param_count(), inp.layout)
    assert contents.gpus == tp * cp * dp == report.contents.gpus
    assert contents.busiest_rank_bytes == report.contents.busiest_rank_bytes
