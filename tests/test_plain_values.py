"""The fit path's specs and results are plain dataclasses (planner.specs.plain): the search and
its rendering never import pydantic's models (issue #15, must-show 3); user input is validated
at the boundary by a model derived from the same fields, so both agree on what is valid."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import typing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import RankedLayout
from planner.errors import InputError
from planner.specs.framework import FrameworkProfile, list_frameworks
from planner.specs.hardware import HardwareProfile, list_profiles, load_profile_file
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.specs import plain
from planner.specs.plain import boundary_model

_FIT_PATH = """
import sys
import planner.search.fit, planner.search.fast, planner.render.fit
from planner.advice.batch import advise_fit_result
from planner.render.document import render_json
from planner.render.terminal import console, render_text
from planner.search.fast import SearchSpace
from planner.specs.hardware import load_profile
from planner.specs.model import model_from_params
model, hw = model_from_params(70e9), load_profile("h100")
r = planner.search.fit.fit(model, hw, 256, seq_len=8192, global_batch=512)
advice = advise_fit_result(r, model, hw, SearchSpace(), precision="mixed", optimizer="adam")
doc = planner.render.fit.fit_doc(r, batch_advice=advice)
out = render_json(doc) + render_text(doc, console(width=120))
loaded = sorted(m for m in sys.modules if m.startswith("pydantic."))
print(len(r.layouts), '"rank": 1' in out, loaded)
"""


def test_fit_and_its_rendering_never_import_pydantic_models(tmp_path):
    # fresh interpreter: nothing imported by earlier tests counts
    p = subprocess.run([sys.executable, "-c", _FIT_PATH], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    count, ranked, loaded = p.stdout.strip().split(" ", 2)
    assert (int(count), ranked) == (10, "True")
    assert "pydantic.main" not in loaded and "pydantic._internal" not in loaded, loaded


def test_bundled_profiles_load_unvalidated_yet_pass_the_boundary():
    # trusted data is taken as given; the boundary model, built from the same field constraints,
    # accepts every bundled profile and returns an equal value
    for prof in list_profiles():
        assert HardwareProfile.model_validate(prof.model_dump()) == prof
    for fw in list_frameworks():
        assert FrameworkProfile.model_validate(fw.model_dump()) == fw


def test_a_user_profile_is_validated_where_the_hand_checks_stop(tmp_path):
    # [efficiency] error_bands is checked by hand as a table only; its values by the boundary
    base = next(p for p in list_profiles() if p.name == "h100").source_file
    text = open(base, encoding="utf-8").read()
    assert "error_bands" not in text and "[efficiency]\n" in text
    path = tmp_path / "h.toml"
    path.write_text(text.replace("[efficiency]\n", '[efficiency]\nerror_bands = '
                                 '{ "megatron/data" = "wide" }\n', 1), encoding="utf-8")
    with pytest.raises(InputError, match=r"efficiency\.error_bands\.megatron/data: Input should "
                                         r"be a valid number"):
        load_profile_file(path)


def test_construction_coerces_as_pydantic_did():
    lay = Layout(tp=np.int64(2), pp=4.0, recompute_layers=np.int32(3), recompute="full")
    assert (type(lay.tp), type(lay.pp), type(lay.recompute_layers)) == (int, int, int)
    row = RankedLayout(rank=1, layout=lay, peak_memory_bytes=7, headroom_bytes=np.float64(1.5),
                       step_time_s=1, tokens_per_s=2, mfu=0.5, bubble_fraction=0,
                       collective_fraction=0, accumulation=8)
    assert type(row.peak_memory_bytes) is float and type(row.headroom_bytes) is float
    assert json.dumps(row.model_dump())  # numpy scalars would not serialise
    assert row.model_dump()["layout"] == lay.model_dump()
    with pytest.raises(dataclasses.FrozenInstanceError):
        lay.tp = 8
    assert lay.model_copy(update={"tp": 8}).tp == 8 and lay.tp == 2


def test_the_boundary_model_keeps_the_constraints_and_errors():
    for bad, where in [({"tp": 0}, "tp"), ({"zero": 4}, "zero"), ({"schedule": "x"}, "schedule"),
                       ({"bogus": 1}, "bogus")]:
        with pytest.raises(ValueError) as e:
            Layout.model_validate(bad)
        assert e.value.errors()[0]["loc"] == (where,)
    schema = boundary_model(Layout).model_json_schema()
    assert schema["properties"]["zero"]["maximum"] == 3
    assert schema["additionalProperties"] is False
    assert schema["description"] == inspect.cleandoc(Layout.__doc__)


def test_an_internal_field_is_kept_but_never_input_or_output():
    # FitResult keeps its search (search_result): a field of each instance, set by the
    # constructor and kept by model_copy, but not dumped, compared, shown or in the schema
    from planner.api import FitResult
    from planner.search.fast import SearchResult

    base = dict(model="m", model_description="d", model_inferred=False, hardware="h100",
                gpus=8, seq_len=1024, global_batch=8, objective="time", enumerated=0, valid=0,
                layouts=[], rejections=[])
    kept = object.__new__(SearchResult)
    a, b = FitResult(**base, search_result=kept), FitResult(**base)
    assert "search_result" in FitResult._names and "search_result" not in FitResult.__dict__
    assert (a.search_result, b.search_result) == (kept, None) and a == b
    assert "search_result" not in a.model_dump() and "search_result" not in repr(a)
    assert a.model_copy(update={"gpus": 16}).search_result is kept
    assert "search_result" not in json.dumps(FitResult.model_json_schema())
    again = FitResult.model_validate(a.model_dump())
    assert again == a and again.search_result is None
    given = FitResult.model_validate({**a.model_dump(), "search_result": kept})
    assert given.search_result is None  # not input either: the boundary model has no such field


def test_validated_input_meets_the_cross_field_rules_once(monkeypatch):
    # the boundary model runs ModelSpec._after; the plain value it returns is built from the
    # validated values without running it again (a trusted construction still runs it)
    calls = []
    rules = ModelSpec._after
    monkeypatch.setattr(ModelSpec, "_after", lambda self: calls.append(1) or rules(self))
    monkeypatch.setattr(plain, "_MODELS", {})   # the boundary model built with the counter
    d = dict(name="x", layers=2, hidden=64, heads=4, ffn=128, vocab=100, source="t",
             mlp="swiglu", tied_embeddings=False, position="rope", norm="rmsnorm")
    checked = ModelSpec.model_validate(d)
    assert len(calls) == 1 and (checked.kv_heads, checked.head_dim) == (4, 16)
    ModelSpec(**d)
    assert len(calls) == 2
    with pytest.raises(ValueError, match=r"kv_heads \(3\) must divide heads \(4\)"):
        ModelSpec.model_validate({**d, "kv_heads": 3})


_SHAPES = st.fixed_dictionaries({
    "layers": st.integers(1, 200), "heads": st.sampled_from([1, 2, 4, 8, 16, 64]),
    "head_dim": st.sampled_from([16, 64, 128]), "kv_div": st.sampled_from([1, 2, 4]),
    "ffn": st.integers(1, 10**5), "vocab": st.integers(1, 10**6),
    "mlp": st.sampled_from(["gelu", "swiglu"]), "tied_embeddings": st.booleans(),
    "position": st.sampled_from(["learned", "rope", "alibi", "none"]),
    "norm": st.sampled_from(["layernorm", "rmsnorm"]), "experts": st.sampled_from([0, 8]),
})


@settings(max_examples=60, deadline=None)
@given(_SHAPES)
def test_trusted_and_boundary_construction_agree(d):
    d = dict(d)
    kv = max(1, d["heads"] // d.pop("kv_div"))
    d.update(hidden=d["heads"] * d["head_dim"], kv_heads=kv, source="test",
             max_positions=4096 if d["position"] == "learned" else None,
             experts_per_token=2 if d["experts"] else 0)
    del d["head_dim"]   # derived: hidden ÷ heads on both paths
    plain, checked = ModelSpec(**d), ModelSpec.model_validate(d)
    assert plain == checked and plain.model_dump() == checked.model_dump()
    assert ModelSpec.model_validate(plain.model_dump()) == plain


def _plain_classes() -> list[type]:
    import planner.evaluation.calculators, planner.resilience.planning, planner.advice.shrink, planner.specs.verdict  # noqa: F401
    out, todo = [], [plain.Plain]
    while todo:
        for c in todo.pop().__subclasses__():
            todo.append(c)
            out += [c] if "_fields" in c.__dict__ else []
    return out


def test_coercions_read_from_text_match_the_evaluated_types():
    # construction reads each field's coercion from its annotation text, unevaluated; the
    # evaluated annotation must give the same (a float field holds floats, an int field ints)
    classes = _plain_classes()
    assert len(classes) > 40
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in plain.fields(cls):
            assert f.kind == plain._kind(hints[f.name]), (cls.__name__, f.name)
