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
import os
import stat
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .engine.memory import OPTIMIZER_STATE_BYTES, PRECISION_RECIPES
from .errors import InputError

MAX_FILE_BYTES = 1_000_000      # plan and engine-config files; real ones are a few kB
MAX_DEPTH = 32                  # nesting of mappings/lists; a plan needs 3
MAX_NODES = 20_000              # YAML nodes composed (after alias expansion counting)
MAX_ALIASES = 100               # YAML alias uses; plans need none

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

    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: Optional[int] = Field(None, ge=1)
    cp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    zero: int = Field(0, ge=0, le=3)
    shard_group: Optional[int] = Field(None, ge=1)
    micro_batch: Optional[int] = Field(None, ge=1)
    schedule: Literal["1f1b", "gpipe", "interleaved"] = "1f1b"
    chunks: int = Field(1, ge=1)
    sp: Optional[bool] = None
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_layers: Optional[int] = Field(None, ge=0)
    offload_optimizer: Literal["none", "cpu", "nvme"] = "none"
    offload_params: Literal["none", "cpu", "nvme"] = "none"
    precision: Optional[str] = None
    optimizer: Optional[str] = None


class BatchSection(_Strict):
    """Global batch in sequences (``global_batch``) or tokens (``tokens_per_batch``); the
    micro-batch b and, optionally, the gradient-accumulation steps a the job will use."""

    global_batch: Optional[int] = Field(None, ge=1, description="sequences per optimizer step")
    tokens_per_batch: Optional[int] = Field(None, ge=1, description="tokens per optimizer step")
    micro_batch: Optional[int] = Field(None, ge=1, description="sequences per GPU per micro-step")
    accumulation: Optional[int] = Field(None, ge=1, description="gradient-accumulation steps as "
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
    gpus: int = Field(..., ge=1)
    layout: LayoutSection = LayoutSection()
    batch: BatchSection = BatchSection()
    seq_len: int = Field(..., ge=1)
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


# ---- safe reading ----------------------------------------------------------------------------

def read_text(path: str | Path, *, what: str = "plan file") -> str:
    """The file's text, refusing missing, special, oversized, binary and non-UTF-8 files
    before reading more than MAX_FILE_BYTES."""
    p = Path(path)
    where = str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(where, f"file not found; expected a {what}") from None
    except OSError as e:
        raise InputError(where, f"cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(where, f"is a directory; expected a {what}")
    if not stat.S_ISREG(st.st_mode):  # FIFOs, devices: reading could block or never end
        raise InputError(where, f"not a regular file; expected a {what}")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(where, f"file is {st.st_size} bytes; a {what} must be at most "
                                f"{MAX_FILE_BYTES // 1_000_000} MB")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(where, f"cannot read ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:  # grew between stat and read
        raise InputError(where, f"file is larger than {MAX_FILE_BYTES // 1_000_000} MB")
    if not raw.strip():
        raise InputError(where, f"file is empty; expected a {what}")
    if b"\x00" in raw:
        raise InputError(where, f"binary data (NUL bytes); expected a text {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(where, f"not UTF-8 text (bad byte at offset {e.start})") from None
    return text.removeprefix("\ufeff")


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs and deep nesting while composing, before any
    expansion: it counts alias uses, nodes (an alias counts as the size of its target) and depth."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} YAML aliases (alias bomb?)")
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            self._nodes += self._sizes.get(id(target), 1)
            if self._nodes > MAX_NODES:
                raise _Refused(f"YAML expands to more than {MAX_NODES} nodes (alias bomb?)")
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
        before = self._nodes
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} YAML nodes")
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._nodes - before
        self._depth -= 1
        return node


class _Refused(Exception):
    pass


def _depth_ok(obj: Any, limit: int = MAX_DEPTH) -> None:
    """Iterative depth/size check for parsed JSON/TOML (no recursion of our own)."""
    stack, count = [(obj, 1)], 0
    while stack:
        cur, d = stack.pop()
        count += 1
        if d > limit:
            raise _Refused(f"nested deeper than {limit} levels")
        if count > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} values")
        if isinstance(cur, dict):
            stack.extend((v, d + 1) for v in cur.values())
        elif isinstance(cur, list):
            stack.extend((v, d + 1) for v in cur)


def _bracket_depth(text: str) -> int:
    """Upper bound on JSON/TOML nesting from brackets outside strings (cheap pre-scan so a
    deeply nested document never reaches a recursive parser)."""
    depth = best = 0
    in_str = esc = False
    quote = ""
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def detect_format(path: str | Path, text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".toml":
        return "toml"
    if suffix == ".json":
        return "json"
    head = text.lstrip()[:1]
    return "json" if head in "{[" and head else "yaml"


def parse_text(text: str, fmt: str, where: str) -> Any:
    """Parse YAML / TOML / JSON text with bounded size, aliases and depth."""
    try:
        if fmt in ("json", "toml") and _bracket_depth(text) > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
        if fmt == "yaml":
            loader = _BoundedLoader(text)
            try:
                data = loader.get_single_data()
            finally:
                loader.dispose()
        elif fmt == "toml":
            import tomllib
            data = tomllib.loads(text)
        elif fmt == "json":
            data = json.loads(text, parse_constant=_no_constant)
        else:  # pragma: no cover
            raise InputError(where, f"unknown format {fmt!r}")
        _depth_ok(data)
    except _Refused as e:
        raise InputError(where, f"refused: {e}") from None
    except RecursionError:
        raise InputError(where, f"refused: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(where, f"invalid YAML{at}: {problem}") from None
    except json.JSONDecodeError as e:
        raise InputError(where, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except ValueError as e:  # tomllib.TOMLDecodeError and JSON constants
        raise InputError(where, f"invalid {fmt.upper()}: {e}") from None
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def load_document(path: str | Path, *, what: str = "plan file") -> tuple[str, str, Any]:
    """(text, format, parsed data) of a plan or engine-config file."""
    text = read_text(path, what=what)
    fmt = detect_format(path, text)
    return text, fmt, parse_text(text, fmt, str(path))


def load_plan(path: str | Path) -> tuple[Plan, str]:
    """Read and validate one plan file; returns the Plan and the file's text (for line lookup)."""
    text, _fmt, data = load_document(path)
    return validate_plan(data, str(path)), text


# ---- paths referenced by a plan ----------------------------------------------------------------

def safe_reference(ref: str, base_dir: Path, key: str, what: str) -> Path:
    """Resolve a path written in a plan: relative to the plan's directory, it must stay inside
    that directory or the working directory, and be a readable regular file (or a directory
    holding config.json for models)."""
    if not ref.strip() or "\x00" in ref:
        raise InputError(key, "must be a non-empty path")
    p = Path(ref)
    p = (base_dir / p) if not p.is_absolute() else p
    try:
        resolved = p.resolve(strict=False)
    except (OSError, RuntimeError) as e:
        raise InputError(key, f"{ref}: cannot resolve ({e})") from None
    roots = [base_dir.resolve(), Path.cwd().resolve()]
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise InputError(key, f"{ref}: resolves outside the plan's directory and the working "
                              "directory; refusing to read it")
    if resolved.is_dir() and what == "config.json":
        resolved = resolved / "config.json"
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        raise InputError(key, f"{ref}: file not found") from None
    except OSError as e:
        raise InputError(key, f"{ref}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(key, f"{ref}: not a regular file; expected a {what}")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(key, f"{ref}: file is {st.st_size} bytes; a {what} must be at most 1 MB")
    if not os.access(resolved, os.R_OK):
        raise InputError(key, f"{ref}: not readable (permission denied)")
    return resolved


def json_schema() -> dict[str, Any]:
    """JSON Schema of the plan file (``dtplan schema``)."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dtplan plan file"
    return schema

