"""The JSON every command prints (its JSON Schema: planner.render.json_schema).

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
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1
DRAFT = "https://json-schema.org/draft/2020-12/schema"
# key → its unit-suffixed name, for a map of figures only (a list of checkpoint items keeps "items")
RENAMES = {"breakdown": "breakdown_s", "items": "items_bytes"}
COUNTS = frozenset({"accumulation", "train_tokens", "tokens"})   # integers when whole
WHOLE = frozenset({"tokens_per_step", "params", "active_params"})  # always whole: integers
# byte amounts whose key does not end in _bytes (a rate ends in _bytes_per_s and is not one)
BYTE_KEYS = frozenset({"bytes_per_gpu", "host_bytes_per_node"})


def output_key(key: str, is_map: bool) -> tuple[str, bool]:
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


def integer_schema(node: Any) -> Any:
    """A property's schema with every "number" made "integer" (through anyOf, dict values)."""
    if isinstance(node, list):
        return [integer_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: integer_schema(v) for k, v in node.items()}
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
            name, is_bytes = output_key(k, isinstance(v, dict))
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


# The shapes each command's JSON takes (its `mode`), the default first; planner.render.json_schema
# declares one schema per (command, mode).
MODES: dict[str, tuple[str, ...]] = {
    "fit": ("search", "sweep", "shrink"), "estimate": ("estimate",), "memory": ("budget", "states"),
    "calibrate": ("calibrate", "none", "evidence", "profile-fit"), "compare": ("compare",),
    "models": ("models",), "profiles": ("list", "show"), "layout": ("layout",), "comm": ("comm",),
    "bubble": ("bubble",), "batch": ("batch",), "scaling": ("scaling",),
    "checkpoint": ("simple", "plan"),
}
COMMAND_OF = {"profiles show": "profiles"}
DEFAULT_MODE = {"profiles show": "show"}


def default_mode(command: str) -> str:
    if command in DEFAULT_MODE:
        return DEFAULT_MODE[command]
    modes = MODES.get(COMMAND_OF.get(command, command))
    return modes[0] if modes else command


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


