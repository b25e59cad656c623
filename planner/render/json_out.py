"""The JSON every command prints, and its JSON Schema (`dtplan schema <command>`).

One envelope for every output: ``schema_version``, ``command``, ``mode`` (which of the command's
shapes follows: ``fit`` prints a ``search``, a ``sweep`` or a ``shrink``), ``ok`` where the
command has a verdict, then the result's fields. The fields are the library's results (records,
dumped by specs.records.dump) as they are, with three changes made here and in the schema alike:
- every key carries its unit: ``breakdown`` → ``breakdown_s``, a stage's ``items`` →
  ``items_bytes`` (the rest already do: ``_bytes``, ``_s``, ``_fraction``, ``_pct``);
- byte figures (every ``*_bytes`` key, a stage's ``items_bytes``) are integers, rounded to the
  byte; counts that are always whole (``tokens_per_step``, ``params``) are integers, and counts
  that may not be (``accumulation`` of an invalid layout, a token budget) are integers when whole;
- every structured ``layout`` gets its display string beside it (``layout_text``).
Schemas come from the same classes (pydantic's TypeAdapter over each record), so a field added to
a result shows in both.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Callable

from planner.specs.records import json_schema

SCHEMA_VERSION = 1
DRAFT = "https://json-schema.org/draft/2020-12/schema"
# key → its unit-suffixed name, for a map of figures only (a list of checkpoint items keeps "items")
RENAMES = {"breakdown": "breakdown_s", "items": "items_bytes"}
COUNTS = frozenset({"accumulation", "train_tokens", "tokens"})   # integers when whole
WHOLE = frozenset({"tokens_per_step", "params", "active_params"})  # always whole: integers
# byte amounts whose key does not end in _bytes (a rate ends in _bytes_per_s and is not one)
BYTE_KEYS = frozenset({"bytes_per_gpu", "host_bytes_per_node"})


def _key(key: str, is_map: bool) -> tuple[str, bool]:
    """(the output name, whether its figures are bytes) of a key; `is_map`: its value is a map."""
    name = RENAMES.get(key, key) if is_map else key
    return name, name.endswith("_bytes") or name in BYTE_KEYS


def _as_int(v: Any) -> Any:
    """A float (or a dict of floats) rounded to integers; anything else unchanged."""
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        return int(round(v))
    if isinstance(v, dict):
        return {k: _as_int(x) for k, x in v.items()}
    return v


def _integer_schema(node: Any) -> Any:
    """A property's schema with every "number" made "integer" (through anyOf, dict values)."""
    if isinstance(node, list):
        return [_integer_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _integer_schema(v) for k, v in node.items()}
    if out.get("type") == "number":
        out["type"] = "integer"
    return out
LAYOUT_KEYS = frozenset({"layout", "plan_layout"})


def layout_text(lay: dict) -> str:
    parts = [f"TP{lay['tp']}", f"PP{lay['pp']}", f"DP{lay['dp']}"]
    parts += [f"CP{lay['cp']}"] if lay.get("cp", 1) > 1 else []
    parts += [f"EP{lay['ep']}"] if lay.get("ep", 1) > 1 else []
    parts += [f"ZeRO-{lay.get('zero', 0)}", f"mb{lay.get('micro_batch', 1)}", str(lay.get("schedule"))]
    parts += [f"v{lay['chunks']}"] if lay.get("chunks", 1) > 1 else []
    parts += [f"recompute={lay.get('recompute')}"]
    return " ".join(parts)


def json_data(obj: Any) -> Any:
    """The output transform: unit-suffixed keys, whole counts as integers, layout strings."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            v = json_data(v)
            name, is_bytes = _key(k, isinstance(v, dict))
            if k in COUNTS and isinstance(v, float) and v.is_integer():
                v = int(v)
            elif is_bytes or k in WHOLE:
                v = _as_int(v)
            out[name] = v
            if k in LAYOUT_KEYS and isinstance(v, dict) and "tp" in v:
                out[k + "_text"] = layout_text(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [json_data(v) for v in obj]
    return obj


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
            names[k], is_bytes = _key(k, is_map)
            new[names[k]] = _integer_schema(v) if is_bytes or k in WHOLE else v
            if k in LAYOUT_KEYS:
                new[k + "_text"] = {"type": "string", "description": "the layout as one line"}
        node["properties"] = new
        if "required" in node:
            node["required"] = [names.get(k, k) for k in node["required"]]
    return node


def _model(path: str) -> Any:
    mod, _, name = path.partition(":")
    return getattr(importlib.import_module(mod), name)


def _schema(path: str) -> dict:
    """The serialization schema of a result (a record, or a pydantic model)."""
    return json_schema(_model(path), mode="serialization")


def _object(model_path: str | None, *, exclude: tuple[str, ...] = (), extra: dict | None = None,
            defs: dict) -> dict:
    """An object schema from a result class (its $defs collected into `defs`), minus `exclude`,
    plus `extra` properties."""
    props: dict[str, Any] = {}
    required: list[str] = []
    if model_path is not None:
        s = _schema(model_path)
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


def _list_of(model_path: str, key: str, extra_item: dict | None = None) -> Callable[[dict], dict]:
    def build(defs: dict) -> dict:
        item = _object(model_path, extra=extra_item, defs=defs)
        return {"type": "object", "properties": {key: {"type": "array", "items": item},
                                                 "notes": STR_LIST, "ok": OK}, "required": [key]}
    return build


def _batch_advice(defs: dict) -> dict:
    """planner.advice.batch.BatchAdvice, or null when a bigger batch would not clear the threshold."""
    s = _schema("planner.advice.batch:BatchAdvice")
    defs.update(s.pop("$defs", {}))
    defs["BatchAdvice"] = s
    return {"anyOf": [{"$ref": "#/$defs/BatchAdvice"}, {"type": "null"}]}


def _estimate(defs: dict) -> dict:
    return _object("planner.evaluation.estimate:Estimate", defs=defs, extra={
        "ok": OK, "fits": OK, "notes": STR_LIST, "batch_advice": _batch_advice(defs),
        "nearest_preset": NEAREST,
        "resilience": {"$ref": "#/$defs/ResiliencePlan"}})


def _resilience_defs(defs: dict) -> None:
    s = _schema("planner.resilience.planning:ResiliencePlan")
    defs.update(s.pop("$defs", {}))
    defs["ResiliencePlan"] = s


def _dataclass(path: str, defs: dict) -> dict:
    """The schema of a dataclass the evidence readers dump (its $defs collected into `defs`)."""
    s = _schema(path)
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
    item = _dataclass("planner.evidence.model:Evidence", defs)
    return {"type": "object", "required": ["evidence", "fits"],
            "properties": {"evidence": {"type": "array", "items": item},
                           "fits": {"type": "object", "additionalProperties": {"type": "string"}},
                           "notes": STR_LIST}}


def _profile_fit(defs: dict) -> dict:
    """`calibrate --from FILE --hardware NAME`: the constants fitted to the evidence."""
    fit = _dataclass("planner.calibration.fit_links:ConstantFit", defs)
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
    item = _object("planner.search.fit:FitResult", exclude=("best",), defs=defs)
    return {"type": "object", "properties": {"sweep": {"type": "array", "items": item},
                                             "ok": OK, "notes": STR_LIST,
                                             "nearest_preset": NEAREST}, "required": ["sweep"]}


# command → [(mode, builder)]; the first mode is the command's default.
OUTPUTS: dict[str, list[tuple[str, Callable[[dict], dict]]]] = {
    "fit": [("search", lambda d: _object("planner.search.fit:FitResult", defs=d, extra={
                "ok": OK, "rejected": {"type": "integer"}, "notes": STR_LIST,
                "batch_advice": _batch_advice(d), "nearest_preset": NEAREST})),
            ("sweep", _sweep),
            ("shrink", lambda d: _object("planner.advice.shrink:ShrinkResult", exclude=("fit",), defs=d,
                                         extra={"ok": OK, "notes": STR_LIST}))],
    "estimate": [("estimate", _estimate)],
    "memory": [("budget", _estimate),
               ("states", lambda d: _object("planner.evaluation.calculators:StateMemoryResult", defs=d,
                                            extra={"ok": OK, "notes": STR_LIST}))],
    "calibrate": [("calibrate", lambda d: _object("planner.calibration.published:CalibrationReport", defs=d,
                                                  extra={"ok": OK, "notes": STR_LIST})),
                  ("none", lambda d: {"type": "object", "required": ["hardware", "rows"],
                                      "properties": {"hardware": {"type": "string"},
                                                     "cases_hardware": {
                                                         "type": "array",
                                                         "items": {"type": "string"}},
                                                     "rows": {"type": "array", "maxItems": 0}}}),
                  ("evidence", _evidence), ("profile-fit", _profile_fit)],
    "compare": [("compare", _compare)],
    "models": [("models", _list_of("planner.specs.model:ModelSpec", "models", {
        "preset": {"type": "string"}, "params": {"type": "integer"},
        "active_params": {"type": "integer"}}))],
    "profiles": [("list", _list_of("planner.specs.hardware:HardwareProfile", "profiles")),
                 ("show", lambda d: _object("planner.specs.hardware:HardwareProfile", defs=d))],
    "layout": [("layout", lambda d: _object("planner.specs.layout:LayoutResult", defs=d, extra={"ok": OK}))],
    "comm": [("comm", lambda d: _object("planner.evaluation.calculators:CommResult", defs=d,
                                        extra={"notes": STR_LIST}))],
    "bubble": [("bubble", lambda d: _object("planner.evaluation.calculators:BubbleResult", defs=d,
                                            extra={"notes": STR_LIST}))],
    "batch": [("batch", lambda d: _object("planner.evaluation.calculators:BatchResult", defs=d,
                                          extra={"notes": STR_LIST}))],
    "scaling": [("scaling", lambda d: _object("planner.evaluation.calculators:ScalingResult", defs=d,
                                              extra={"notes": STR_LIST}))],
    "checkpoint": [("simple", lambda d: _object("planner.evaluation.calculators:CheckpointResult", defs=d,
                                                extra={"notes": STR_LIST})),
                   ("plan", lambda d: _object("planner.resilience.planning:ResiliencePlan", defs=d, extra={
                       "ok": OK, "notes": STR_LIST, "rows": {"type": "array"}}))],
}
COMMAND_OF = {"profiles show": "profiles"}
DEFAULT_MODE = {"profiles show": "show"}


def default_mode(command: str) -> str:
    if command in DEFAULT_MODE:
        return DEFAULT_MODE[command]
    modes = OUTPUTS.get(COMMAND_OF.get(command, command))
    return modes[0][0] if modes else command


def envelope(command: str, mode: str, ok: bool | None, data: dict, notes: list[str]) -> dict:
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION,
                               "command": COMMAND_OF.get(command, command), "mode": mode}
    if ok is not None:
        payload["ok"] = ok
    data = json_data(data)
    if "mode" in data:  # a result's own "mode" (scaling: strong/weak) must not shadow the envelope's
        data[f"{payload['command']}_mode"] = data.pop("mode")
    payload.update(data)
    if notes:
        payload.setdefault("notes", notes)
    return payload


def check_schema() -> dict:
    """`dtplan check --format json`: the gate's Verdict model, in the common envelope."""
    from planner.gate.check import verdict_json_schema
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
