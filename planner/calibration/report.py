"""The calibration report's models: one row per published figure, regimes, the summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Metric = Literal["iteration_time_s", "hardware_tflops_per_gpu", "tokens_per_s_per_gpu",
                 "peak_memory_gib"]


class CalibrationRow(BaseModel):
    """One published figure against dtplan's prediction."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a `fit` run never validates one
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


class RegimeStat(BaseModel):
    """Residuals of one regime (framework × GPU generation × layout family)."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a `fit` run never validates one
    rows: int
    median_abs_error_pct: float
    worst_abs_error_pct: float
    band_pct: float           # RMS of the errors, rounded up to 0.5 %


class CalibrationReport(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: a `fit` run never validates one
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
    regimes: dict[str, RegimeStat] = {}   # throughput rows only
    memory_rows: list[CalibrationRow] = []   # modern max-reserved rows (the memory model, #13)


