"""The JSON every command prints, and its JSON Schema (`dtplan schema <command>`).

One envelope for every output: ``schema_version``, ``command``, ``mode`` (which of the command's
shapes follows: ``fit`` prints a ``search``, a ``sweep`` or a ``shrink``), ``ok`` where the
command has a verdict, then the result's fields. The fields are the library's pydantic models
dumped as they are, with three changes made here and in the schema alike:
- every key carries its unit: ``breakdown`` → ``breakdown_s``, a stage's ``items`` →
  ``items_bytes`` (the rest already do: ``_bytes``, ``_s``, ``_fraction``, ``_pct``);
- counts are integers (``accumulation``, ``tokens_per_step``, ``params``) when whole;
- every structured ``layout`` gets its display string beside it (``layout_text``).
Schemas come from the same pydantic models, so a field added to a model shows in both.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Callable

SCHEMA_VERSION = 1
DRAFT = "https://json-schema.org/draft/2020-12/schema"
RENAMES = {"breakdown": "breakdown_s", "items": "items_bytes"}
COUNTS = frozenset({"accumulation", "tokens_per_step", "params", "active_params"})
LAYOUT_KEYS = frozenset({"layout", "plan_layout"})


def _layout_text(lay: dict) -> str:
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
            if k in COUNTS and isinstance(v, float) and v.is_integer():
                v = int(v)
            out[RENAMES.get(k, k)] = v
            if k in LAYOUT_KEYS and isinstance(v, dict) and "tp" in v:
                out[k + "_text"] = _layout_text(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [json_data(v) for v in obj]
    return obj


def _schema_transform(node: Any) -> Any:
    """The same transform on a JSON Schema: renamed properties, integer-or-number counts,
    ``layout_text`` declared beside each layout."""
    if isinstance(node, list):
        return [_schema_transform(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: _schema_transform(v) for k, v in node.items()}
    props = node.get("properties")
    if isinstance(props, dict):
        new: dict[str, Any] = {}
        for k, v in props.items():
            new[RENAMES.get(k, k)] = v
            if k in LAYOUT_KEYS:
                new[k + "_text"] = {"type": "string", "description": "the layout as one line"}
        node["properties"] = new
        if "required" in node:
            node["required"] = [RENAMES.get(k, k) for k in node["required"]]
    return node


def _model(path: str) -> Any:
    mod, _, name = path.partition(":")
    return getattr(importlib.import_module(mod, "planner"), name)


def _object(model_path: str | None, *, exclude: tuple[str, ...] = (), extra: dict | None = None,
            defs: dict) -> dict:
    """An object schema from a pydantic model (its $defs collected into `defs`), minus
    `exclude`, plus `extra` properties."""
    props: dict[str, Any] = {}
    required: list[str] = []
    if model_path is not None:
        s = _model(model_path).model_json_schema(mode="serialization")
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


def _estimate(defs: dict) -> dict:
    return _object(".estimation:Estimate", defs=defs, extra={
        "ok": OK, "fits": OK, "notes": STR_LIST, "nearest_preset": NEAREST,
        "resilience": {"$ref": "#/$defs/ResiliencePlan"}})


def _resilience_defs(defs: dict) -> None:
    s = _model(".resilience:ResiliencePlan").model_json_schema(mode="serialization")
    defs.update(s.pop("$defs", {}))
    defs["ResiliencePlan"] = s


def _sweep(defs: dict) -> dict:
    item = _object(".api:FitResult", exclude=("best",), defs=defs)
    return {"type": "object", "properties": {"sweep": {"type": "array", "items": item},
                                             "ok": OK, "notes": STR_LIST,
                                             "nearest_preset": NEAREST}, "required": ["sweep"]}


# command → [(mode, builder)]; the first mode is the command's default.
OUTPUTS: dict[str, list[tuple[str, Callable[[dict], dict]]]] = {
    "fit": [("search", lambda d: _object(".api:FitResult", defs=d, extra={
                "ok": OK, "rejected": {"type": "integer"}, "notes": STR_LIST,
                "nearest_preset": NEAREST})),
            ("sweep", _sweep),
            ("shrink", lambda d: _object(".shrink:ShrinkResult", exclude=("fit",), defs=d,
                                         extra={"ok": OK, "notes": STR_LIST}))],
    "estimate": [("estimate", _estimate)],
    "memory": [("budget", _estimate),
               ("states", lambda d: _object(".calculators:StateMemoryResult", defs=d,
                                            extra={"ok": OK, "notes": STR_LIST}))],
    "calibrate": [("calibrate", lambda d: _object(".calibration:CalibrationReport", defs=d,
                                                  extra={"ok": OK, "notes": STR_LIST})),
                  ("none", lambda d: {"type": "object", "required": ["hardware", "rows"],
                                      "properties": {"hardware": {"type": "string"},
                                                     "cases_hardware": {
                                                         "type": "array",
                                                         "items": {"type": "string"}},
                                                     "rows": {"type": "array", "maxItems": 0}}})],
    "models": [("models", _list_of(".specs.model:ModelSpec", "models", {
        "preset": {"type": "string"}, "params": {"type": "integer"},
        "active_params": {"type": "integer"}}))],
    "profiles": [("list", _list_of(".specs.hardware:HardwareProfile", "profiles")),
                 ("show", lambda d: _object(".specs.hardware:HardwareProfile", defs=d))],
    "layout": [("layout", lambda d: _object(".specs.layout:LayoutResult", defs=d, extra={"ok": OK}))],
    "comm": [("comm", lambda d: _object(".calculators:CommResult", defs=d,
                                        extra={"notes": STR_LIST}))],
    "bubble": [("bubble", lambda d: _object(".calculators:BubbleResult", defs=d,
                                            extra={"notes": STR_LIST}))],
    "batch": [("batch", lambda d: _object(".calculators:BatchResult", defs=d,
                                          extra={"notes": STR_LIST}))],
    "scaling": [("scaling", lambda d: _object(".calculators:ScalingResult", defs=d,
                                              extra={"notes": STR_LIST}))],
    "checkpoint": [("simple", lambda d: _object(".calculators:CheckpointResult", defs=d,
                                                extra={"notes": STR_LIST})),
                   ("plan", lambda d: _object(".resilience:ResiliencePlan", defs=d, extra={
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
    from ..gate import verdict_json_schema
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
