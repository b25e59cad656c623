"""The calibration report's records: one row per published figure, regimes, the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

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
