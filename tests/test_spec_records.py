"""The records are standard dataclasses a type checker reads, and pydantic validates them where
user input arrives: an unknown field is an error both ways. Direct construction (our own code)
raises TypeError; the boundary (pydantic's TypeAdapter over the record; a profile, a framework
profile or a plan being loaded) raises the one-line InputError that names the field."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import planner.specs
from planner.errors import InputError, validation_message
from planner.evaluation.candidates import Problem
from planner.evaluation.train import build_layout
from planner.resolve.job import Flags
from planner.resolve.plan_file import validate_plan
from planner.search.fast import SearchSpace
from planner.search.fit import FitResult, RankedLayout
from planner.specs.budget import MemoryBudget
from planner.specs.efficiency import Efficiency
from planner.specs.framework import (FrameworkProfile, TimeBehaviour, list_frameworks,
                                     parse_framework)
from planner.specs.framework_memory import MemoryBehaviour
from planner.specs.hardware import GPUSpec, HardwareProfile, Host, ScaleOut, ScaleUp, Storage
from planner.specs.hardware_toml import list_profiles, load_profile, load_profile_file
from planner.specs.knobs import KNOB, Layout
from planner.specs.model import ModelSpec, validate_model
from planner.specs.presets import get_preset
from planner.specs.records import dump, json_schema, validate


def _spec_records() -> list[type]:
    """Every dataclass defined in planner.specs, and the records user values flow into outside
    it (the CLI's flags, the search space, the question)."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(planner.specs.__path__):
        mod = importlib.import_module(f"planner.specs.{info.name}")
        for name, cls in inspect.getmembers(mod, inspect.isclass):
            if dataclasses.is_dataclass(cls) and cls.__module__ == mod.__name__:
                found[f"{mod.__name__}.{name}"] = cls
    for cls in (Flags, SearchSpace, Problem):
        found[f"{cls.__module__}.{cls.__name__}"] = cls
    return [found[k] for k in sorted(found)]


RECORDS = _spec_records()


def test_the_spec_records_are_found():
    names = {c.__name__ for c in RECORDS}
    assert {"Layout", "Knob", "ModelSpec", "HardwareProfile", "GPUSpec", "Efficiency",
            "FrameworkProfile", "TimeBehaviour", "MemoryBehaviour", "MemoryBudget", "Verdict",
            "GateRule", "LayoutResult", "Job", "CheckOptions", "Flags", "SearchSpace"} <= names


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_construction_refuses_an_unknown_field(cls):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        cls(bogus=1)


def test_a_layout_with_an_unknown_knob_is_an_error():
    with pytest.raises(TypeError, match="bogus"):
        Layout(tp=8, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        build_layout(gpus=8, bogus=1)


def test_records_are_frozen_and_copied_with_replace():
    lay = Layout(tp=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lay.tp = 8  # type: ignore[misc]
    assert dataclasses.replace(lay, tp=8).tp == 8 and lay.tp == 2


# Records validated where user input arrives, each with a valid input (a bundled value's dump).
_H100, _FW = load_profile("h100"), list_frameworks()[0]
BOUNDARY = {HardwareProfile: dump(_H100), GPUSpec: dump(_H100.gpu),
            ScaleUp: dump(_H100.scale_up), ScaleOut: dump(_H100.scale_out),
            Host: dump(_H100.host), Storage: dump(_H100.storage),
            Efficiency: dump(_H100.efficiency), FrameworkProfile: dump(_FW),
            TimeBehaviour: dump(_FW.time), MemoryBehaviour: dump(_FW.memory),
            Layout: dump(Layout(tp=8, pp=4, dp=8)), MemoryBudget: dump(MemoryBudget()),
            ModelSpec: dump(get_preset("llama3-8b"))}


@pytest.mark.parametrize("cls", list(BOUNDARY), ids=lambda c: c.__name__)
def test_the_boundary_refuses_an_unknown_field(cls):
    good = validate(cls, BOUNDARY[cls])
    assert good == validate(cls, dump(good))
    with pytest.raises(ValidationError) as e:
        validate(cls, {**BOUNDARY[cls], "bogus": 1})
    assert validation_message(e.value) == "bogus: Extra inputs are not permitted"
    assert json_schema(cls)["additionalProperties"] is False


def test_a_user_shape_refuses_an_unknown_field():
    shape = {k: x for k, x in dump(get_preset("llama3-8b")).items() if k != "head_dim"}
    assert validate_model(shape) == get_preset("llama3-8b")  # head_dim filled as the preset's
    with pytest.raises(ValidationError) as e:
        validate_model({**shape, "bogus": 1})
    assert validation_message(e.value) == "bogus: Extra inputs are not permitted"


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("section", ["", "gpu", "scale_up", "scale_out", "host", "storage",
                                     "efficiency"])
def test_a_hardware_profile_with_an_unknown_key_is_refused(tmp_path, section):
    text = Path(_H100.source_file).read_text(encoding="utf-8")
    text = ("bogus = 1\n" + text) if not section else \
        text.replace(f"[{section}]\n", f"[{section}]\nbogus = 1\n", 1)
    path = tmp_path / "h.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_profile_file(path)
    where = f"{section}." if section else ""
    assert f": {where}bogus: unknown key" in _one_line(e)


@pytest.mark.parametrize("section", ["", "time", "memory"])
def test_a_framework_profile_with_an_unknown_key_is_refused(section):
    text = Path(_FW.source_file).read_text(encoding="utf-8")
    text = ("bogus = 1\n" + text) if not section else \
        text.replace(f"[{section}]\n", f"[{section}]\nbogus = 1\n", 1)
    with pytest.raises(InputError) as e:
        parse_framework(text.encode(), "my.toml")
    where = f"{section}." if section else ""
    assert _one_line(e) == f"my.toml: {where}bogus: Extra inputs are not permitted"


_PLAN = {"model": {"preset": "llama3-8b"}, "hardware": {"profile": "h100"}, "gpus": 64,
         "seq_len": 4096, "layout": {"tp": 8}, "batch": {"global_batch": 256},
         "checkpoint": {"interval_min": 30, "gpu_mtbf_hours": 50000},
         "budget": {"margin_fraction": 0.1}, "thresholds": {"min_mfu": 0.1}}


@pytest.mark.parametrize("section", ["", "model", "hardware", "layout", "batch", "checkpoint",
                                     "budget", "thresholds"])
def test_a_plan_with_an_unknown_key_is_refused(section):
    validate_plan(_PLAN)
    plan = json.loads(json.dumps(_PLAN))
    (plan[section] if section else plan)["bogus"] = 1
    with pytest.raises(InputError) as e:
        validate_plan(plan, "p.yaml")
    where = f"{section}." if section else ""
    assert re.search(rf"\b{re.escape(where)}bogus: unknown key", _one_line(e)), str(e.value)


# ---- what the boundary keeps ------------------------------------------------------------------

def test_bundled_profiles_load_unvalidated_yet_pass_the_boundary():
    # trusted data is taken as given; the boundary, built from the same field constraints,
    # accepts every bundled profile and returns an equal value
    for prof in list_profiles():
        assert validate(HardwareProfile, dump(prof)) == prof
    for fw in list_frameworks():
        assert validate(FrameworkProfile, dump(fw)) == fw


def test_a_user_profile_is_validated_where_the_hand_checks_stop(tmp_path):
    # [efficiency] error_bands is checked by hand as a table only; its values by the boundary
    text = Path(_H100.source_file).read_text(encoding="utf-8")
    assert "error_bands" not in text and "[efficiency]\n" in text
    path = tmp_path / "h.toml"
    path.write_text(text.replace("[efficiency]\n", '[efficiency]\nerror_bands = '
                                 '{ "megatron/data" = "wide" }\n', 1), encoding="utf-8")
    with pytest.raises(InputError, match=r"efficiency\.error_bands\.megatron/data: Input should "
                                         r"be a valid number"):
        load_profile_file(path)


def test_the_boundary_keeps_the_layout_constraints_and_errors():
    for bad, where in [({"tp": 0}, "tp"), ({"zero": 4}, "zero"), ({"schedule": "x"}, "schedule"),
                       ({"bogus": 1}, "bogus")]:
        with pytest.raises(ValidationError) as e:
            validate(Layout, bad)
        assert e.value.errors()[0]["loc"] == (where,)
    schema = json_schema(Layout)
    assert schema["properties"]["zero"]["maximum"] == 3
    assert schema["properties"]["micro_batch"]["maximum"] == KNOB["micro_batch"].le
    assert schema["description"] == inspect.cleandoc(Layout.__doc__ or "")


def test_validated_input_meets_the_cross_field_rules():
    d = dict(name="x", layers=2, hidden=64, heads=4, ffn=128, vocab=100, source="t",
             mlp="swiglu", tied_embeddings=False, position="rope", norm="rmsnorm")
    checked = validate_model(d)
    assert (checked.kv_heads, checked.head_dim) == (4, 16)
    with pytest.raises(ValidationError) as e:
        validate_model({**d, "kv_heads": 3})
    assert validation_message(e.value) == "kv_heads (3) must divide heads (4)"


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
    trusted, checked = ModelSpec.with_defaults(**d), validate_model(d)
    assert trusted == checked and dump(trusted) == dump(checked)
    assert validate_model(dump(trusted)) == trusted


def test_an_internal_field_is_kept_but_never_output():
    # FitResult keeps its search (search_result): set by the constructor and kept by replace,
    # but not dumped, compared, shown or in the schema
    from planner.search.fast import SearchResult

    base = dict(model="m", model_description="d", model_inferred=False, params=0,
                active_params=0, hardware="h100", gpus=8, seq_len=1024, global_batch=8, objective="time", enumerated=0, valid=0,
                layouts=[], rejections=[])
    kept = object.__new__(SearchResult)
    a, b = FitResult(**base, search_result=kept), FitResult(**base)
    assert (a.search_result, b.search_result) == (kept, None) and a == b
    assert "search_result" not in dump(a) and "search_result" not in repr(a)
    assert dataclasses.replace(a, gpus=16).search_result is kept
    assert "search_result" not in json.dumps(json_schema(FitResult, mode="serialization"))


def test_dump_is_asdict_less_the_internal_fields():
    lay = Layout(tp=2, pp=4, dp=8)
    row = RankedLayout(rank=1, layout=lay, peak_memory_bytes=7.0, headroom_bytes=1.5,
                       step_time_s=1.0, tokens_per_s=2.0, mfu=0.5, bubble_fraction=0.0,
                       collective_fraction=0.0, accumulation=8.0)
    assert dump(row) == dataclasses.asdict(row) and list(dump(row)) == \
        [f.name for f in dataclasses.fields(RankedLayout)]
    assert dump(row, exclude={"layout"}) == {k: x for k, x in dump(row).items() if k != "layout"}
