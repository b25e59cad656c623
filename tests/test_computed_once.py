"""Flags.offer finds the nearest preset once per run; batch_advice has one threshold test."""

from __future__ import annotations

import planner.specs.presets as presets
from planner.resolve.job import Flags


def test_the_nearest_preset_is_found_once(monkeypatch):
    calls = []
    real = presets.nearest_preset

    def counted(n):
        calls.append(n)
        return real(n)
    monkeypatch.setattr(presets, "nearest_preset", counted)
    job = Flags(params="70e9", nearest_preset=True)
    first = job.offer()
    assert job.model_spec().name == first["name"] and job.offer() is first
    assert calls == [70e9] and first["planned"] and first["use"] == f"--model {first['preset']}"


def test_no_params_no_offer():
    job = Flags(model="llama3-8b")
    assert job.offer() is None and job.offer() is None


def test_batch_advice_clears_the_threshold_strictly():
    from planner.advice.batch import clears
    assert clears(0.55, 0.5, 0.05)            # +10 % beats 5 %
    assert not clears(0.55, 0.5, 0.10 + 1e-12)
    assert not clears(0.5, 0.5, 0.0)          # no gain is not a gain
    assert not clears(0.3, 0.0, 0.1)          # no base MFU: nothing to advise
