"""The public library API, as the README shows it."""

from __future__ import annotations

import planner


def test_readme_library_example():
    model = planner.get_preset("llama3-70b")
    hw = planner.load_profile("h100")
    result = planner.fit(model, hw, 256, seq_len=8192, global_batch=512)
    best = result.layouts[0].layout
    est = planner.estimate(model, hw, 256, best, seq_len=8192, global_batch=512)
    assert est.fits and est.step_time_s == result.layouts[0].step_time_s
    stages = planner.memory(model, hw, 256, best, seq_len=8192, global_batch=512)
    assert [s.total_bytes for s in stages] == [s.total_bytes for s in est.stages]


def test_unknown_name_is_an_attribute_error():
    try:
        planner.no_such_thing
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("expected AttributeError")
