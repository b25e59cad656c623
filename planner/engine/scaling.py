"""Scaling efficiency. Strong scaling (fixed total work): speedup T1/Tn, efficiency T1/(n·Tn).
Weak scaling (fixed work per GPU): efficiency T1/Tn. Seed: 800 ms → 140 ms on 8 GPUs gives
5.71× and 71.4 %."""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out


def strong_speedup(baseline_time: Num, measured_time: Num) -> Num:
    """T1 / Tn."""
    return out(np.asarray(baseline_time, dtype=float) / measured_time)


def strong_efficiency(baseline_time: Num, measured_time: Num, n: Num) -> Num:
    """T1 / (n · Tn)."""
    return out(np.asarray(baseline_time, dtype=float) / (np.asarray(n) * measured_time))


def ideal_time(baseline_time: Num, n: Num) -> Num:
    """T1 / n: the time with perfect strong scaling."""
    return out(np.asarray(baseline_time, dtype=float) / n)


def weak_efficiency(baseline_time: Num, measured_time: Num) -> Num:
    """T1 / Tn at fixed per-GPU work."""
    return out(np.asarray(baseline_time, dtype=float) / measured_time)
