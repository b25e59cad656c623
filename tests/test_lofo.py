"""`dtplan calibrate`'s leave-one-family-out residuals over the public runs dtplan expresses
(planner/data/calibration_runs.json and the shared sets), and the bands derived from them."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from planner.calibration import lofo
from planner.calibration.runs import evaluate_run, load_runs
from planner.evaluation.error_band import (WIDE_BAND_PCT, band_for, band_note, derived_band,
                                           floor_band, shown_band)
from planner.specs.hardware_toml import load_profile
from planner.evaluation.rules import RULE_NAMES

ROOT = Path(__file__).resolve().parent.parent
HEX40 = re.compile(r"[0-9a-f]{40}")


@pytest.fixture(scope="module")
def cv():
    return lofo.cross_validate()


# ---- the runs as data ---------------------------------------------------------------------------

def test_the_run_set_is_large_and_varied_enough():
    runs = load_runs().runs
    families = {r.family for r in runs}
    generations = {f.split("/")[2] for f in families}
    assert len(runs) >= 40 and len(families) >= 4 and len(generations) >= 3
    assert len({r.id for r in runs}) == len(runs)


def test_every_run_cites_its_source_and_no_machine_path():
    rs = load_runs()
    for r in list(rs.runs) + list(rs.memory_rows):
        assert "/" in r.source.repo and HEX40.fullmatch(r.source.commit), r.id
        assert r.source.result_dir or r.source.path, r.id
        assert r.measured.definition, r.id
    for r in rs.not_expressible:
        assert HEX40.fullmatch(r.source.commit) and len(r.reason) > 20, r.id
    text = (ROOT / "planner" / "data" / "calibration_runs.json").read_text()
    assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text


def test_every_run_is_a_layout_dtplan_accepts():
    """Each published layout passes every structural rule as dtplan writes it (memory aside: the
    verdict on these runs is issue #30's memory part), and the step time is the measured one's
    unit: seconds per global batch."""
    for r in load_runs().runs:
        ev = evaluate_run(r)
        failed = [n for n in RULE_NAMES if n != "fits-in-memory" and not ev.rules.passes[n][0]]
        assert not failed, f"{r.id}: {failed}"
        assert r.measured.step_time_s and r.measured.step_time_s > 0


def test_the_not_expressible_runs_are_not_in_the_set():
    rs = load_runs()
    assert {r.id for r in rs.not_expressible}.isdisjoint({r.id for r in rs.runs})
    assert any("NVFP4" in r.reason for r in rs.not_expressible)


# ---- leave-one-family-out -----------------------------------------------------------------------

def test_every_family_is_predicted_without_its_own_runs(cv):
    assert cv.runs == sum(f.runs for f in cv.families) >= 80
    assert len(cv.families) >= 4 and len(cv.generations) >= 3
    for f in cv.families:
        refits = [c for c in f.constants if c.key.endswith("." + lofo.FITTED)]
        assert refits, f.family
        for c in refits:
            assert f.family not in c.source, f"{f.family} refitted on itself: {c.source}"
        errs = [r.error_pct for r in f.residuals]
        assert len(errs) == f.runs
        assert f.worst_abs_error_pct == pytest.approx(max(map(abs, errs)))
        assert f.rms_error_pct == pytest.approx(math.sqrt(sum(e * e for e in errs) / len(errs)))
        for r in f.residuals:
            assert r.error_pct == pytest.approx((r.predicted_step_s / r.measured_step_s - 1) * 100)


def test_the_summary_is_the_residuals_as_they_are(cv):
    """The targets (median ≤ 10 %, worst ≤ 25 %) are stated, not assumed met: the figures are
    the residuals' own."""
    errs = sorted(abs(r.error_pct) for f in cv.families for r in f.residuals)
    assert cv.worst_abs_error_pct == pytest.approx(errs[-1])
    assert cv.median_abs_error_pct == pytest.approx(float(np.median(errs)))
    assert (cv.target_median_pct, cv.target_worst_pct) == (10.0, 25.0)


def test_the_run_set_meets_the_targets_out_of_sample(cv):
    """Issue #30 Must-show 2: ≥ 40 runs, ≥ 4 families, ≥ 3 GPU generations; leave-one-family-out
    median ≤ 10 % and worst ≤ 25 % in step time; every memory row within ±10 %."""
    assert cv.runs >= 40 and len(cv.families) >= 4 and len(cv.generations) >= 3
    assert cv.median_abs_error_pct <= cv.target_median_pct
    assert cv.worst_abs_error_pct <= cv.target_worst_pct, cv.worst_run
    assert cv.memory_within == len(cv.memory)


A, B = "korthikanti2022/megatron/A100", "narayanan2021/megatron/A100"


def _two_family_curves(scale: float) -> lofo._Curves:
    """A fake profile: family A (2 runs) and B (1 run), ln ratio = ln(c/s) - ln(measured)."""
    shares = np.array(lofo.GRID)
    base, logs = {}, {}
    for rid, fam, c, meas in (("a1", A, 0.8, 1.0), ("a2", A, 0.9, 1.1), ("b1", B, 0.7, scale)):
        base[rid] = lofo.Obs(rid, fam, "a100-80g", meas, c / 0.84)
        logs[rid] = np.log(c / shares / meas)
    return lofo._Curves(base, shares, logs)


def test_a_family_predictions_do_not_depend_on_its_own_measurements():
    got = []
    for scale in (1.0, 3.0):
        curves = _two_family_curves(scale)
        data = {"a100-80g": (curves.base, curves)}
        fam = lofo._family(B, list(curves.base.values()), data)
        got.append(fam.residuals[0].predicted_step_s)
    assert got[0] == pytest.approx(got[1], rel=1e-9)


def test_refit_finds_the_share_that_matches_the_measurements():
    # family B's step is 0.7/s, measured 1.0: the share is 0.7
    curves = _two_family_curves(1.0)
    assert lofo.refit(curves, {B}) == pytest.approx(0.7, abs=2e-3)
    assert lofo.GRID[0] <= lofo.refit(curves, {A, B}) <= lofo.GRID[-1]


def test_memory_rows_have_residuals(cv):
    assert len(cv.memory) == 18 + len(load_runs().memory_rows)
    for m in cv.memory:
        assert m.error_pct == pytest.approx((m.predicted_gib / m.measured_gib - 1) * 100)
        assert m.statistic


# ---- bands --------------------------------------------------------------------------------------

def test_the_shipped_bands_are_what_the_residuals_give(cv):
    """planner/data/error_bands.json equals today's cross-validation (python
    scripts/error_bands.py regenerates it after a profile changes)."""
    shipped = json.loads((ROOT / "planner" / "data" / "error_bands.json").read_text())
    assert shipped == lofo.bands_document(cv)


RMS = st.lists(st.floats(min_value=0.0, max_value=200.0, allow_nan=False), max_size=12)


@settings(max_examples=300, deadline=None)
@given(RMS, st.data())
def test_a_band_never_narrows_when_a_family_is_removed(rms, data):
    band = derived_band(rms)
    assert floor_band(len(rms)) - 0.5 < band <= WIDE_BAND_PCT
    if rms:
        i = data.draw(st.integers(0, len(rms) - 1))
        assert derived_band(rms[:i] + rms[i + 1:]) >= band


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_removing_a_collected_family_never_narrows_a_regime_band(cv, data):
    """On the real families: drop any subset of them (their runs leave the data) and no
    regime's band is narrower; a regime left without families prints the wide band."""
    fams = list(cv.families)
    drop = data.draw(st.sets(st.sampled_from([f.family for f in fams]), min_size=1))
    before = {b.regime: b.band_pct for b in lofo.regime_bands(fams)}
    after = {b.regime: b.band_pct for b in lofo.regime_bands(
        [f for f in fams if f.family not in drop])}
    for regime, band in before.items():
        assert after.get(regime, WIDE_BAND_PCT) >= band, (regime, drop)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.floats(0.0, 60.0, allow_nan=False))
def test_a_band_is_wider_where_families_are_fewer(n, r):
    assert derived_band([r] * n) <= derived_band([r] * (n - 1))


def test_the_band_follows_the_residuals_within_its_bounds():
    assert derived_band([]) == WIDE_BAND_PCT
    assert derived_band([0.0, 0.0]) == math.ceil(floor_band(2) * 2) / 2       # the floor
    assert derived_band([6.0, 6.0]) == 18.0                  # t(2) 2.92 × 6 = 17.5 → 18
    assert derived_band([100.0, 100.0]) == math.ceil(floor_band(1) * 2) / 2   # the ceiling


def test_a_regime_with_runs_prints_its_derived_band_and_basis():
    h100 = load_profile("h100")
    b = band_for(h100, "megatron")
    assert b is not None and shown_band(h100, "megatron") == b
    note = band_note(h100, "megatron")
    assert f"± {b:g}%" in note and "leave-one-family-out" in note
    # no published run of DeepSpeed: the wide band with its reason
    assert band_for(h100, "deepspeed") is None
    assert "Wide band ± 45%" in band_note(h100, "deepspeed")


def test_fit_70b_prints_a_band_and_no_uncalibrated(dtplan):
    r = dtplan("fit", "--params", "70e9", "--gpus", "256", "--format", "json")
    assert r.code == 0, r.err
    want = band_for(load_profile("h100"), "megatron")
    assert all(x["error_band_pct"] == want and x["error_band_calibrated"] for x in
               r.json()["layouts"])
    t = dtplan("fit", "--params", "70e9", "--gpus", "256")
    assert "uncalibrated" not in t.out.lower() and f"± {want:g}%" in t.out


def test_calibrate_prints_the_families_and_json(dtplan, cv):
    r = dtplan("calibrate", "--format", "json")
    assert r.code == 0, r.err
    x = r.json()["cross_validation"]
    assert [f["family"] for f in x["families"]] == [f.family for f in cv.families]
    assert x["median_abs_error_pct"] == pytest.approx(cv.median_abs_error_pct)
    assert all(f["constants"] and f["constants"][0]["kind"] for f in x["families"])


def test_a_runs_settings_replace_its_profiles_fields():
    """The MLPerf Llama 3.1 405B runs state fp8 parameters, bf16 gradient reduction and
    expandable segments (their pretrain.py and config_common.sh); the profile takes them, and a
    field no profile has is refused."""
    from planner.calibration.runs import run_framework, with_settings
    row = next(r for r in load_runs().memory_rows if "eos-dfw-n1024" in r.id)
    fw = run_framework(row)
    assert fw.memory.fp8_params and fw.memory.grad_bytes == 2.0 and fw.memory.expandable_segments
    assert fw.time.reduce_dtype == "bf16"
    assert "fp8_param_gather" in row.assumed["settings"]
    with pytest.raises(TypeError):
        with_settings(fw, {"memory.no_such_field": 1.0})


def test_every_memory_row_but_the_known_misses_is_within_the_target(cv):
    """Issue #30's memory target (±10 % on every row), the misses named with their mechanism
    (test_memory_calibration.KNOWN_MISSES) and still missed."""
    from test_memory_calibration import KNOWN_MISSES
    within = {m.run: abs(m.error_pct) <= lofo.TARGET_MEMORY_PCT for m in cv.memory}
    assert {run for run, ok in within.items() if not ok} == set(KNOWN_MISSES)
    assert all(ok for run, ok in within.items() if run.startswith("mlperf"))
