"""The calibration report's records: one row per published figure, regimes, the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

Metric = Literal["iteration_time_s", "hardware_tflops_per_gpu", "tokens_per_s_per_gpu",
                 "peak_memory_gib"]


@dataclass(frozen=True, kw_only=True)
class CalibrationRow:
    """One published figure against dtplan's prediction."""

    case: str                 # row id: case id plus the column (e.g. "/full-recompute")
    source: str
    metric: Metric
    published: float
    predicted: float
    error_pct: float          # (predicted − published) / published × 100
    layout: str               # the layout evaluated (auto-chosen for Narayanan rows)
    step_time_s: float
    mfu: float
    hfu: float
    fits: bool
    regime: str = ""          # framework/GPU generation/layout family
    hardware: str = ""


@dataclass(frozen=True, kw_only=True)
class RegimeStat:
    """Residuals of one regime (framework × GPU generation × layout family)."""

    rows: int
    median_abs_error_pct: float
    worst_abs_error_pct: float
    band_pct: float           # RMS of the errors, rounded up to 0.5 %


@dataclass(frozen=True, kw_only=True)
class CalibrationReport:
    hardware: str
    rows: list[CalibrationRow]
    median_abs_error_pct: float
    worst_abs_error_pct: float
    worst_case: str
    within_tolerance: int     # rows within their family's bar (Megatron ±10 %, FSDP ±15 %)
    tolerance_pct: float
    fsdp_tolerance_pct: float
    constants: dict[str, float]
    skipped: dict[str, str]   # throughput cases not evaluated, with the reason
    notes: list[str]
    # throughput rows only; the schema states the default ({}), as a literal default would
    regimes: Annotated[dict[str, RegimeStat], Field(json_schema_extra={"default": {}})] = \
        field(default_factory=dict)
    # modern max-reserved rows (the memory model, #13)
    memory_rows: Annotated[list[CalibrationRow], Field(json_schema_extra={"default": []})] = \
        field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ConstantUse:
    """A constant a family's predictions used: its value, where it comes from, of what kind."""

    key: str
    value: float
    source: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class RunResidual:
    """One run predicted with the constants refitted without its family."""

    run: str
    hardware: str
    measured_step_s: float
    predicted_step_s: float
    error_pct: float          # (predicted − measured) / measured × 100, step time


@dataclass(frozen=True, kw_only=True)
class FamilyResidual:
    """Leave-one-family-out residuals of one family (source × framework × GPU generation)."""

    family: str
    source: str
    runs: int
    median_abs_error_pct: float
    worst_abs_error_pct: float
    worst_run: str
    rms_error_pct: float
    constants: list[ConstantUse]
    residuals: list[RunResidual]


@dataclass(frozen=True, kw_only=True)
class RegimeBand:
    """The band a regime (framework / GPU generation) prints, and what it rests on."""

    regime: str
    band_pct: float
    families: list[str]
    rms_error_pct: float      # RMS over its families of each family's RMS residual
    basis: str


@dataclass(frozen=True, kw_only=True)
class MemoryResidual:
    """A measured peak against dtplan's peak of the same stage and statistic."""

    run: str
    hardware: str
    measured_gib: float
    predicted_gib: float
    error_pct: float
    statistic: str


@dataclass(frozen=True, kw_only=True)
class CrossValidation:
    """`dtplan calibrate`'s leave-one-family-out report over every public run dtplan expresses."""

    runs: int
    families: list[FamilyResidual]
    generations: list[str]
    median_abs_error_pct: float
    worst_abs_error_pct: float
    worst_run: str
    target_median_pct: float
    target_worst_pct: float
    refit: str                # the constant refitted per fold, and how
    fitted_all: dict[str, float]   # profile -> its value fitted on every family
    bands: list[RegimeBand]
    memory: list[MemoryResidual]
    memory_target_pct: float  # issue #30: every measured peak within ±10 %
    memory_within: int        # memory rows within it
    not_expressible: dict[str, str]
    notes: list[str]


@dataclass(frozen=True, kw_only=True)
class ModelTypeRun:
    """A family's published run against dtplan's prediction of its layout."""

    model_type: str
    run: str
    source: str
    hardware: str
    gpus: int
    layout: dict[str, Any]   # the run's RunLayout fields
    measured_step_s: float
    predicted_step_s: float
    error_pct: float          # (predicted − measured) / measured × 100
    mfu: float                # dtplan's MFU of the layout
    fits: bool                # dtplan's memory verdict on the published layout
    measured_as: str          # the published figure and how the step was read from it
    not_modelled: list[str]
