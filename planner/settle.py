"""Which candidate rows of a batch fit in memory, and the exact Pareto front (step time × peak
× GPUs) of those that do, with the five-phase memory model and the full time model run only
where sound bounds leave the answer open (planner.search's per-batch step).

The bounds: MemoryParts.floor never exceeds a row's exact peak, MemoryParts.ceiling never falls
below it, timing.step_floor never exceeds its step time. A row within the ceiling surely fits.
A row that some surely fitting row beats on time (exact, from its states alone) with a ceiling
no higher than the row's floor is beaten on the exact figures too, and is off the front
(engine.pareto.surely_dominated): neither its exact step nor its exact peak is computed. The
surely fitting rows timed are carried from batch to batch (Anchors), so a later batch's rows
are put off by an earlier batch's too. What is returned (each batch's front, less the rows an
earlier batch's anchor beats) gives the same front of the whole space as evaluating every row
exactly, bit for bit (tests/test_search_floor.py)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .candidates import Candidates, Problem, Shape, shape
from .engine.pareto import pareto_front, surely_dominated
from .evaluate import Memory, usable_bytes
from .memory_parts import MemoryParts
from .timing import step_floor, step_seconds
from .timing_terms import Groups


class Anchors:
    """A running front of surely fitting rows (exact step × ceiling on the peak) from the
    batches settled so far: a row of a later batch that one of them beats on time with a
    ceiling no higher than the row's memory floor is off the front of the whole space (exact
    domination is transitive, the final front is taken over the union of the kept rows, and
    the row that beats it is kept or beaten by a kept one), so it needs neither its exact
    step nor its exact peak. The batches' own fronts and the final front are what they were."""

    def __init__(self) -> None:
        self.step = np.zeros(0)
        self.ceiling = np.zeros(0)

    def add(self, step: np.ndarray, ceiling: np.ndarray) -> None:
        """Merge rows (exact step, ceiling) that surely fit; only the front is kept."""
        s, u = np.concatenate([self.step, step]), np.concatenate([self.ceiling, ceiling])
        keep = pareto_front(np.stack([s, u], axis=1))
        self.step, self.ceiling = s[keep], u[keep]


def settle(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
           floor: np.ndarray, dominated: bool,
           need: Callable[[np.ndarray], np.ndarray] | None = None,
           anchors: Anchors | None = None
           ) -> tuple[np.ndarray, Memory, np.ndarray, np.ndarray]:
    """Which of the rows cand (`rows`, their `floor`) fit, and the exact front of those that do
    (every one that fits with `dominated`), running the five-phase model (MemoryParts.rows)
    only where the bounds leave it open: within the ceiling (MemoryParts.ceiling, never below
    the exact peak) a row surely fits; a row that a surely fitting row (of this batch, or of
    `anchors`, which the surely fitting rows timed here join) beats on time with a ceiling no
    higher than its floor (engine.pareto.surely_dominated) is off the front (_timed), and left
    out of the front returned. `need(sure)` marks more rows to evaluate. Returns (the
    positions in cand evaluated, their memory, which rows fit, the positions kept)."""
    ceiling = parts.ceiling(p, cand)
    sure = ceiling <= usable_bytes(p)
    want = ~sure if need is None else ~sure | need(sure)
    if not dominated:
        step, pruned = _timed(p, parts, cand, rows, ceiling, floor, sure,
                              Anchors() if anchors is None else anchors)
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
           ceiling: np.ndarray, floor: np.ndarray, sure: np.ndarray, prior: Anchors
           ) -> tuple[np.ndarray, np.ndarray]:
    """(step time, surely off the front) of the rows cand (`rows`), the step exact where a row
    is not off (NaN elsewhere). With `prior` anchors every row gets a floor on its step
    (timing.step_floor: the compute and the per-micro-batch axes, no memory read; where the
    activations are on the rows themselves, as for the solved partial-recompute rows, whose
    axis tuples are nearly all distinct too, the compute alone first, ~7x cheaper there, and
    the full floor only on the rows it leaves open) and the rows they put off by it are off;
    the rest (every row, without anchors) are timed exactly, from their states alone
    (MemoryParts.states_memory), in one pass (a pass costs ~1 ms whatever its rows: a second
    one for this batch's own anchors first measured dearer than it saves). The surely fitting
    rows timed join `prior`, and the rows timed that one of them beats on the exact step are
    off too. A row is off when an anchor beats its step (floor) with a ceiling no higher than
    the row's memory floor."""
    per_mode = parts.acts.rows(cand, pick=lambda t: t["per_mode"])
    step = np.full(len(cand), np.nan)
    off, rest = np.zeros(len(cand), dtype=bool), np.arange(len(cand))
    if len(prior.step):
        for model in (_compute_floor, step_floor) if parts.acts.index is None else (step_floor,):
            least = _step_of(p, parts, cand, rows, per_mode, rest, model)
            off[rest] = surely_dominated(prior.step, prior.ceiling, least, floor[rest])
            rest = np.flatnonzero(~off)
    step[rest] = _step_of(p, parts, cand, rows, per_mode, rest, step_seconds)
    at = rest[sure[rest]]
    prior.add(step[at], ceiling[at])
    off[rest] = surely_dominated(prior.step, prior.ceiling, step[rest], floor[rest])
    return step, off


def _compute_floor(p: Problem, c: Candidates, x: Shape, a: dict, groups: Groups) -> np.ndarray:
    """timing.step_floor from the compute alone (no axis terms)."""
    return step_floor(p, c, x, a, groups, axes=False)


def _step_of(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
             per_mode: dict, idx: np.ndarray, model: Callable) -> np.ndarray:
    """timing.step_seconds (from their states alone), timing.step_floor or _compute_floor
    (`model`) of the rows idx of cand (every row: no copy)."""
    whole = len(idx) == len(cand)
    sub = rows if whole else rows.take(idx)
    a = per_mode if whole else {m: v.take(idx) for m, v in per_mode.items()}
    at = cand if whole else cand[idx]
    if model is step_seconds:
        return step_seconds(p, sub, shape(p, sub), parts.states_memory(at), a, parts.groups(at))
    return model(p, sub, shape(p, sub), a, parts.groups(at))
