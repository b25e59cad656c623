"""Calibration against published Megatron-LM runs (CALIBRATION.md §2-3) and FLOPs identities."""

from __future__ import annotations

import pytest

from planner.calibration.published import calibrate, case_by_id, load_cases
from planner.evaluation.estimate import estimate
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

BAR = 10.0  # per cent, Megatron-LM rows
FSDP_BAR = 15.0  # per cent, torchtitan FSDP rows under the torchtitan profile (worst 10.7 %)


@pytest.fixture(scope="module")
def report():
    return calibrate("a100-80g")


@pytest.fixture(scope="module")
def rows(report):
    return {r.case: r for r in report.rows}


KORTHIKANTI = [f"korthikanti-table5-{m}/{col}" for m in ("22B", "175B", "530B", "1T")
               for col in ("full-recompute", "sp+selective")]
NARAYANAN = [f"narayanan-table1-{m}" for m in ("1.7B", "3.6B", "7.5B", "18.4B", "39.1B", "76.1B",
                                              "145.6B", "310.1B", "529.6B", "1008B")]


TORCHTITAN = ["torchtitan-llama3-8B-bs1-selective-layer", "torchtitan-llama3-8B-bs1-selective-op",
              "torchtitan-llama3-70B-bs1-full", "torchtitan-llama2-13B-bs2-none",
              "torchtitan-llama2-13B-bs2-selective-layer", "torchtitan-llama2-13B-bs2-selective-op",
              "torchtitan-llama2-70B-bs1-selective-op", "torchtitan-llama2-70B-bs2-full"]


def test_every_case_has_a_row(rows):
    assert set(KORTHIKANTI + NARAYANAN + TORCHTITAN + ["korthikanti-530B-dp8-2240gpu"]) == set(rows)


@pytest.mark.parametrize("case", TORCHTITAN)
def test_torchtitan_fsdp_tokens_per_gpu_within_bar(rows, case):
    r = rows[case]
    assert r.metric == "tokens_per_s_per_gpu" and "ZeRO-3" in r.layout
    assert abs(r.error_pct) <= FSDP_BAR, f"{case}: {r.predicted:.0f} vs {r.published} tokens/s/GPU"


def test_torchtitan_published_mfu_matches_its_formula():
    """torchtitan's MFU = (6·N + 12·L·H·Q·T)·WPS / 312e12 with N including the embedding:
    recomputing it from the preset reproduces every printed MFU (this pins seq_len)."""
    for cid in TORCHTITAN:
        c = case_by_id(cid)
        m, s = get_preset(c["inputs"]["preset"]), c["inputs"]["seq_len"]
        f = 6 * m.param_count() + 12 * m.layers * m.heads * m.head_dim * s
        mfu = f * c["expected"]["tokens_per_s_per_gpu"] / 312e12 * 100
        assert mfu == pytest.approx(c["expected"]["mfu_pct_torchtitan"], abs=0.1)


@pytest.mark.parametrize("case", KORTHIKANTI + ["korthikanti-530B-dp8-2240gpu"])
def test_korthikanti_iteration_time_within_bar(rows, case):
    r = rows[case]
    assert r.metric == "iteration_time_s"
    assert abs(r.error_pct) <= BAR, f"{case}: {r.predicted:.2f} s vs {r.published} s"


@pytest.mark.parametrize("case", NARAYANAN)
def test_narayanan_hardware_tflops_within_bar(rows, case):
    r = rows[case]
    assert r.metric == "hardware_tflops_per_gpu"
    assert abs(r.error_pct) <= BAR, f"{case}: {r.predicted:.1f} vs {r.published} TFLOP/s"
    assert r.fits


def test_published_figures_match_cases_file(rows):
    c = case_by_id("korthikanti-table5-175B")["expected"]
    assert rows["korthikanti-table5-175B/full-recompute"].published == c["iter_time_s_full_recompute"]
    assert rows["korthikanti-table5-175B/sp+selective"].published == c["iter_time_s_present_work"]
    assert rows["narayanan-table1-1008B"].published == 163


def test_summary(report):
    errs = sorted(abs(r.error_pct) for r in report.rows)
    assert report.worst_abs_error_pct == pytest.approx(errs[-1])
    assert report.median_abs_error_pct <= report.worst_abs_error_pct
    assert report.within_tolerance == len(report.rows)
    assert len(report.rows) == 27
    assert "matmul_half_tokens" in report.constants and "flash_attention_fraction" in report.constants
    assert "korthikanti-table4-22B-layer-times" in report.skipped


def test_fitted_constants_are_physical():
    for name in ("a100-80g", "a100-40g"):
        hw = load_profile(name)
        e = hw.efficiency
        assert 0 < e.tp_exposed_fraction <= 1 and e.memory_passes >= 1
        assert 0 < e.sustained_matmul_fraction <= 1 and 0 < e.flash_attention_fraction <= 1
        assert hw.gpu.matmul_ceiling_fraction <= 1
        assert hw.scale_up.bus_efficiency <= 1 and hw.scale_out.bus_efficiency <= 1
    assert load_profile("a100-40g").efficiency == load_profile("a100-80g").efficiency


def test_cases_file_is_shipped():
    ids = {c["id"] for c in load_cases()}
    assert "korthikanti-flops-eq7-eq8-175B" in ids and len(ids) == len(load_cases())


# ---- FLOPs identities ------------------------------------------------------------------------

def _est(name, gpus, layout, batch):
    return estimate(get_preset(name), load_profile("a100-80g"), gpus, layout, seq_len=2048,
                    global_batch=batch)


def test_korthikanti_eq7_model_flops_175b():
    exp = case_by_id("korthikanti-flops-eq7-eq8-175B")["expected"]
    e = _est("megatron-gpt-175b", 64, Layout(tp=8, pp=8, schedule="interleaved", chunks=3,
                                             sp=True, recompute="selective"), 64)
    assert e.model_flops_per_step == pytest.approx(exp["model_flops_per_iter"], rel=1e-9)
    assert e.model_flops_per_step == pytest.approx(1.4109e17, rel=1e-4)


def test_korthikanti_eq8_hardware_flops_175b():
    """dtplan counts one extra forward of the attention core (QKᵀ and scores×V, 4·B·s²·h per
    layer) for selective recompute. Korthikanti Eq. 8 writes s/(3h) for the attention term,
    i.e. three times that (12·B·L·s²·h extra): the paper's 1.4489e17 is reproduced by that
    convention, and dtplan's physical count sits 1.75% below it."""
    exp = case_by_id("korthikanti-flops-eq7-eq8-175B")["expected"]
    B, L, s, h = 64, 96, 2048, 12288
    e = _est("megatron-gpt-175b", 64, Layout(tp=8, pp=8, schedule="interleaved", chunks=3,
                                             sp=True, recompute="selective"), B)
    one_forward = 4.0 * B * L * s * s * h
    assert e.hardware_flops_per_step == pytest.approx(exp["model_flops_per_iter"] + one_forward,
                                                      rel=1e-9)
    assert exp["model_flops_per_iter"] + 3 * one_forward == pytest.approx(
        exp["hw_flops_per_iter_selective"], rel=1e-9)
    assert e.hardware_flops_per_step == pytest.approx(1.4489e17, rel=0.02)


def test_narayanan_eq3_full_recompute_1t():
    exp = case_by_id("narayanan-flops-eq3-1T")["expected"]
    B, s, l, h, V = 3072, 2048, 128, 25600, 51200
    eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert eq3 == pytest.approx(exp["F_per_iter"], rel=1e-12)
    for v in (1, 2):
        e = _est("megatron-gpt-1t", 3072, Layout(tp=8, pp=64, dp=6, chunks=v, sp=False,
                                                 schedule="interleaved" if v > 1 else "1f1b",
                                                 recompute="full"), B)
        assert e.hardware_flops_per_step == pytest.approx(eq3, rel=1e-9)
        eq3_no_recompute = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
        assert e.model_flops_per_step == pytest.approx(eq3_no_recompute, rel=1e-9)


# ---- CLI ---------------------------------------------------------------------------------------

def test_cli_calibrate_table(dtplan):
    r = dtplan("calibrate")
    assert r.code == 0, r.err
    for case in KORTHIKANTI + NARAYANAN + TORCHTITAN + ["korthikanti-530B-dp8-2240gpu"]:
        assert case in r.out
    assert "Median" in r.out and "worst" in r.out and "matmul_half_tokens" in r.out


@pytest.mark.parametrize("fmt", ["json", "markdown"])
def test_cli_calibrate_formats(dtplan, fmt):
    r = dtplan("calibrate", "--format", fmt)
    assert r.code == 0, r.err
    if fmt == "json":
        j = r.json()
        assert j["command"] == "calibrate" and len(j["rows"]) >= 27
        assert j["worst_abs_error_pct"] <= FSDP_BAR
        assert max(abs(r["error_pct"]) for r in j["rows"]
                   if not r["case"].startswith("torchtitan-")) <= BAR
    else:
        assert "| korthikanti-table5-1T/full-recompute |" in r.out
