"""Which candidate rows of a batch fit in memory, and the exact Pareto front (step time × peak
× GPUs) of those that do, with the five-phase memory model run only where two sound bounds on
the peak leave the answer open (planner.search's per-batch step).

The bounds: MemoryParts.floor never exceeds a row's exact peak, MemoryParts.ceiling never falls
below it. A row within the ceiling surely fits. The time model reads only a row's states, so
every row that may fit is timed exactly; a row that some surely fitting row beats on time with
a ceiling no higher than the row's floor is beaten on the exact figures too, and is off the
front (engine.pareto.surely_dominated). What is returned is what evaluating every row exactly
returns, bit for bit (tests/test_search_speed.py).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .candidates import Candidates, Problem, shape
from .engine.pareto import pareto_front, surely_dominated
from .evaluate import Memory, usable_bytes
from .memory_parts import MemoryParts
from .timing import step_seconds


def settle(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
            floor: np.ndarray, dominated: bool,
            need: Callable[[np.ndarray], np.ndarray] | None = None
            ) -> tuple[np.ndarray, Memory, np.ndarray, np.ndarray]:
    """Which of the rows cand (`rows`, their `floor`) fit, and the exact front of those that do
    (every one that fits with `dominated`), running the five-phase model (MemoryParts.rows)
    only where the bounds leave it open: within the ceiling (MemoryParts.ceiling, never below
    the exact peak) a row surely fits; every row is timed (the time model reads only its
    states) and one that a surely fitting row beats on time with a ceiling no higher than its
    floor (engine.pareto.surely_dominated) is off the front. `need(sure)` marks more rows to
    evaluate. Returns (the positions in cand evaluated, their memory, which rows fit, the
    positions kept)."""
    ceiling = parts.ceiling(p, cand)
    sure = ceiling <= usable_bytes(p)
    want = ~sure if need is None else ~sure | need(sure)
    if not dominated:
        step, pruned = _timed(p, parts, cand, rows, ceiling, floor, sure)
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
           ceiling: np.ndarray, floor: np.ndarray, sure: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """(step time, surely off the front) of the rows cand (`rows`), from their states alone:
    the anchors are the surely fitting rows on the front of step time × ceiling, a row is off
    when an anchor beats it on time with a ceiling no higher than the row's floor."""
    step = step_seconds(p, rows, shape(p, rows), parts.states_memory(cand),
                        parts.acts.rows(cand, pick=lambda t: t["per_mode"]), parts.groups(cand))
    anchors = np.flatnonzero(sure)
    anchors = anchors[pareto_front(np.stack([step[anchors], ceiling[anchors]], axis=1))]
    return step, surely_dominated(step[anchors], ceiling[anchors], step, floor)
