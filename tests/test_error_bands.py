"""A band on every figure: every bundled hardware profile gives step time, tokens/s and MFU a
band for every framework and layout family, the calibrated one where `dtplan calibrate` has
runs of that regime and the profile's wide band, with its reason, where it has none."""

from __future__ import annotations

import pytest

from planner.evaluation.error_band import band_for, band_note, shown_band
from planner.specs.framework import list_frameworks
from planner.specs.hardware_toml import list_profiles
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
    r = dtplan("fit", "--params", "70e9", "--gpus", "256")
    assert r.code == 0
    assert "ncalibrated" not in r.out.lower()
    assert "±" in r.out and "Wide band ± 45%" in r.out.replace("\n", " ")
    j = dtplan("fit", "--params", "70e9", "--gpus", "256", "--format", "json").json()
    assert all(x["error_band_pct"] == 45.0 and x["error_band_calibrated"] is False
               for x in j["layouts"])


def test_a_calibrated_regime_keeps_its_band(dtplan):
    # a100-80g has Megatron data-parallel runs: its band is theirs, marked calibrated
    j = dtplan("estimate", "--model", "gpt2", "--hardware", "a100-80g", "--gpus", "8",
               "--format", "json").json()
    assert j["error_band_pct"] == 3.5 and j["error_band_calibrated"] is True
    e = dtplan("estimate", "--model", "gpt2", "--gpus", "8", "--format", "json").json()
    assert e["error_band_pct"] == 45.0 and e["error_band_calibrated"] is False
