"""Framework profiles: how a training framework's implementation spends time (and memory).

A profile is a TOML file (``framework_profiles/*.toml``, shipped in the wheel) with a ``[time]``
table (gradient/reduce dtypes, sharded-DP gather granularity and re-gathers, prefetch depth,
bucket sizes, pipeline send/recv style, what "selective" recompute means, kernel class) and a
``[memory]`` table (precision default and memory behaviour: framework_memory.py). Every bundled
value cites the framework's own source in a TOML comment. A user copies one, edits it and passes
the path wherever ``--framework`` is accepted.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import Field, ValidationError

from planner.errors import InputError, named, validation_message
from planner.specs.knobs import Schedule
from planner.specs.framework_memory import MemoryBehaviour
from planner.specs.provenance import Provenance, key_line, unwrap
from planner.specs.records import FORBID, validate

DEFAULT_FRAMEWORK = "megatron"
MAX_FRAMEWORK_BYTES = 256_000

# Bytes per element of the dtypes a profile may name.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
Dtype = Literal["fp32", "bf16", "fp16", "fp8"]
KERNEL_CLASSES = ("fused", "compiled", "eager")
# The [time] constants that set speed: each written `{ value = …, kind = "…", source = "…" }`
# (specs/provenance.py), so its source is declared once beside it.
PROVENANCED = ("bucket_params", "bucket_params_per_dp_rank", "prefetch_bucket_params",
               "prefetch_depth", "selective_matmul_share", "tp_overlap_rs_splits", "step_host_s",
               "ep_load_imbalance", "moe_capacity_factor")
# The layout knob's schedules (knobs.Schedule), in the order the capabilities line names them.
SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1", "dualpipe", "dualpipev")
EpOverlap = Literal["no-pp", "1f1b", "interleaved", "gpipe", "zb-h1", "dualpipe", "dualpipev"]


@dataclass(frozen=True, kw_only=True)
class TimeBehaviour:
    """What in a framework's implementation changes step time."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    grad_dtype: Annotated[Dtype, Field(description="dtype gradients are accumulated in")]
    reduce_dtype: Annotated[Dtype, Field(
        description="dtype of the data-parallel gradient reduction")]
    param_gather_dtype: Annotated[Dtype, Field(
        description="dtype of sharded-DP parameter all-gathers")]
    fp8_all_gather: Annotated[bool, Field(
        description="under an fp8 recipe that allows it (tensorwise), FSDP all-gathers the "
                    "blocks' linear weights cast to fp8 (torchao enable_fsdp_float8_all_gather)"
    )] = False
    sharded_gather: Annotated[Literal["per-layer", "per-module", "per-bucket"], Field(
        description="unit a sharded-DP all-gather / reduce-scatter covers")]
    bucket_params: Annotated[float, Field(
        ge=0, description="gradient bucket size, parameters (0: per unit)")]
    bucket_params_per_dp_rank: Annotated[float, Field(
        ge=0, description="bucket growth per DP rank")] = 0.0
    prefetch_bucket_params: Annotated[float, Field(
        ge=0, description="ZeRO-3 prefetch bucket, params")] = 0.0
    regather_in_backward: Annotated[bool, Field(
        description="sharded params gathered again in backward")]
    regather_in_backward_under_pp: Annotated[Optional[bool], Field(
        description="the same under pipeline parallelism (None: as without PP)")] = None
    regather_under_recompute: Annotated[bool, Field(
        description="full recompute gathers params once more")]
    prefetch_depth: Annotated[int, Field(
        ge=0, le=8, description="units gathered ahead of the compute")]
    overlap_grad_reduce: Annotated[bool, Field(
        description="gradient reduction overlaps the backward")]
    overlap_grad_reduce_stage3: Annotated[Optional[bool], Field(
        description="the same for ZeRO-3 (None: as overlap_grad_reduce)")] = None
    pp_p2p: Annotated[Literal["overlapped", "blocking"], Field(
        description="pipeline send/recv style")]
    pp_scatter_gather: Annotated[bool, Field(
        description="PP sends 1/TP of the activation per rank")]
    selective_recompute: Annotated[Literal["core-attention", "op-save-list", "none"], Field(
        description="what 'selective' recompute re-runs")]
    selective_matmul_share: Annotated[float, Field(
        ge=0, le=1, description="share of the layer's linear GEMMs selective recompute runs "
                                "again")]
    kernel_class: Annotated[Literal["fused", "compiled", "eager"], Field(
        description="kernel class setting memory-bound efficiency")]
    attention_kernel: Annotated[Literal["fa2", "fa3"], Field(
        description="flash-attention kernel family (fa3 falls back to fa2 before Hopper)")]
    pipeline_schedules: Annotated[tuple[Schedule, ...], Field(
        description="pipeline schedules the framework implements (empty: no pipeline parallel)")]
    pipeline_layout: Annotated[bool, Field(
        description="a stated first or last stage need not be a multiple of the virtual stages: "
                    "the framework builds any layer count per virtual stage from a layout "
                    "string (Megatron-Core's pipeline_model_parallel_layout)")] = False
    max_zero_under_pp: Annotated[int, Field(
        ge=0, le=3, description="highest ZeRO stage the framework runs together with "
                                "pipeline parallelism")] = 3
    zero_stages: Annotated[tuple[Literal[0, 1, 2, 3], ...], Field(
        min_length=1, description="ZeRO stages the framework implements; the search offers no "
                                  "other (a stage given explicitly stays a what-if)")] = (0, 1, 2, 3)
    hybrid_sharding: Annotated[bool, Field(
        description="ZeRO / FSDP shard groups smaller than DP × CP (HSDP: replicas of a "
                    "sharded group) are implemented")] = True
    shard_spans_cp: Annotated[bool, Field(
        description="a ZeRO / FSDP shard group holds whole CP groups (the FSDP mesh is "
                    "dp_shard × cp): a hybrid-shard group is a multiple of CP")] = False
    context_parallel: Annotated[bool, Field(
        description="ring context parallel (K/V chunks passed around the CP group) is "
                    "implemented")] = True
    expert_parallel: Annotated[bool, Field(description="experts sharded over an EP group")] = True
    expert_tensor_parallel: Annotated[bool, Field(
        description="experts sharded over an expert-TP group of their own (Megatron-Core's "
                    "expert_tensor_parallel_size: TP or 1 searched); false: routed experts take "
                    "TP's sharding without EP and are whole under EP (ETP 1)")] = True
    moe_zero3_needs_tp1: Annotated[bool, Field(
        description="a mixture of experts runs ZeRO-3 only without TP (DeepSpeed: through AutoEP "
                    "alone, which has no AutoTP)")] = False
    ep_ranks: Annotated[Literal["expert-grid", "shard-group-tp"], Field(
        description="the ranks EP groups are carved from: the expert grid over TP × CP × DP "
                    "(expert-grid-folds checks it), or the FSDP shard group × TP (replicas of "
                    "the group outside it; EP divides it)")] = "expert-grid"
    moe_needs_sequence_parallel: Annotated[bool, Field(
        description="a mixture of experts under TP runs only with sequence parallel (the "
                    "search offers no other; a layout given so fails "
                    "sequence-parallel-with-moe)")] = False
    ep_overlap: Annotated[tuple[EpOverlap, ...], Field(
        description="schedules under which the framework runs a forward chunk beside another "
                    "micro-batch's backward chunk, each hiding the other's EP all-to-all "
                    "(no-pp: without pipeline parallel); empty: none")] = ()
    ep_overlap_under_full_recompute: Annotated[bool, Field(
        description="that pairing also runs under full recompute")] = False
    ep_overlap_max_mtp_layers: Annotated[Optional[int], Field(
        ge=0, description="most MTP modules beside which that pairing runs (None: any)")] = None
    tp_comm_overlap: Annotated[bool, Field(
        description="under sequence parallel, the TP all-gathers and reduce-scatters run in "
                    "chunks beside the linear layers' GEMMs (Transformer Engine userbuffers, "
                    "Megatron-Core tp_comm_overlap); off: every TP collective is exposed as the "
                    "GPU profile's tp_exposed_fraction says")] = False
    tp_overlap_rs_splits: Annotated[float, Field(
        ge=0, description="chunks each overlapped TP reduce-scatter runs in (0: TP-size "
                          "chunks, as the all-gathers)")] = 0.0
    step_host_s: Annotated[float, Field(
        ge=0, description="host seconds per optimizer step the GPU waits out: the eager optimizer "
                          "step issued after its host sync and the loop's per-step work; the "
                          "step's optimizer term is the longer of it and the GPU's update "
                          "(0: not modelled)")] = 0.0
    ep_dispatcher: Annotated[Literal["alltoall", "deepep", "allgather"], Field(
        description="EP tokens sent once per routed expert (alltoall), once per rank and "
                    "remote domain with NVLink forwarding (deepep), or every rank's tokens "
                    "all-gathered over the EP group and reduce-scattered back (allgather, "
                    "Megatron-Core's default; step_time.EpRoute)")] = "alltoall"
    ep_fp8_dispatch: Annotated[bool, Field(
        description="under fp8, the dispatch and its backward twin move fp8 + 1/128 scales, "
                    "the combine 16-bit")] = False
    ep_load_imbalance: Annotated[float, Field(
        ge=1, description="routed tokens on the busiest expert-parallel rank over the mean "
                          "(1: balanced); its expert GEMMs, permutation, all-to-all and permuted "
                          "activations take that much more (dropless routing, EP > 1)")] = 1.0
    moe_capacity_factor: Annotated[float, Field(
        ge=0, description="rows each expert's buffer is padded to, over its mean share (tokens "
                          "beyond it dropped); 0: dropless, the busiest rank takes "
                          "ep_load_imbalance")] = 0.0

    @property
    def reduce_bytes(self) -> float:
        """Bytes per gradient element on the wire in the DP reduction."""
        return DTYPE_BYTES[self.reduce_dtype]

    @property
    def gather_bytes(self) -> float:
        """Bytes per parameter element in a sharded-DP all-gather."""
        return DTYPE_BYTES[self.param_gather_dtype]

    @property
    def has_selective(self) -> bool:
        """Whether the framework has a selective recompute mode (selective_recompute not
        "none"; DeepSpeed and the FSDP trainers checkpoint whole layers only)."""
        return self.selective_recompute != "none"

    def regathers_in_backward(self, pp: int) -> bool:
        """Whether a sharded (ZeRO-3/FSDP) unit is gathered again in backward at this PP."""
        if pp > 1 and self.regather_in_backward_under_pp is not None:
            return self.regather_in_backward_under_pp
        return self.regather_in_backward

    def overlaps_grad_reduce(self, zero: int) -> bool:
        """Whether the gradient reduction runs behind the backward at this ZeRO stage."""
        if zero >= 3 and self.overlap_grad_reduce_stage3 is not None:
            return self.overlap_grad_reduce_stage3
        return self.overlap_grad_reduce


@dataclass(frozen=True, kw_only=True)
class FrameworkProfile:
    """A framework's implementation as its profile states it, each value citing its source."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    name: Annotated[str, Field(min_length=1)]
    aliases: tuple[str, ...] = ()
    description: str = ""
    source: Annotated[str, Field(
        min_length=1, description="repository and commit the values were read at")]
    time: TimeBehaviour
    memory: MemoryBehaviour
    source_file: Optional[str] = None
    # Kind and source of each [time] constant in PROVENANCED the file sets, keyed "time.key".
    provenance: dict[str, Provenance] = field(default_factory=dict)
    # Named variants (with_variant, NAME:VARIANT): [memory] overrides of a release as a trainer ran it.
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)

    def shards_once_per_step_under_pp(self) -> bool:
        """Whether, under PP, a ZeRO-3 unit is all-gathered once per step (first forward) and
        reduce-scattered once (after the last backward): FSDP2-style states kept gathered under
        PP (regather_in_backward_under_pp false) and unsharded gradients accumulated to the last
        micro-batch (accumulate_unsharded_grads_under_pp) — torch.distributed.pipelining's
        stage.backward_maybe_with_nosync holds resharding and gradient sync until the last
        backward. The memory model keeps the stage gathered on the same two keys."""
        return (self.memory.state_layout == "fsdp2" and not self.time.regathers_in_backward(2)
                and self.memory.accumulate_unsharded_grads_under_pp)


def parse_framework(data: bytes, where: str, *, trusted: bool = False) -> FrameworkProfile:
    """A FrameworkProfile from TOML bytes; problems raise InputError(<where>, '<key>: …'). A
    bundled (`trusted`) profile is built as it is; a user's file is validated."""
    if len(data) > MAX_FRAMEWORK_BYTES:
        raise InputError(where, f"file is {len(data)} bytes; framework profiles must be at most "
                         f"{MAX_FRAMEWORK_BYTES // 1000} kB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(where, "not UTF-8 text; a framework profile is a UTF-8 TOML file") from None
    from planner.io.parse import parse_text  # the one bounded parser: depth, numbers

    raw = parse_text(text, "toml", where)
    provenance = _unwrap_time(raw, text, where)
    if trusted:   # taken as given; TOML's arrays are the record's tuples
        time: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                for k, v in raw["time"].items()}
        return FrameworkProfile(**{**raw, "aliases": tuple(raw.get("aliases", ())),
                                   "source_file": where, "time": TimeBehaviour(**time),
                                   "provenance": provenance,
                                   "memory": MemoryBehaviour(**raw["memory"])})
    from pydantic import ValidationError
    try:
        return validate(FrameworkProfile, {**raw, "source_file": where,
                                           "provenance": provenance})
    except ValidationError as e:
        raise InputError(where, validation_message(e)) from None


def _unwrap_time(raw: dict, text: str, where: str) -> dict[str, Provenance]:
    """Replace each [time] constant's `{value, kind, source}` table in `raw` by its value;
    return the kinds and sources keyed "time.key" (a plain number is refused at its line)."""
    time = raw.get("time")
    if not isinstance(time, dict):
        return {}   # the record's validation names the missing table

    def at(dotted: str) -> str:
        line = key_line(text, "time", dotted.split(".", 1)[1])
        return f"{where}:{line}" if line else where

    out: dict[str, Provenance] = {}
    for key in PROVENANCED:
        if key in time:
            time[key], out[f"time.{key}"] = unwrap(
                time[key], f"time.{key}", at, "a number >= 0",
                lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
    return out


_BUNDLED: Optional[tuple[FrameworkProfile, ...]] = None


def list_frameworks() -> list[FrameworkProfile]:
    """The bundled framework profiles (``framework_profiles/*.toml``), sorted by name."""
    global _BUNDLED
    if _BUNDLED is None:
        from planner.specs.hardware_toml import bundled_dir

        found = [parse_framework(e.read_bytes(), str(e), trusted=True)
                 for e in bundled_dir("framework_profiles").iterdir()
                 if e.name.endswith(".toml") and e.is_file()]
        _BUNDLED = tuple(sorted(found, key=lambda f: f.name))
    return list(_BUNDLED)


_BY_NAME: dict[str, FrameworkProfile] = {}


def _bundled_named(low: str) -> Optional[FrameworkProfile]:
    """The bundled profile whose file is `<low>.toml` and whose name is `low`, parsed alone (a
    run needs one profile, not all of them); None sends aliases and typos to the full list."""
    if low in _BY_NAME:
        return _BY_NAME[low]
    if _BUNDLED is not None or not low.replace("-", "").replace("_", "").isalnum():
        return None
    from planner.specs.hardware_toml import bundled_dir

    entry = bundled_dir("framework_profiles") / f"{low}.toml"
    if not os.path.isfile(entry):   # never raises (Path.is_file does on a name too long)
        return None
    prof = parse_framework(entry.read_bytes(), str(entry), trusted=True)
    if prof.name.lower() != low:
        return None
    _BY_NAME[low] = prof
    return prof


def _load_path(path: Path) -> FrameworkProfile:
    """A framework TOML read through the one bounded reader (planner.inputs)."""
    from planner.io.read import read_bytes, shown

    opened, data = read_bytes(path, what="framework profile .toml", option=named("framework"),
                              max_bytes=MAX_FRAMEWORK_BYTES)
    return parse_framework(data, f"{named('framework')}: {shown(opened)}")


def load_framework(name_or_path: Optional[str] = None) -> FrameworkProfile:
    """A bundled profile by name or alias (case-insensitive), or a TOML file by path.

    None gives the default (`DEFAULT_FRAMEWORK`). A value ending in .toml or naming an
    existing file is read as a path.
    """
    want = (name_or_path or DEFAULT_FRAMEWORK).strip()
    if want.lower().endswith(".toml") or os.path.isfile(want):  # never raises on a long name
        p = Path(want)
        if not os.path.exists(want):
            raise InputError(named("framework"), f"file not found: {want}; expected a framework "
                             "profile .toml or one of " + ", ".join(framework_names()))
        return _load_path(p)
    if ":" in want:   # NAME:VARIANT, a release as a trainer built on it ran (with_variant)
        base, _, variant = want.partition(":")
        return with_variant(load_framework(base), variant.strip())
    low = want.lower()
    bundled = _bundled_named(low)
    if bundled is not None:
        return bundled
    profiles = list_frameworks()
    for prof in profiles:
        if low == prof.name.lower() or low in (a.lower() for a in prof.aliases):
            return prof
    names = framework_names()
    import difflib   # only for "did you mean"
    near = difflib.get_close_matches(low, names, n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    raise InputError(named("framework"), f"unknown framework '{want}'; known: {', '.join(names)} "
                     f"or a path to a .toml{hint}")


def framework_names() -> list[str]:
    """Names of the bundled framework profiles."""
    return [f.name for f in list_frameworks()]


def variant_names(fw: FrameworkProfile) -> list[str]:
    """The variants a profile names, sorted."""
    return sorted(fw.variants)


def with_variant(fw: FrameworkProfile, name: str) -> FrameworkProfile:
    """`fw` with variant `name`'s [memory] values in place of its own; its name, time and so its
    calibration regime stay the profile's, its description and source say the variant (it names
    no variants itself). An unknown name or a bad value raises InputError."""
    table = fw.variants.get(name)
    if table is None:
        known = ", ".join(variant_names(fw)) or "none"
        raise InputError(named("framework"), f"{fw.name} has no variant '{name}'; known: {known}")
    overrides = table.get("memory", {})
    try:
        memory = validate(MemoryBehaviour, {**asdict(fw.memory), **overrides})
    except ValidationError as e:
        raise InputError(named("framework"), f"variant {name}: {validation_message(e)}") from None
    return replace(fw, memory=memory, variants={},
                   description=f"{fw.description}; variant {name}",
                   source=f"{fw.source}; {table.get('source', name)}")
