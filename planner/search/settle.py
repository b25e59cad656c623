"""Which candidate rows of a block fit in memory, and the exact Pareto front (step time × peak
× GPUs) of those that do, with the five-phase memory model and the full time model run only
where sound bounds leave the answer open (planner.search.fast's per-block step).

The bounds: MemoryParts.floor never exceeds a row's exact peak, MemoryParts.ceiling never falls
below it, timing.step_floor never exceeds its step time. A row within the ceiling surely fits.
A row that some surely fitting row beats on time (exact, from its states alone) with a ceiling
no higher than the row's floor is beaten on the exact figures too, and is off the front
(search.pareto.surely_dominated): neither its exact step nor its exact peak is computed. The
surely fitting rows timed are carried from block to block (Anchors), so a later block's rows
are put off by an earlier block's too. What is returned (each block's front, less the rows an
earlier block's anchor beats) gives the same front of the whole space as evaluating every row
exactly, bit for bit (tests/test_search_floor.py)."""

from __future__ import annotations

import numpy as np

from planner.evaluation.candidates import STEP_FLOOR_COLUMNS, Candidates, Problem, shape
from planner.evaluation.distinct import WORTH_IT, distinct_rows
from planner.search.pareto import pareto_front, surely_dominated
from planner.evaluation.evaluate import Memory, usable_bytes
from planner.search.bounds import MemoryParts, columns_at
from planner.evaluation.timing import STEP_FLOOR_MARGIN, step_floor, step_seconds
from planner.search.partial import Beaten


class Anchors:
    """A running front of surely fitting rows (exact step × ceiling on the peak) from the
    blocks settled so far: a row of a later block that one of them beats on time with a
    ceiling no higher than the row's memory floor is off the front of the whole space (exact
    domination is transitive, the final front is taken over the union of the kept rows, and
    the row that beats it is kept or beaten by a kept one), so it needs neither its exact
    step nor its exact peak. The blocks' own fronts and the final front are what they were."""

    def __init__(self) -> None:
        self.step = np.zeros(0)
        self.ceiling = np.zeros(0)

    def add(self, step: np.ndarray, ceiling: np.ndarray) -> None:
        """Merge rows (exact step, ceiling) that surely fit; only the front is kept."""
        s, u = np.concatenate([self.step, step]), np.concatenate([self.ceiling, ceiling])
        keep = pareto_front(np.stack([s, u], axis=1))
        self.step, self.ceiling = s[keep], u[keep]


def settle(p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
           floor: np.ndarray, dominated: bool, *, anchors: Anchors,
           peak: np.ndarray | None = None) -> tuple[np.ndarray, Memory, np.ndarray, np.ndarray]:
    """Which of the rows cand (`rows`, their `floor`) fit, and the exact front of those that do
    (every one that fits with `dominated`), running the five-phase model (MemoryParts.rows)
    only where the bounds leave it open: within the ceiling (MemoryParts.ceiling, never below
    the exact peak) a row surely fits; a row that a surely fitting row (of this block, or of
    `anchors`, which the surely fitting rows timed here join) beats on time with a ceiling no
    higher than its floor (search.pareto.surely_dominated) is off the front (_timed), and left
    out of the front returned. `peak`, the rows'
    exact peaks where the caller has them all, stands for both bounds and the five-phase model.
    Returns (the positions in cand evaluated, their memory, which rows fit, the positions
    kept)."""
    ceiling = parts.ceiling(p, cand) if peak is None else peak
    sure = ceiling <= usable_bytes(p)
    want = ~sure
    if not dominated:
        step, pruned = _timed(p, parts, cand, rows, ceiling, floor, sure, anchors)
        want |= ~pruned
    ex = np.flatnonzero(want if peak is None else np.zeros(len(cand), dtype=bool))
    mem = parts.rows(p, cand[ex], rows.take(ex))[2]
    fit = sure.copy()
    fit[ex] = mem.peak <= mem.usable
    if dominated:
        return ex, mem, fit, np.flatnonzero(fit)
    idx = np.flatnonzero(fit & ~pruned)  # the rows that fit, less those surely beaten
    obj = np.stack([step[idx], mem.peak[np.searchsorted(ex, idx)] if peak is None else peak[idx],
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
    one for this block's own anchors first measured dearer than it saves). The surely fitting
    rows timed join `prior`, and the rows timed that one of them beats on the exact step are
    off too. A row is off when an anchor beats its step (floor) with a ceiling no higher than
    the row's memory floor."""
    per_mode = parts.acts.rows(cand, pick=lambda t: t["per_mode"])
    rows_of = _Rows(p, parts, cand, rows, per_mode)
    step = np.full(len(cand), np.nan)
    off, rest = np.zeros(len(cand), dtype=bool), np.arange(len(cand))
    if len(prior.step):
        for axes in (False, True) if parts.acts.index is None else (True,):
            least, inverse = rows_of.floor(rest, axes)
            off[rest] = surely_dominated(prior.step, prior.ceiling, least, floor[rest], inverse)
            rest = np.flatnonzero(~off)
    step[rest] = rows_of.step(rest)
    at = rest[sure[rest]]
    prior.add(step[at], ceiling[at])
    off[rest] = surely_dominated(prior.step, prior.ceiling, step[rest], floor[rest])
    return step, off


def beaten_by(p: Problem, anchors: Anchors) -> Beaten | None:
    """partial.screen's `beaten`: the full-recompute rows whose solved row, whatever count of
    layers it recomputes, `anchors` surely put off the front (search.pareto.surely_dominated),
    on the step floor at one recomputed layer (timing.step_floor, times 1 − STEP_FLOOR_MARGIN
    more for rounding) and the floor given on the peak. The floor does not decrease as
    layers are recomputed: each term it sums grows with the count (the recompute seconds, the
    TP passes) or does not read it, and the stage that paces is the one with the most of
    them. Not so where activations are offloaded (fewer layers offload as more recompute):
    None there, every row solved."""
    if p.tuning.activation_offload or not len(anchors.step):
        return None

    def off(parts: MemoryParts, least: np.ndarray) -> np.ndarray:
        cand = np.arange(len(parts.c))
        rows = _Rows(p, parts, cand, parts.c, parts.acts.rows(cand, pick=lambda t: t["per_mode"]))
        out, rest = np.zeros(len(cand), dtype=bool), cand
        # the compute alone first only where the rows' activation tuples are not known (as in
        # _timed): on tuples the full floor costs about what the compute alone does, and it
        # is never below it (DeepSeek-V3 on 2,048 GPUs: 214 K of 914 K rows off by the compute,
        # 901 K by the full floor, every one of the 214 K among them)
        for axes in (False, True) if parts.acts.index is None else (True,):
            step, inverse = rows.floor(rest, axes)
            out[rest] = surely_dominated(anchors.step, anchors.ceiling,
                                         step * (1.0 - STEP_FLOOR_MARGIN), least[rest], inverse)
            rest = np.flatnonzero(~out)
        return out
    return off


class _Rows:
    """The timing inputs of the rows cand (`rows`), each bound or exact step computed on the
    rows it is asked of alone: the shape, the compute terms (timing.compute_terms) and the step
    floor are elementwise, so a row's are the same whichever rows they are computed with. The
    step floor reads STEP_FLOOR_COLUMNS alone (not the ZeRO states a layout's rows differ in
    most), so it is computed once per distinct tuple of them and gathered to the rows."""

    def __init__(self, p: Problem, parts: MemoryParts, cand: np.ndarray, rows: Candidates,
                 per_mode: dict) -> None:
        self.p, self.parts, self.cand, self.rows, self.per_mode = p, parts, cand, rows, per_mode

    def _of(self, idx: np.ndarray) -> tuple:
        """(rows, shape, per-mode activations, positions in cand) of the rows idx (every row:
        no copy)."""
        if len(idx) == len(self.cand):
            sub, a, at = self.rows, self.per_mode, self.cand
        else:
            sub, a, at = self.rows.take(idx), {m: v.take(idx) for m, v in
                                               self.per_mode.items()}, self.cand[idx]
        return sub, shape(self.p, sub), a, at

    def floor(self, idx: np.ndarray, axes: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """timing.step_floor of the rows idx (the compute alone without `axes`), once per
        distinct STEP_FLOOR_COLUMNS tuple of them (on the rows themselves where most are
        distinct): (its values, each row's among them; None: one value a row)."""
        found = distinct_rows(self._floor_key(idx), at_most=int(WORTH_IT * len(idx)),
                              runs=True) if len(idx) > 1 else None
        first = idx if found is None else idx.take(found[0])
        sub, x, a, at = self._of(first)
        least = step_floor(self.p, sub, x, a, self.parts.groups(at), axes=axes)
        return least, None if found is None else found[1]

    def _floor_key(self, idx: np.ndarray) -> list[np.ndarray]:
        """Columns whose tuples on the rows idx name their STEP_FLOOR_COLUMNS tuples (every
        column but the states'): a row's layout group with its recompute row where the parts
        know the groups (MemoryParts.group), else the activations' tuple (ACTIVATION_COLUMNS)
        with DP, EP and the schedule where the parts know it, else the columns themselves."""
        acts, c, k = self.parts.acts, self.parts.c, self.parts.crossed
        at = self.cand.take(idx)
        if self.parts.group is not None:  # a row's group and recompute row name all of them
            return [self.parts.group.take(at // k) * k + at % k]
        if acts.index is None:
            sub = self.rows.take(idx)
            return [getattr(sub, n) for n in STEP_FLOOR_COLUMNS]
        return [acts.index.take(at)] + columns_at(c, ("dp", "ep", "schedule"), at)

    def step(self, idx: np.ndarray) -> np.ndarray:
        """timing.step_seconds of the rows idx, from their states alone."""
        sub, x, a, at = self._of(idx)
        return step_seconds(self.p, sub, x, self.parts.states_memory(at), a,
                            self.parts.groups(at))
