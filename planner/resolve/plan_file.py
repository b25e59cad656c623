"""Plan files: safe loading and checking against the schema (planner.specs.plan).

A plan is one YAML, TOML or JSON document (``dtplan schema`` prints its JSON Schema):

    model: llama3-70b                      # preset | {config: path} | inline shape fields
    hardware: h100                         # profile | {profile|file, gpus_per_node, ...}
    gpus: 256
    layout: {tp: 8, pp: 4, zero: 1, ...}   # the Layout fields; dp is derived when omitted
    batch: {global_batch: 1024, micro_batch: 1}
    seq_len: 8192
    checkpoint: {interval_min: 120, mtbf_hours: 12}
    thresholds: {max_memory_fraction: 0.95, min_mfu: 0.3}

Loading is defensive because a CI gate reads files from pull requests: the size is checked
before reading (1 MB), binary and non-UTF-8 bytes are refused, YAML goes through a SafeLoader
that bounds aliases, nodes and nesting depth (a "billion laughs" document is refused while it
is being composed), and every mapping is validated with ``extra="forbid"`` so a misspelt key is
an error naming its path and the closest valid key. Paths inside a plan (a model's config.json,
a hardware profile) are resolved relative to the plan file and must stay inside the plan's
directory or the working directory and be regular files. Every problem is one ``InputError``.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from planner.engine.memory import OPTIMIZER_STATE_BYTES, PRECISION_RECIPES
from planner.specs.framework import select_for
from planner.errors import InputError
from planner.io.lines import at_line
from planner.io.read import load_document
from planner.specs.plan import Plan


PRECISIONS = tuple(PRECISION_RECIPES)
OPTIMIZERS = tuple(OPTIMIZER_STATE_BYTES)


# ---- unknown keys, before pydantic, so the message names the path and a suggestion -------------

def _section_class(cls: type[BaseModel], key: str, value: Any) -> Optional[type[BaseModel]]:
    """The pydantic model a nested mapping at ``key`` is validated against, if any."""
    field = cls.model_fields[key]
    if not isinstance(value, dict):
        return None
    ann = field.annotation
    for arg in getattr(ann, "__args__", (ann,)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def check_unknown_keys(data: Any, cls: type[BaseModel] = Plan, prefix: str = "") -> None:
    if not isinstance(data, dict):
        return
    known = list(cls.model_fields)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str):
            raise InputError(path, "keys must be strings")
        if key not in cls.model_fields:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"did you mean '{prefix}{near[0]}'?" if near else f"allowed: {', '.join(known)}"
            raise InputError(path, f"unknown key; {hint}")
        sub = _section_class(cls, key, value)
        if sub is not None:
            check_unknown_keys(value, sub, f"{path}.")


def _error_path(data: Any, loc: tuple) -> str:
    """Dotted path of a pydantic error, skipping union-branch tags that are not keys."""
    parts, cur = [], data
    for el in loc:
        if isinstance(cur, dict) and el in cur:
            parts.append(str(el))
            cur = cur[el]
        elif isinstance(cur, list) and isinstance(el, int) and el < len(cur):
            parts.append(f"[{el}]")
            cur = cur[el]
        elif isinstance(el, str) and el.islower() and el not in ("str", "int", "float", "bool"):
            parts.append(el)  # a missing required field
    return ".".join(parts).replace(".[", "[")


def _pick(data: Any, errors: list[ErrorDetails]) -> ErrorDetails:
    # Union members each report an error; prefer the one that reached furthest into the data.
    def depth(e: ErrorDetails) -> int:
        return len(_error_path(data, e["loc"]).split("."))
    return max(errors, key=depth)


def _describe(err: ErrorDetails) -> str:
    t, ctx, val = err["type"], err.get("ctx") or {}, err.get("input")
    shown = json.dumps(val) if isinstance(val, (str, int, float, bool)) or val is None else type(val).__name__
    if t == "missing":
        return "missing; required"
    if t in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {shown}"
    if t in ("float_type", "float_parsing"):
        return f"must be a number, got {shown}"
    if t in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {shown}"
    if t in ("string_type",):
        return f"must be a string, got {shown}"
    if t == "literal_error":
        return f"must be one of {ctx.get('expected', '')}, got {shown}"
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}[t]
        lim = next(iter(ctx.values()), "")
        return f"must be {op} {lim}, got {shown}"
    if t == "finite_number":
        return "must be a finite number"
    if t in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys, got {shown}"
    return f"{err['msg']} (got {shown})"


def validate_plan(data: Any, where: str = "plan", text: str | None = None) -> Plan:
    """Raw parsed document → Plan; one InputError naming the key path (and its line in
    ``text``, the file's text, when given) on any problem."""
    if data is None:
        raise InputError(where, "empty document; a plan needs at least model, gpus, seq_len")
    if not isinstance(data, dict):
        raise InputError(where, f"top level must be a mapping of keys, got {type(data).__name__}")
    try:
        check_unknown_keys(data)
    except InputError as e:
        raise InputError(at_line(where, e.field, text), e.message) from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        err = _pick(data, e.errors())
        path = _error_path(data, err["loc"]) or "plan"
        raise InputError(at_line(where, path, text), _describe(err)) from None
    for key, value, allowed in (("precision", plan.precision, PRECISIONS),
                                ("layout.precision", plan.layout.precision, PRECISIONS),
                                ("optimizer", plan.optimizer, OPTIMIZERS),
                                ("layout.optimizer", plan.layout.optimizer, OPTIMIZERS)):
        if value is not None and value not in allowed:
            near = difflib.get_close_matches(value, allowed, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise InputError(at_line(where, key, text), f"must be one of {', '.join(allowed)}, got "
                                                f"{value!r}{hint}")
    select_for(f"{where}: framework", plan.framework)   # its estimates follow the plan's framework
    return plan


def plan_where(path: str | Path, option: Optional[str] = None) -> str:
    """How errors about a plan file name it: the path, after the option it came from
    (``--from-plan: plan.yaml``); resolve_plan's errors must name it alike to get their lines."""
    return f"{option}: {path}" if option else str(path)


def load_plan(path: str | Path, *, option: Optional[str] = None) -> tuple[Plan, str]:
    """Read and validate one plan file; returns the Plan and the file's text (for line lookup).
    ``option`` is the command-line option the path came from (``--from-plan``), named first."""
    text, _fmt, data = load_document(path, option=option)
    return validate_plan(data, plan_where(path, option), text), text


def json_schema() -> dict[str, Any]:
    """JSON Schema of the plan file (``dtplan schema``)."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dtplan plan file"
    return schema

