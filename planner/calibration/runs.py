"""Public end-to-end runs dtplan can express (``planner/data/calibration_runs.json``): the schema,
the loader, and each run as the Problem and Layout dtplan evaluates.

One row is one published run: its source (repository, commit, files), model shape, GPUs and
hardware profile, layout, precision, what trains (every weight, or a LoRA recipe on a frozen
base: `tuning`, as the MLPerf llama2_70b_lora runs state it) and the measured step time (s per
global batch). A *family* is one source × framework × GPU generation
("mlperf-nvidia/megatron/H100"): the unit that `dtplan calibrate` leaves out when it
cross-validates (planner/calibration/lofo.py). Runs the engine cannot express (an NVFP4 recipe, a GPU without a profile) are kept in the file under
``not_expressible`` with the reason, so the set's coverage is stated rather than implied. The
``validation`` rows share the schema: published runs of today's model families, predicted and
reported (planner/calibration/model_runs.py) but in no refit and no band.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
import json
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, Union

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import Evaluation, evaluate
from planner.specs.finetune import FULL, Tuning, parse_targets
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Fp8Recipe, Layout, Recompute, Schedule
from planner.specs.model import ModelSpec
from planner.specs.presets import get_preset
from planner.specs.records import FORBID, validate

RUNS_FILE = "calibration_runs.json"


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a run's figure and layout were read: a repository at a commit and its files."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    repo: str
    commit: str
    result_dir: Optional[str] = None
    config: Optional[str] = None
    system_json: Optional[str] = None
    path: Optional[str] = None
    section: Optional[str] = None

    def cite(self) -> str:
        """'repo@commit12 file' for a printout."""
        where = self.result_dir or self.path or ""
        return f"{self.repo}@{self.commit[:12]} {where}".strip()


@dataclass(frozen=True, kw_only=True)
class ModelRef:
    """A bundled preset (optionally with another vocabulary) or a full shape (ModelSpec fields)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    preset: Optional[str] = None
    vocab: Optional[int] = None
    shape: Optional[dict[str, Any]] = None


@dataclass(frozen=True, kw_only=True)
class RunLayout:
    """The published layout in dtplan's knobs (zero 1 = Megatron's distributed optimizer)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    tp: int
    pp: int
    dp: int
    cp: int
    zero: int
    micro_batch: int
    chunks: int
    schedule: Schedule
    sp: bool
    recompute: Recompute
    recompute_layers: Optional[int] = None   # full recompute on this many layers (None: all)
    ep: int = 1                              # expert parallel, folded over TP x CP x DP
    shard_group: Optional[int] = None        # hybrid sharding: ZeRO over this many DP ranks
    etp: Optional[int] = None                # expert tensor parallel (None: TP, Megatron's default)
    first_stage_layers: Optional[int] = None  # uneven pipeline stages (None: the even split)
    last_stage_layers: Optional[int] = None
    fp8: Fp8Recipe = "none"                  # the fp8 recipe ("none" with fp8: tensorwise)


@dataclass(frozen=True, kw_only=True)
class RunTuning:
    """A fine-tuning run's recipe: LoRA adapters (rank, alpha, target linears as
    specs.finetune names them, dropout on their input) on a frozen 16-bit base. A run without
    one trains every weight."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    mode: Literal["lora"]
    rank: int
    alpha: int
    targets: str
    dropout: bool

    def __post_init__(self) -> None:
        parse_targets(self.targets, "tuning.targets")   # an unknown target raises here
        if self.rank < 1 or self.alpha < 1:
            raise ValueError(f"LoRA rank and alpha are >= 1 (got {self.rank}, {self.alpha})")


@dataclass(frozen=True, kw_only=True)
class Measured:
    """The published figure as measured (metric and value) and the step time it gives."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    metric: str
    value: float
    definition: str
    step_time_s: Optional[float] = None
    unit: Optional[str] = None
    tokens: Optional[float] = None       # a whole-run figure's token count (GPU-hours rows)


@dataclass(frozen=True, kw_only=True)
class PublicRun:
    """One published run with everything dtplan needs to predict it."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    id: str
    family: str               # source/framework/generation
    source: Source
    model: ModelRef
    hardware: str             # bundled hardware profile
    gpus: int
    seq_len: int
    global_batch: int
    layout: RunLayout
    precision: Literal["mixed", "fp8", "bf16-pure"]
    precision_published: str
    recompute_published: str
    measured: Measured
    assumed: dict[str, str] = field(default_factory=dict)
    # what the run's own configuration sets that its framework profile does not by default:
    # profile fields ("time.reduce_dtype", "memory.fp8_params", ...) and the values it states
    settings: dict[str, Union[bool, float, str]] = field(default_factory=dict)
    tuning: Optional[RunTuning] = None    # None: full training
    model_type: Optional[str] = None      # the config's model_type (the validation rows)
    not_modelled: tuple[str, ...] = ()    # what the run does that dtplan does not price

    @property
    def framework(self) -> str:
        return self.family.split("/")[1]


@dataclass(frozen=True, kw_only=True)
class NotExpressible:
    """A collected run dtplan cannot express, and why."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    id: str
    family: str
    source: Source
    reason: str


@dataclass(frozen=True, kw_only=True)
class FrameworkUse:
    """How a family's framework is run: a bundled profile, optionally another kernel class."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    profile: str
    why: str
    kernel_class: Optional[Literal["fused", "compiled", "eager"]] = None


@dataclass(frozen=True, kw_only=True)
class RunSet:
    """The whole file."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    description: str
    sources: dict[str, str]
    frameworks: dict[str, FrameworkUse]
    not_collected: str
    runs: tuple[PublicRun, ...]
    memory_rows: tuple[PublicRun, ...]
    not_expressible: tuple[NotExpressible, ...]
    # one published run per model family (issue #27): evaluated with the shipped profiles and
    # reported as they are, in no refit and no band (a band is per framework x GPU generation,
    # and these runs would narrow the dense runs' bands while missing by more)
    validation: tuple[PublicRun, ...] = ()


@lru_cache(maxsize=1)
def load_runs() -> RunSet:
    """The shipped run set, validated (read beside the package's modules, as the other
    calibration sets are)."""
    text = (Path(__file__).parents[1] / "data" / RUNS_FILE).read_text(encoding="utf-8")
    return validate(RunSet, json.loads(text))


def run_model(run: PublicRun) -> ModelSpec:
    """The run's model: its preset (with the run's vocabulary where it differs) or its shape."""
    m = run.model
    if m.preset is not None:
        spec = get_preset(m.preset)
        return spec if m.vocab in (None, spec.vocab) else replace(spec, vocab=m.vocab)
    assert m.shape is not None, run.id
    return ModelSpec.with_defaults(**m.shape, source=run.source.cite())


def run_framework(run: PublicRun) -> FrameworkProfile:
    """The framework profile the run's family is evaluated under (the file's `frameworks`),
    with what the run's own config sets (its `settings`) in place of the profile's defaults."""
    use = load_runs().frameworks[run.framework]
    fw = load_framework(use.profile)
    if use.kernel_class is not None:
        fw = replace(fw, time=replace(fw.time, kernel_class=use.kernel_class))
    return with_settings(fw, run.settings) if run.settings else fw


def with_settings(fw: FrameworkProfile, settings: dict[str, Union[bool, float, str]]
                  ) -> FrameworkProfile:
    """The profile with a run's stated settings ("section.field": value) in place of its own;
    an unknown section or field raises (the run set's test loads every run)."""
    parts: dict[str, dict[str, Union[bool, float, str]]] = {"time": {}, "memory": {}}
    for key, value in settings.items():
        section, _, name = key.partition(".")
        parts[section][name] = value
    return replace(fw, time=replace(fw.time, **parts["time"]),  # type: ignore[arg-type]
                   memory=replace(fw.memory, **parts["memory"]))  # type: ignore[arg-type]


def run_layout(run: PublicRun) -> Layout:
    """The published layout as dtplan's knobs, with the run's LoRA recipe where it has one."""
    lo = run.layout
    layout = Layout(tp=lo.tp, pp=lo.pp, dp=lo.dp, cp=lo.cp, zero=lo.zero,
                    micro_batch=lo.micro_batch, chunks=lo.chunks, schedule=lo.schedule, sp=lo.sp,
                    recompute=lo.recompute, recompute_layers=lo.recompute_layers,
                    ep=lo.ep, etp=lo.etp, shard_group=lo.shard_group,
                    first_stage_layers=lo.first_stage_layers,
                    last_stage_layers=lo.last_stage_layers, fp8=lo.fp8,
                    precision=run.precision, optimizer="adamw")
    t = run.tuning
    if t is None:
        return layout
    return replace(layout, finetune=t.mode, lora_rank=t.rank, lora_alpha=t.alpha,
                   lora_targets=t.targets, lora_dropout=t.dropout)


def run_tuning(run: PublicRun) -> Tuning:
    """What the run trains: its LoRA recipe (specs.finetune.Tuning of its layout), else full."""
    return FULL if run.tuning is None else Tuning.of(run_layout(run))


def run_problem(run: PublicRun, hw: Optional[HardwareProfile] = None) -> Problem:
    """The run as a Problem on its own hardware profile (or `hw`, a variant of it). Every run
    used fused (flash / cuDNN) attention: Transformer Engine's or flash-attention's."""
    return Problem(model=run_model(run), hardware=hw or load_profile(run.hardware),
                   gpus=run.gpus, seq_len=run.seq_len, global_batch=run.global_batch,
                   precision=run.precision, optimizer="adamw", framework=run_framework(run),
                   flash_attention=True, tuning=run_tuning(run))


def evaluate_run(run: PublicRun, hw: Optional[HardwareProfile] = None) -> Evaluation:
    """dtplan's evaluation of the run's published layout (one candidate)."""
    return evaluate(run_problem(run, hw), Candidates.from_layouts([run_layout(run)]))
