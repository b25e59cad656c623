"""Which candidate rows of a batch fit in memory, and the exact Pareto front (step time × peak
× GPUs) of those that do, with the five-phase memory model and the full time model run only
where sound bounds leave the answer open (planner.search's per-batch step).

The bounds: MemoryParts.floor never exceeds a row's exact peak, MemoryParts.ceiling never falls
below it, timing.step_floor never exceeds its step time. A row within the ceiling surely fits.
A row that some surely fitting row beats on time (exact, from its states alone) with a ceiling
no higher than the row's floor is beaten on the exact figures too, and is off the front
(engine.pareto.surely_dominated): neither its exact step nor its exact peak is computed. What
is returned is what evaluating every row exactly returns, bit for bit
(tests/test_search_speed.py)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .candidates import Candidates, Problem, shape
from .engine.pareto import pareto_front, surely_dominated
from .evaluate import Memory, usable_bytes
from .memory_parts import MemoryParts
from .timing import step_floor, step_seconds


def settle(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
           floor: np.ndarray, dominated: bool,
           need: Callable[[np.ndarray], np.ndarray] | None = None, step_floors: bool = False
           ) -> tuple[np.ndarray, Memory, np.ndarray, np.ndarray]:
    """Which of the rows cand (`rows`, their `floor`) fit, and the exact front of those that do
    (every one that fits with `dominated`), running the five-phase model (MemoryParts.rows)
    only where the bounds leave it open: within the ceiling (MemoryParts.ceiling, never below
    the exact peak) a row surely fits; a row that a surely fitting row beats on time with a
    ceiling no higher than its floor (engine.pareto.surely_dominated) is off the front (_timed,
    `step_floors` as it takes them). `need(sure)` marks more rows to evaluate. Returns (the
    positions in cand evaluated, their memory, which rows fit, the positions kept)."""
    ceiling = parts.ceiling(p, cand)
    sure = ceiling <= usable_bytes(p)
    want = ~sure if need is None else ~sure | need(sure)
    if not dominated:
        step, pruned = _timed(p, parts, cand, rows, ceiling, floor, sure, step_floors)
        want |= ~pruned
    ex = np.flatnonzero(want)
    mem = parts.rows(p, cand[ex], rows.take(ex))[2]
    fit = sure.copy()
    fit[ex] = mem.peak <= mem.usable
    if dominated:
        return ex, mem, fit, np.flatnonzero(fit)
    idx = np.flatnonzero(fit & ~pruned)  # the rows that fit, less those surely beaten
    obj = np.stack([step[idx], mem.peak[np.searchsorted(ex, idx)],
                    np.full(len(idx), float(p.gpus))], axis=1)
    return ex, mem, fit, idx[pareto_front(obj)]


def _timed(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
           ceiling: np.ndarray, floor: np.ndarray, sure: np.ndarray, step_floors: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    """(step time, surely off the front) of the rows cand (`rows`), the step exact where a row
    is not off (NaN elsewhere). Without `step_floors` every row is timed exactly (from its
    states alone, MemoryParts.states_memory) and the anchors are the surely fitting rows on the
    front of step × ceiling. With them every row gets a floor on its step (timing.step_floor:
    the compute and the per-micro-batch axes, no memory read), the anchors on the front of that
    floor × ceiling are timed exactly, and then the rows they do not put off: cheaper where
    the floor is close to the step (the solved partial-recompute rows, whose recomputation is
    in it), dearer where ZeRO / DP traffic is a large share. A row is off when an anchor beats
    its step (floor) with a ceiling no higher than the row's memory floor."""
    x = shape(p, rows)
    per_mode = parts.acts.rows(cand, pick=lambda t: t["per_mode"])
    if not step_floors:
        step = step_seconds(p, rows, x, parts.states_memory(cand), per_mode, parts.groups(cand))
        anchors = np.flatnonzero(sure)
        anchors = anchors[pareto_front(np.stack([step[anchors], ceiling[anchors]], axis=1))]
        return step, surely_dominated(step[anchors], ceiling[anchors], step, floor)
    least = step_floor(p, rows, x, per_mode, parts.groups(cand))
    anchors = np.flatnonzero(sure)
    anchors = anchors[pareto_front(np.stack([least[anchors], ceiling[anchors]], axis=1))]
    step = np.full(len(cand), np.nan)
    step[anchors] = _exact_step(p, parts, cand, rows, per_mode, anchors)
    off = surely_dominated(step[anchors], ceiling[anchors], least, floor)
    rest = np.flatnonzero(~off & np.isnan(step))
    step[rest] = _exact_step(p, parts, cand, rows, per_mode, rest)
    return step, off


def _exact_step(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
                per_mode: dict, idx: np.ndarray) -> np.ndarray:
    """timing.step_seconds of the rows idx of cand, from their states alone."""
    sub = rows.take(idx)
    return step_seconds(p, sub, shape(p, sub), parts.states_memory(cand[idx]),
                        {m: v.take(idx) for m, v in per_mode.items()}, parts.groups(cand[idx]))
