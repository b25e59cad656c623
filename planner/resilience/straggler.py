"""A straggler: one slow GPU paces every synchronous step; keep it, or evict its node and run
on the rest (formulas in ``engine/resilience.py``). Part of the resilience plan
(planner.resilience.planning.plan_resilience)."""

from dataclasses import dataclass
from typing import Optional

from planner.io import validate as v
from planner.engine import resilience as res_eq
from planner.errors import InputError, named


@dataclass(frozen=True, kw_only=True)
class Straggler:
    slowdown: float
    gpus: int
    gpus_lost_on_eviction: int
    throughput_fraction_with_straggler: float   # 1/s
    throughput_fraction_after_eviction: float   # (N − lost)/N, linear scaling assumed
    break_even_slowdown: float                  # evict when s exceeds N/(N − lost)
    evict: bool
    run_s: Optional[float] = None               # nominal run (with failures)
    run_with_straggler_s: Optional[float] = None
    run_after_eviction_s: Optional[float] = None  # includes one restart to evict
    gpu_hours_with_straggler: Optional[float] = None
    gpu_hours_after_eviction: Optional[float] = None


def straggler(slowdown: float, gpus: int, *, gpus_per_node: int = 8, replica_gpus: int = 1,
              run_s: Optional[float] = None, restart_s: float = 0.0) -> Straggler:
    """One GPU at ×`slowdown` paces every synchronous step: the run takes ×slowdown. Evicting its
    node (no spare) removes the DP replicas sharing it; throughput then scales as (N − lost)/N,
    assuming linear scaling in DP, and eviction costs one restart."""
    s = v.positive("slowdown", slowdown)
    if s < 1:
        raise InputError(named("slowdown"), f"is a slowdown factor ≥ 1 (1.2 = 20% slower), "
                                            f"got {s:g}")
    n = v.positive_int("gpus", gpus)
    lost = int(res_eq.gpus_lost_to_eviction(gpus_per_node, replica_gpus))
    if lost >= n:
        raise InputError(named("slowdown"), f"evicting a node would idle all {n} GPUs "
                                        f"({lost} GPUs per eviction); nothing left to compare")
    keep = float(res_eq.evicted_throughput_fraction(n, lost))
    slow_t = evict_t = hours_slow = hours_evict = None
    evict = 1.0 / s < keep
    if run_s is not None:
        slow_t = float(res_eq.straggler_step_time(run_s, s))
        evict_t = run_s / keep + restart_s
        evict = evict_t < slow_t
        if run_s:
            hours_slow = float(res_eq.gpu_hours(slow_t, n))
            hours_evict = float(res_eq.gpu_hours(evict_t, n - lost))
    return Straggler(slowdown=s, gpus=n, gpus_lost_on_eviction=lost,
                     throughput_fraction_with_straggler=1.0 / s,
                     throughput_fraction_after_eviction=keep,
                     break_even_slowdown=float(res_eq.break_even_slowdown(n, lost)), evict=evict,
                     run_s=run_s, run_with_straggler_s=slow_t, run_after_eviction_s=evict_t,
                     gpu_hours_with_straggler=hours_slow, gpu_hours_after_eviction=hours_evict)
