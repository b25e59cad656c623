"""The JSON Schema of every command's --format json output (`dtplan schema <command>`): one
branch per mode (planner.render.json_out.MODES), each from the result class the command dumps
(pydantic's TypeAdapter over each record), with json_out's transforms (unit-suffixed keys,
integer byte figures, layout strings) applied to the schema as to the output."""

from __future__ import annotations

import copy
from typing import Any, Callable

from planner.advice.batch import BatchAdvice
from planner.advice.shrink import ShrinkResult
from planner.calibration.fit_links import ConstantFit
from planner.calibration.report import CalibrationReport, CrossValidation, ModelTypeRun
from planner.evaluation.calculators import (BatchResult, BubbleResult, CheckpointResult, CommResult,
                                            ScalingResult, StateMemoryResult)
from planner.evaluation.estimate import Estimate
from planner.evidence.model import Evidence
from planner.gate.check import verdict_json_schema
from planner.render.json_out import (COMMAND_OF, DRAFT, LAYOUT_KEYS, SCHEMA_VERSION, WHOLE,
                                     integer_schema, output_key)
from planner.resilience.planning import ResiliencePlan
from planner.search.fit import FitResult
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import LayoutResult
from planner.specs.model import ModelSpec
from planner.specs.records import json_schema


def _schema_transform(node: Any) -> Any:
    """The same transform on a JSON Schema: renamed properties, integer byte figures and whole
    counts, ``layout_text`` declared beside each layout."""
    if isinstance(node, list):
        return [_schema_transform(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: _schema_transform(v) for k, v in node.items()}
    props = node.get("properties")
    if isinstance(props, dict):
        new: dict[str, Any] = {}
        names: dict[str, str] = {}
        for k, v in props.items():
            is_map = isinstance(v, dict) and "additionalProperties" in v
            names[k], is_bytes = output_key(k, is_map)
            new[names[k]] = integer_schema(v) if is_bytes or k in WHOLE else v
            if k in LAYOUT_KEYS:
                new[k + "_text"] = {"type": "string", "description": "the layout as one line"}
        node["properties"] = new
        if "required" in node:
            node["required"] = [names.get(k, k) for k in node["required"]]
    return node


def _schema(cls: type) -> dict:
    """The serialization schema of a result (a record, or a pydantic model)."""
    return json_schema(cls, mode="serialization")


def _object(model: type | None, *, exclude: tuple[str, ...] = (), extra: dict | None = None,
            defs: dict) -> dict:
    """An object schema from a result class (its $defs collected into `defs`), minus `exclude`,
    plus `extra` properties."""
    props: dict[str, Any] = {}
    required: list[str] = []
    if model is not None:
        s = _schema(model)
        defs.update(s.pop("$defs", {}))
        props = {k: v for k, v in s.get("properties", {}).items() if k not in exclude}
        required = [k for k in s.get("required", []) if k not in exclude]
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": required}


STR_LIST = {"type": "array", "items": {"type": "string"}}
OK = {"type": "boolean"}
# With --params: the nearest real preset by parameter count (cli.common.Job.offer).
NEAREST = {"type": "object", "required": ["preset", "params", "planned", "use"],
           "properties": {"preset": {"type": "string"}, "name": {"type": "string"},
                          "params": {"type": "integer"}, "layers": {"type": "integer"},
                          "hidden": {"type": "integer"}, "heads": {"type": "integer"},
                          "kv_heads": {"type": "integer"}, "ffn": {"type": "integer"},
                          "planned": {"type": "boolean"}, "use": {"type": "string"}}}


def _list_of(model: type, key: str, extra_item: dict | None = None) -> Callable[[dict], dict]:
    def build(defs: dict) -> dict:
        item = _object(model, extra=extra_item, defs=defs)
        return {"type": "object", "properties": {key: {"type": "array", "items": item},
                                                 "notes": STR_LIST, "ok": OK}, "required": [key]}
    return build


def _batch_advice(defs: dict) -> dict:
    """planner.advice.batch.BatchAdvice, or null when a bigger batch would not clear the threshold."""
    s = _schema(BatchAdvice)
    defs.update(s.pop("$defs", {}))
    defs["BatchAdvice"] = s
    return {"anyOf": [{"$ref": "#/$defs/BatchAdvice"}, {"type": "null"}]}


def _estimate(defs: dict) -> dict:
    return _object(Estimate, defs=defs, extra={
        "ok": OK, "fits": OK, "notes": STR_LIST, "batch_advice": _batch_advice(defs),
        "nearest_preset": NEAREST,
        "resilience": {"$ref": "#/$defs/ResiliencePlan"}})


def _resilience_defs(defs: dict) -> None:
    s = _schema(ResiliencePlan)
    defs.update(s.pop("$defs", {}))
    defs["ResiliencePlan"] = s


def _dataclass(cls: type, defs: dict) -> dict:
    """The schema of a dataclass the evidence readers dump (its $defs collected into `defs`)."""
    s = _schema(cls)
    defs.update(s.pop("$defs", {}))
    return s


NULLABLE_NUMBER = {"anyOf": [{"type": "number"}, {"type": "null"}]}


def _compare(defs: dict) -> dict:
    """`dtplan compare`: per term seconds, per memory view bytes, each with measured/estimate."""
    def rows(unit: str) -> dict:
        return {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "required": [f"measured_{unit}", f"estimate_{unit}", "ratio"],
            "properties": {f"measured_{unit}": NULLABLE_NUMBER, f"estimate_{unit}": NULLABLE_NUMBER,
                           "ratio": NULLABLE_NUMBER}}}
    return {"type": "object", "required": ["terms", "memory", "largest_discrepancy", "sources"],
            "properties": {"terms": rows("s"), "memory": rows("bytes"),
                           "largest_discrepancy": {"type": "string"}, "sources": STR_LIST,
                           "notes": STR_LIST}}


def _evidence(defs: dict) -> dict:
    """`calibrate --from FILE` without a base profile: what each file measured."""
    item = _dataclass(Evidence, defs)
    return {"type": "object", "required": ["evidence", "fits"],
            "properties": {"evidence": {"type": "array", "items": item},
                           "fits": {"type": "object", "additionalProperties": {"type": "string"}},
                           "notes": STR_LIST}}


def _profile_fit(defs: dict) -> dict:
    """`calibrate --from FILE --hardware NAME`: the constants fitted to the evidence."""
    fit = _dataclass(ConstantFit, defs)
    cal = {"type": "object", "required": ["base_profile", "fits", "calibrated", "unchanged"],
           "properties": {"base_profile": {"type": "string"},
                          "fits": {"type": "array", "items": fit},
                          "calibrated": {"type": "object", "additionalProperties": {"type": "number"}},
                          "unchanged": {"type": "object", "additionalProperties": {"type": "string"}},
                          "notes": STR_LIST}}
    return {"type": "object", "required": ["calibration", "evidence"],
            "properties": {"calibration": cal, "notes": STR_LIST,
                           "evidence": _evidence(defs)["properties"]["evidence"]}}


def _sweep(defs: dict) -> dict:
    item = _object(FitResult, exclude=("best",), defs=defs)
    return {"type": "object", "properties": {"sweep": {"type": "array", "items": item},
                                             "ok": OK, "notes": STR_LIST,
                                             "nearest_preset": NEAREST}, "required": ["sweep"]}


# command → [(mode, builder)], in the order of json_out.MODES.
OUTPUTS: dict[str, list[tuple[str, Callable[[dict], dict]]]] = {
    "fit": [("search", lambda d: _object(FitResult, defs=d, extra={
                "ok": OK, "rejected": {"type": "integer"}, "notes": STR_LIST,
                "batch_advice": _batch_advice(d), "nearest_preset": NEAREST})),
            ("sweep", _sweep),
            ("shrink", lambda d: _object(ShrinkResult, exclude=("fit",), defs=d,
                                         extra={"ok": OK, "notes": STR_LIST}))],
    "estimate": [("estimate", _estimate)],
    "memory": [("budget", _estimate),
               ("states", lambda d: _object(StateMemoryResult, defs=d,
                                            extra={"ok": OK, "notes": STR_LIST}))],
    # cross_validation: without --hardware (the leave-one-family-out report)
    "calibrate": [("calibrate", lambda d: _object(CalibrationReport, defs=d, extra={
        "ok": OK, "notes": STR_LIST, "cross_validation": _dataclass(CrossValidation, d),
        "model_types": {"type": "array", "items": _dataclass(ModelTypeRun, d)}})),
                  ("none", lambda d: {"type": "object", "required": ["hardware", "rows"],
                                      "properties": {"hardware": {"type": "string"},
                                                     "cases_hardware": {
                                                         "type": "array",
                                                         "items": {"type": "string"}},
                                                     "rows": {"type": "array", "maxItems": 0},
                                                     "notes": STR_LIST,
                                                     "cross_validation": _dataclass(
                                                         CrossValidation, d)}}),
                  ("evidence", _evidence), ("profile-fit", _profile_fit)],
    "compare": [("compare", _compare)],
    "models": [("models", _list_of(ModelSpec, "models", {
        "preset": {"type": "string"}, "params": {"type": "integer"},
        "active_params": {"type": "integer"}, "mtp_params": {"type": "integer"},
        "moe_layers": {"type": "integer"}}))],
    "profiles": [("list", _list_of(HardwareProfile, "profiles")),
                 ("show", lambda d: _object(HardwareProfile, defs=d))],
    "layout": [("layout", lambda d: _object(LayoutResult, defs=d, extra={"ok": OK}))],
    "comm": [("comm", lambda d: _object(CommResult, defs=d,
                                        extra={"notes": STR_LIST}))],
    "bubble": [("bubble", lambda d: _object(BubbleResult, defs=d,
                                            extra={"notes": STR_LIST}))],
    "batch": [("batch", lambda d: _object(BatchResult, defs=d,
                                          extra={"notes": STR_LIST}))],
    "scaling": [("scaling", lambda d: _object(ScalingResult, defs=d,
                                              extra={"notes": STR_LIST}))],
    "checkpoint": [("simple", lambda d: _object(CheckpointResult, defs=d,
                                                extra={"notes": STR_LIST})),
                   ("plan", lambda d: _object(ResiliencePlan, defs=d, extra={
                       "ok": OK, "notes": STR_LIST, "rows": {"type": "array"}}))],
}
def check_schema() -> dict:
    """`dtplan check --format json`: the gate's Verdict model, in the common envelope."""
    s = verdict_json_schema()
    s["properties"] = {**{k: s["properties"][k] for k in ("schema_version", "command")},
                       "mode": {"const": "verdict"},
                       **{k: v for k, v in s["properties"].items()
                          if k not in ("schema_version", "command")}}
    s["required"] = list(dict.fromkeys(["schema_version", "command", "mode"] + s.get("required", [])))
    s["additionalProperties"] = False
    return _schema_transform(s)


def output_schema(command: str) -> dict:
    """The JSON Schema of `command`'s --format json output: one branch per mode."""
    command = COMMAND_OF.get(command, command)
    defs: dict[str, Any] = {}
    branches = []
    for mode, build in OUTPUTS[command]:
        if command in ("estimate", "memory") and mode in ("estimate", "budget"):
            _resilience_defs(defs)
        body = copy.deepcopy(build(defs))
        if "mode" in body["properties"]:
            body["properties"][f"{command}_mode"] = body["properties"].pop("mode")
            body["required"] = [f"{command}_mode" if k == "mode" else k for k in body["required"]]
        body["properties"] = {"schema_version": {"const": SCHEMA_VERSION},
                              "command": {"const": command}, "mode": {"const": mode},
                              **body["properties"]}
        body["required"] = ["schema_version", "command", "mode"] + body["required"]
        body["additionalProperties"] = False
        branches.append(body)
    schema = {"$schema": DRAFT, "title": f"dtplan {command} --format json",
              "oneOf": branches if len(branches) > 1 else None, **({} if len(branches) > 1
                                                                   else branches[0])}
    if schema.get("oneOf") is None:
        schema.pop("oneOf")
    schema["$defs"] = defs
    return _schema_transform(schema)
