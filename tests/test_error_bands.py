"""A band on every figure: every bundled hardware profile gives step time, tokens/s and MFU a
band for every framework and layout family, the one derived from `dtplan calibrate`'s
leave-one-family-out residuals where the regime (framework / GPU generation) has runs and the
profile's wide band, with its reason, where it has none."""

from __future__ import annotations

import pytest

from planner.evaluation.error_band import band_for, band_note, shown_band
from planner.specs.framework import list_frameworks
from planner.specs.hardware_toml import list_profiles, load_profile
from planner.specs.knobs import Layout

FAMILIES = {"data": Layout(), "tensor": Layout(tp=2), "pipeline": Layout(pp=2)}
PROFILES = list_profiles()
FRAMEWORKS = [f.name for f in list_frameworks()]


@pytest.mark.parametrize("hw", PROFILES, ids=[h.name for h in PROFILES])
def test_every_profile_bands_every_regime(hw):
    for fw in FRAMEWORKS:
        for fam, lay in FAMILIES.items():
            b = shown_band(hw, fw, lay)
            calibrated = band_for(hw, fw, lay)
            assert b > 0, f"{hw.name} {fw}/{fam}"
            note = band_note(hw, fw, lay)
            assert f"± {b:g}%" in note and "ncalibrated" not in note
            if calibrated is None:
                # the wide band is the widest: no calibrated band of any profile exceeds it
                assert b == hw.efficiency.uncalibrated_band
                assert "no published run of regime" in note
            else:
                assert b == calibrated <= hw.efficiency.uncalibrated_band


def test_fit_prints_a_band_and_never_uncalibrated(dtplan):
    # megatron/H100 has MLPerf runs: the default profile prints their derived band (was the wide
    # band before the MLPerf runs were collected)
    r = dtplan("fit", "--params", "70e9", "--gpus", "256")
    assert r.code == 0
    assert "ncalibrated" not in r.out.lower()
    want = band_for(load_profile("h100"), "megatron")
    assert want is not None and f"± {want:g}%" in r.out.replace("\n", " ")
    j = dtplan("fit", "--params", "70e9", "--gpus", "256", "--format", "json").json()
    assert all(x["error_band_pct"] == want and x["error_band_calibrated"] is True
               for x in j["layouts"])


def test_a_calibrated_regime_keeps_its_band(dtplan):
    # a100-80g has Megatron runs (Korthikanti, Narayanan): the band derived from them, calibrated
    j = dtplan("estimate", "--model", "gpt2", "--hardware", "a100-80g", "--gpus", "8",
               "--format", "json").json()
    want = band_for(load_profile("a100-80g"), "megatron")
    assert j["error_band_pct"] == want and j["error_band_calibrated"] is True
    # DeepSpeed ran none of the published runs: the wide band
    e = dtplan("estimate", "--model", "gpt2", "--gpus", "8", "--framework", "deepspeed",
               "--format", "json").json()
    assert e["error_band_pct"] == 45.0 and e["error_band_calibrated"] is False


def test_a_mixture_of_experts_is_a_regime_without_runs(dtplan):
    """The calibration runs are dense: a MoE on a calibrated regime (megatron/B200) prints the
    wide band and says why, where a dense model there keeps the derived one; fit's rows alike."""
    b200 = load_profile("b200")
    dense = band_for(b200, "megatron")
    assert dense is not None and dense < b200.efficiency.uncalibrated_band
    assert band_for(b200, "megatron", moe=True) is None
    args = ("--hardware", "b200", "--gpus", "8", "--format", "json")
    e = dtplan("estimate", "--model", "gpt-oss-20b", "--zero", "1", "--micro-batch", "2",
               *args).json()
    assert e["error_band_pct"] == b200.efficiency.uncalibrated_band
    assert e["error_band_calibrated"] is False
    assert any("no published run of a mixture of experts (megatron/B200/moe)" in n
               for n in e["notes"])
    d = dtplan("estimate", "--model", "llama3-8b", "--zero", "1", *args).json()
    assert d["error_band_pct"] == dense and d["error_band_calibrated"] is True
    f = dtplan("fit", "--model", "gpt-oss-20b", "--top", "3", *args).json()
    assert f["layouts"] and all(x["error_band_pct"] == b200.efficiency.uncalibrated_band
                                and x["error_band_calibrated"] is False for x in f["layouts"])
