"""Plan files: the schema of a proposed training configuration and its safe loading.

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
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .engine.memory import OPTIMIZER_STATE_BYTES, PRECISION_RECIPES
from .errors import InputError
from .validate import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN, MAX_TOKENS_PER_BATCH
from .inputs.files import (MAX_ALIASES, MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES,  # noqa: F401
                           detect_format, load_document, parse_text, read_text,
                           safe_reference)


PRECISIONS = tuple(PRECISION_RECIPES)
OPTIMIZERS = tuple(OPTIMIZER_STATE_BYTES)


# ---- schema ----------------------------------------------------------------------------------

class _Strict(BaseModel):
    # strict: "8" is not an int and true is not 1; NaN/inf are refused everywhere.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class ModelSection(_Strict):
    """Where the model comes from: a preset name, a Hugging Face config.json, or inline shape
    fields (the ModelSpec fields). Inline fields next to ``preset`` or ``config`` override them."""

    preset: Optional[str] = Field(None, description="preset name or alias (dtplan models)")
    config: Optional[str] = Field(None, description="path to a Hugging Face config.json (or its "
                                  "directory), relative to the plan file")
    name: Optional[str] = None
    layers: Optional[int] = Field(None, ge=1)
    hidden: Optional[int] = Field(None, ge=1)
    heads: Optional[int] = Field(None, ge=1)
    kv_heads: Optional[int] = Field(None, ge=1)
    head_dim: Optional[int] = Field(None, ge=1)
    ffn: Optional[int] = Field(None, ge=1)
    mlp: Optional[Literal["gelu", "swiglu"]] = None
    vocab: Optional[int] = Field(None, ge=1)
    tied_embeddings: Optional[bool] = None
    position: Optional[Literal["learned", "rope", "alibi", "none"]] = None
    max_positions: Optional[int] = Field(None, ge=1)
    qkv_bias: Optional[bool] = None
    linear_bias: Optional[bool] = None
    norm: Optional[Literal["layernorm", "rmsnorm"]] = None
    dropout: Optional[bool] = None
    experts: Optional[int] = Field(None, ge=0)
    experts_per_token: Optional[int] = Field(None, ge=0)
    expert_ffn: Optional[int] = Field(None, ge=1)
    shared_experts: Optional[int] = Field(None, ge=0)
    dense_layers: Optional[int] = Field(None, ge=0)


class HardwareSection(_Strict):
    """A bundled profile (or a profile TOML file) with optional overrides."""

    profile: Optional[str] = Field(None, description="bundled profile name (dtplan hardware)")
    file: Optional[str] = Field(None, description="profile TOML, relative to the plan file")
    gpus_per_node: Optional[int] = Field(None, ge=1)
    gpu_memory_gb: Optional[float] = Field(None, gt=0)
    nic_gbit_per_gpu: Optional[float] = Field(None, gt=0)


class LayoutSection(_Strict):
    """The Layout fields. ``dp`` defaults to gpus ÷ (tp·pp·cp); precision and optimizer may be
    given here or at the top level (not both)."""

    tp: int = Field(1, ge=1, le=MAX_GPUS)
    pp: int = Field(1, ge=1, le=MAX_GPUS)
    dp: Optional[int] = Field(None, ge=1, le=MAX_GPUS)
    cp: int = Field(1, ge=1, le=MAX_GPUS)
    ep: int = Field(1, ge=1, le=MAX_GPUS)
    zero: int = Field(0, ge=0, le=3)
    shard_group: Optional[int] = Field(None, ge=1, le=MAX_GPUS)
    micro_batch: Optional[int] = Field(None, ge=1, le=MAX_GPUS)
    schedule: Literal["1f1b", "gpipe", "interleaved"] = "1f1b"
    chunks: int = Field(1, ge=1, le=MAX_GPUS)
    sp: Optional[bool] = None
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_layers: Optional[int] = Field(None, ge=0, le=MAX_GPUS)
    offload_optimizer: Literal["none", "cpu", "nvme"] = "none"
    offload_params: Literal["none", "cpu", "nvme"] = "none"
    precision: Optional[str] = None
    optimizer: Optional[str] = None


class BatchSection(_Strict):
    """Global batch in sequences (``global_batch``) or tokens (``tokens_per_batch``); the
    micro-batch b and, optionally, the gradient-accumulation steps a the job will use."""

    global_batch: Optional[int] = Field(None, ge=1, le=MAX_GLOBAL_BATCH,
                                        description="sequences per optimizer step")
    tokens_per_batch: Optional[int] = Field(None, ge=1, le=MAX_TOKENS_PER_BATCH,
                                            description="tokens per optimizer step")
    micro_batch: Optional[int] = Field(None, ge=1, le=MAX_GPUS,
                                       description="sequences per GPU per micro-step")
    accumulation: Optional[int] = Field(None, ge=1, le=MAX_GLOBAL_BATCH,
                                        description="gradient-accumulation steps as "
                                        "configured in the job; checked against B = b·a·DP")


class CheckpointSection(_Strict):
    """Checkpoint policy. Cost δ: ``cost_min`` directly, else the checkpoint size (``size_gb``,
    default weights + master + optimizer state, planner.resilience) ÷ the write bandwidth
    (``write_gbps``, default the profile's storage, capped by the writers' NICs). Failure rate:
    exactly one of ``mtbf_hours`` (job), ``node_mtbf_hours`` or ``gpu_mtbf_hours``."""

    interval_min: float = Field(..., gt=0)
    cost_min: Optional[float] = Field(None, gt=0)
    size_gb: Optional[float] = Field(None, gt=0)
    write_gbps: Optional[float] = Field(None, gt=0)
    mtbf_hours: Optional[float] = Field(None, gt=0, description="job (whole cluster) MTBF")
    node_mtbf_hours: Optional[float] = Field(None, gt=0, description="one node's MTBF; the "
                                             "job's is this ÷ nodes")
    gpu_mtbf_hours: Optional[float] = Field(None, gt=0, description="one GPU's MTBF; the job's "
                                            "is this ÷ gpus")
    restart_min: float = Field(0.0, ge=0)


class BudgetSection(_Strict):
    """Overrides of the memory reserve (specs.budget.MemoryBudget); omitted fields keep defaults."""

    context_gb: Optional[float] = Field(None, ge=0, description="CUDA/NCCL context per GPU")
    comm_buffer_gb: Optional[float] = Field(None, ge=0, description="communication buckets")
    fragmentation_fraction: Optional[float] = Field(None, ge=0, lt=1)
    margin_fraction: Optional[float] = Field(None, ge=0, lt=1)


class Thresholds(_Strict):
    """Limits the plan must meet beyond fitting; each one set becomes a rule."""

    max_memory_fraction: Optional[float] = Field(None, gt=0, le=1,
                                                 description="peak ÷ GPU capacity")
    min_headroom_gb: Optional[float] = Field(None, ge=0, description="usable − peak, GB")
    min_mfu: Optional[float] = Field(None, ge=0, le=1)
    max_bubble: Optional[float] = Field(None, ge=0, le=1)
    max_step_time_s: Optional[float] = Field(None, gt=0)
    min_tokens_per_s_per_gpu: Optional[float] = Field(None, gt=0)
    max_collective_fraction: Optional[float] = Field(None, ge=0, le=1)
    max_checkpoint_waste: Optional[float] = Field(None, ge=0, le=1)


class Plan(_Strict):
    """A proposed training configuration (plan-file schema version 1)."""

    version: Literal[1] = Field(1, description="plan-file schema version")
    name: Optional[str] = None
    description: Optional[str] = None
    model: Union[str, ModelSection]
    hardware: Union[str, HardwareSection] = "h100"
    gpus: int = Field(..., ge=1, le=MAX_GPUS)
    layout: LayoutSection = LayoutSection()
    batch: BatchSection = BatchSection()
    seq_len: int = Field(..., ge=1, le=MAX_SEQ_LEN)
    precision: Optional[str] = None
    optimizer: Optional[str] = None
    checkpoint: Optional[CheckpointSection] = None
    budget: Optional[BudgetSection] = None
    thresholds: Thresholds = Thresholds()


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


def _pick(data: Any, errors: list[dict]) -> dict:
    # Union members each report an error; prefer the one that reached furthest into the data.
    def depth(e):
        return len(_error_path(data, e["loc"]).split("."))
    return max(errors, key=depth)


def _describe(err: dict) -> str:
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


def validate_plan(data: Any, where: str = "plan") -> Plan:
    """Raw parsed document → Plan; one InputError naming the key path on any problem."""
    if data is None:
        raise InputError(where, "empty document; a plan needs at least model, gpus, seq_len")
    if not isinstance(data, dict):
        raise InputError(where, f"top level must be a mapping of keys, got {type(data).__name__}")
    try:
        check_unknown_keys(data)
    except InputError as e:
        raise InputError(f"{where}: {e.field}" if where else e.field, e.message) from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        err = _pick(data, e.errors())
        path = _error_path(data, err["loc"]) or "plan"
        raise InputError(f"{where}: {path}" if where else path, _describe(err)) from None
    for key, value, allowed in (("precision", plan.precision, PRECISIONS),
                                ("layout.precision", plan.layout.precision, PRECISIONS),
                                ("optimizer", plan.optimizer, OPTIMIZERS),
                                ("layout.optimizer", plan.layout.optimizer, OPTIMIZERS)):
        if value is not None and value not in allowed:
            near = difflib.get_close_matches(value, allowed, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise InputError(f"{where}: {key}", f"must be one of {', '.join(allowed)}, got "
                                                f"{value!r}{hint}")
    return plan


def load_plan(path: str | Path, *, option: Optional[str] = None) -> tuple[Plan, str]:
    """Read and validate one plan file; returns the Plan and the file's text (for line lookup).
    ``option`` is the command-line option the path came from (``--from-plan``), named first."""
    text, _fmt, data = load_document(path, option=option)
    return validate_plan(data, f"{option}: {path}" if option else str(path)), text


def json_schema() -> dict[str, Any]:
    """JSON Schema of the plan file (``dtplan schema``)."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dtplan plan file"
    return schema

