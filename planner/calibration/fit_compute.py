"""Closed loop, part 2: one compute-speed factor from a measured step of a known job.

A step time (or tokens/s) of a run whose model and layout are known pins down how fast the
GPUs actually compute, but not which kernel family is slow: the factor k multiplies the
profile's kernel-speed shares together (GEMM, attention, grouped GEMM, fp8; each capped at 1),
found by bisection on the planner's own step-time estimate. Link constants come from
nccl-tests, not from here; overlap is not separable from compute speed with step times alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import STAGES, evaluate
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec
from planner.calibration.fit_links import ConstantFit
from planner.evidence.model import Evidence

FACTOR_RANGE = (0.05, 20.0)
BISECTION_STEPS = 40  # halves the log-interval 40 times: far below any measurement's spread


@dataclass
class RunSpec:
    """The job a measured run executed: model, GPUs, sequence length, global batch, layout."""

    model: ModelSpec
    gpus: int
    seq_len: int
    global_batch: int
    layout: Layout
    framework: Any = None  # a FrameworkProfile; None: the selected/default one


def predict(run: RunSpec, hw: HardwareProfile) -> dict[str, float]:
    """The planner's estimate for the run, flat: `t.<term>` and `step_time` (s),
    `mem.<stage>.<item>` and `peak_stage`, and the throughput fields (its memory verdict is
    ignored: the run did run)."""
    p = Problem(model=run.model, hardware=hw, gpus=run.gpus, seq_len=run.seq_len,
                global_batch=run.global_batch, precision=run.layout.precision,
                optimizer=run.layout.optimizer, framework=run.framework)
    ev = evaluate(p, Candidates.from_layouts([run.layout]))
    first = lambda a: float(np.asarray(a).ravel()[0])  # noqa: E731  (one candidate)
    out = {f"t.{f.name}": first(getattr(ev.time, f.name)) for f in fields(type(ev.time))}
    out["step_time"] = out.pop("t.step")
    out.update({f.name: first(getattr(ev.throughput, f.name)) for f in fields(type(ev.throughput))})
    for stage in STAGES:
        sm = getattr(ev.memory, stage)
        out.update({f"mem.{stage}.{f.name}": first(getattr(sm, f.name)) for f in fields(type(sm))})
    out["peak_stage"] = first(ev.memory.peak_stage)
    return out


# The profile's kernel-speed shares (specs/efficiency.py): what "how fast the GPUs compute"
# means to the time model. Unset ones (None: that kernel family uses another) stay unset.
SPEED_KEYS = ("sustained_matmul_fraction", "flash_attention_fraction", "fa3_attention_fraction",
              "grouped_gemm_fraction", "fp8_matmul_ceiling_fraction")


def with_compute_factor(hw: HardwareProfile, k: float) -> HardwareProfile:
    """The profile with every kernel-speed share multiplied by k (each capped at 1)."""
    e = hw.efficiency
    update = {key: min(1.0, getattr(e, key) * k) for key in SPEED_KEYS
              if getattr(e, key, None) is not None}
    return replace(hw, efficiency=replace(e, **update))


def measured_rate(e: Evidence, run: RunSpec) -> tuple[str, float] | None:
    """("tokens_per_s_per_gpu", value) from tokens/s or from step time x tokens per step."""
    st = e.steps
    if st is None:
        return None
    if st.tokens_per_s_per_gpu is not None:
        return "tokens_per_s_per_gpu", st.tokens_per_s_per_gpu.median
    if st.step_time_s is not None:
        tokens = run.global_batch * run.seq_len
        return "tokens_per_s_per_gpu", tokens / st.step_time_s.median / run.gpus
    return None


def _compute_s(est: dict[str, float]) -> float:
    return est["t.compute"] + est["t.recompute"] + est["t.optimizer"]


def fit_compute(e: Evidence, run: RunSpec, hw: HardwareProfile) -> ConstantFit | None:
    """The factor k with the estimate = the measurement, and the error before and after. A
    trace gives the compute time itself (GEMM + attention + other kernels, not hidden by
    anything), so its fit ignores communication; a log gives tokens/s of the whole step."""
    if e.trace is not None:
        ms = e.trace.exclusive_ms
        target = sum(ms.get(k, 0.0) for k in ("gemm", "attention", "other_compute")) / 1e3
        if target <= 0:
            return None
        # compute time falls as k rises: bisect on its inverse so the search below is shared
        rate = lambda k: 1.0 / _compute_s(predict(run, with_compute_factor(hw, k)))  # noqa: E731
        what, target = "compute time", 1.0 / target
    elif (m := measured_rate(e, run)) is not None:
        rate = lambda k: predict(run, with_compute_factor(hw, k))["tokens_per_s_per_gpu"]  # noqa: E731
        what, target = "tokens/s/GPU", m[1]
    else:
        return None
    before = rate(1.0)
    lo, hi = math.log(FACTOR_RANGE[0]), math.log(FACTOR_RANGE[1])
    for _ in range(BISECTION_STEPS):  # tokens/s rises with k until the caps bind
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rate(math.exp(mid)) < target else (lo, mid)
    k = math.exp(0.5 * (lo + hi))
    after = rate(k)
    shown = (lambda x: f"{1e3 / x:,.1f} ms") if what == "compute time" else (  # noqa: E731
        lambda x: f"{x:,.0f}")
    note = (f"{what} {shown(target)} measured vs {shown(before)} estimated; kernel "
            "speed shares scaled together")
    reached = abs(after / target - 1.0) <= 0.01
    if not reached:  # efficiencies capped at 1, or other terms dominate: nothing to set
        note += "; not fitted: no factor within the caps reaches the measurement"
    # error relative to the measured quantity (a time for traces, a rate for logs)
    err = (lambda x: abs(target / x - 1) * 100) if what == "compute time" else (  # noqa: E731
        lambda x: abs(x / target - 1) * 100)
    return ConstantFit("efficiency.compute_factor", 1.0, k if reached else None, err(before),
                       err(after), Path(e.path).name, note)


def calibrated_efficiency(hw: HardwareProfile, k: float) -> dict[str, float]:
    """The efficiency keys a factor k writes into a profile."""
    e = with_compute_factor(hw, k).efficiency
    return {f"efficiency.{key}": getattr(e, key) for key in SPEED_KEYS
            if getattr(e, key, None) is not None}
