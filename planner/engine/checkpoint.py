"""Checkpoint interval arithmetic.

Waste model (first order, Young 1974): with interval τ, checkpoint cost δ and mean time between
failures M, the wasted fraction is δ/τ (writing) + τ/(2M) (work lost, half an interval per
failure on average) + R/M (restart cost R per failure). Young's optimum τ = √(2δM).
Daly, *A higher order estimate of the optimum checkpoint interval for restart dumps* (FGCS 22,
2006), Eq. 37: τ = √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else τ = M.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out


def overhead_fraction(interval: Num, cost: Num) -> Num:
    """Fraction of time spent writing checkpoints: δ/τ."""
    return out(np.asarray(cost, dtype=float) / interval)


def lost_work_fraction(interval: Num, mtbf: Num) -> Num:
    """Fraction of time redone after failures: τ/(2M)."""
    return out(np.asarray(interval, dtype=float) / (2.0 * np.asarray(mtbf, dtype=float)))


def restart_fraction(restart: Num, mtbf: Num) -> Num:
    """Fraction of time spent restarting (detect, reschedule, reload, warm up): R/M."""
    return out(np.asarray(restart, dtype=float) / mtbf)


def waste_fraction(interval: Num, cost: Num, mtbf: Num, restart: Num = 0.0) -> Num:
    """δ/τ + τ/(2M) + R/M. Seed: δ = 3 min, M = 50 h, τ = 240 min → 1.25% + 4.0% = 5.25%."""
    return out(overhead_fraction(interval, cost) + lost_work_fraction(interval, mtbf)
               + restart_fraction(restart, mtbf))


def young_interval(cost: Num, mtbf: Num) -> Num:
    """Young's first-order optimum √(2δM). Seed: √(2·3·3000) = 134.2 min."""
    return out(np.sqrt(2.0 * np.asarray(cost, dtype=float) * mtbf))


def daly_interval(cost: Num, mtbf: Num) -> Num:
    """Daly's higher-order optimum (Eq. 37). Daly's examples (δ = 5 min): M = 24 h → 116.7 min,
    6 h → 56.7 min, 15 min → 9.14 min."""
    d = np.asarray(cost, dtype=float)
    m = np.asarray(mtbf, dtype=float)
    x = d / (2.0 * m)
    tau = np.sqrt(2.0 * d * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - d
    return out(np.where(d < 2.0 * m, tau, m))
