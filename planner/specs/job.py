"""A job with every reference resolved (model, hardware, layout, batch, thresholds, checkpoint),
whichever input it came from — command-line flags, a plan file or an engine config — built by
the one resolver (``planner.resolve.job``); and the command-line facts and overrides `check`
applies to a file (``CheckOptions``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: a flag-built job never loads the plan schema or verdicts
    from planner.specs.verdict import GateRule
    from planner.specs.budget import MemoryBudget
    from planner.specs.framework import FrameworkProfile
    from planner.specs.hardware import HardwareProfile
    from planner.specs.knobs import Layout
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Thresholds


def _default_budget() -> "MemoryBudget":
    """Every reserve at its named default (a job built without a ``budget:``)."""
    from planner.specs.budget import MemoryBudget
    return MemoryBudget()


def _no_thresholds() -> "Thresholds":
    """The plan schema's default thresholds, imported when a job is built without them."""
    from planner.specs.plan import Thresholds
    return Thresholds()


@dataclass
class Job:
    """A job with every reference resolved: what ``estimate`` needs plus the gate's extras."""

    model: ModelSpec
    hardware: HardwareProfile
    gpus: int
    layout: Layout
    seq_len: int
    global_batch: int
    accumulation: Optional[int] = None
    budget: MemoryBudget = field(default_factory=_default_budget)  # validated where resolved
    thresholds: Thresholds = field(default_factory=_no_thresholds)
    checkpoint: Any = None
    keys: dict[str, str] = field(default_factory=dict)      # rule name → key path
    rules: list[GateRule] = field(default_factory=list)     # rules found while resolving
    notes: list[str] = field(default_factory=list)
    # The framework whose implementation the estimates follow (a plan's `framework:` key, an
    # engine config's kind, --framework); None: the default. Part of the job, never global:
    # `check A B` judges each file by its own.
    framework: Optional[FrameworkProfile] = None



@dataclass
class CheckOptions:
    """Command-line facts an engine config cannot state (and engine selection), and the
    overrides of a file's own batch / recompute / precision keys (the flag wins)."""

    engine: str | None = None          # deepspeed | megatron | torchtitan | plan | None (detect)
    gpus: int | None = None
    hardware: str | None = None
    model: str | None = None
    params: float | None = None        # --params N: the inferred dense shape fit and export plan
    seq_len: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    strict: bool = False
    micro_batch: int | None = None     # --micro-batch
    global_batch: int | None = None    # --global-batch (sequences per optimizer step)
    recompute: str | None = None       # --recompute none | selective | full
    precision: str | None = None       # --precision
