"""Partial full recompute: the smallest count of recomputed layers per stage that fits, solved
from a layout's recompute-none and full-recompute rows instead of enumerated
(planner.search.fast's step after its blocks).

A stage's memory at each moment of the step is linear in the count k from k = 1 to its n
layers (each recomputed layer keeps its input instead of its activations); the peak, the
largest over the moments and the stages, is then convex and non-increasing in k. The chord from
k = 1 to k = n lies above it, so c, the k where the chord reaches the usable memory U,
c = 1 + ⌈(M(1) − U)/(M(1) − M(n))·(n − 1)⌉, fits; the peak at c is computed exactly (the
search needs it anyway), and the secant through (c, M(c)) and (n, M(n)), which lies below the
peak left of c, shows c − 1 does not fit wherever one moment holds the peak throughout. Where
another moment takes over as layers are recomputed (the optimizer step's, which holds no
activations, on a ZeRO-3 hybrid-shard layout say), fewer layers may fit and the smallest count
is found by bisection. planner.search.reference scans every k.

The host rule (evaluation.host) needs no check here: a layout is solved only where its
recompute-none row passes it (to_solve), and the offloaded activations at k recomputed layers,
(n − k) layers' saved tensors and k inputs, are never more than with none recomputed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from planner.evaluation.candidates import COLUMN_NAMES, RECOMPUTE_CODES, Candidates, Problem
from planner.evaluation.distinct import Part, gather, on_distinct
from planner.evaluation.evaluate import Memory
from planner.engine.stages import stage_layers
from planner.search.bounds import MemoryParts, memory_parts
from planner.search.crossing import recounted

__all__ = ["known_stages", "pairs", "screen", "solve", "stage_memory", "to_solve"]

# Which rows screen leaves out of the solve, only counted: from their memory parts at one
# recomputed layer and a floor on their peak at any count (settle.beaten_by).
Beaten = Callable[[MemoryParts, np.ndarray], np.ndarray]

# The columns a stage's layer count reads (engine.stages.stage_layers).
LAYER_SPLIT = ("pp", "chunks", "first", "last")
# solve's certificate margin, relative to usable memory: a bound's slack for float rounding.
SECANT_MARGIN = 1e-9


def stage_memory(m: Memory) -> np.ndarray:
    """Per-stage totals (3 × n); 0 for the middle stage where there is none (PP ≤ 2)."""
    return np.stack([m.first.total, np.where(m.has_middle, m.middle.total, 0.0), m.last.total])


def known_stages(mem: Memory, evaluated: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per-stage memory (3 × rows, stage_memory) of the rows `rows` that are among
    `evaluated` (sorted; `mem` theirs), NaN for the others."""
    out = np.full((3, len(rows)), np.nan)
    if len(evaluated) and len(rows):
        at = np.minimum(np.searchsorted(evaluated, rows), len(evaluated) - 1)
        known = evaluated[at] == rows
        out[:, known] = stage_memory(mem)[:, at[known]]
    return out


def to_solve(c: Candidates, fits: np.ndarray, n_rec: int,
             host_ok: np.ndarray | None = None) -> np.ndarray:
    """solve's layouts: the full-recompute rows that fit whose recompute-none row does not
    fit the GPU (`fits` per row of c; a none row the host rule refused, where `host_ok` is
    False, fails that rule first and is not solved)."""
    return pairs(c, fits if host_ok is None else fits | ~host_ok, fits, n_rec)


def pairs(c: Candidates, none_ok: np.ndarray, full_ok: np.ndarray, n_rec: int) -> np.ndarray:
    """The full-recompute rows of c where full_ok holds and none_ok does not on the layout's
    recompute-none row (c holds each layout's n_rec recompute rows, none first, full last)."""
    none, full = RECOMPUTE_CODES["none"], RECOMPUTE_CODES["full"]
    if n_rec < 2 or not len(c) or c.recompute[0] != none or c.recompute[n_rec - 1] != full:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(~none_ok[0::n_rec] & full_ok[n_rec - 1::n_rec]) * n_rec + (n_rec - 1)


def screen(p: Problem, rows: Candidates, mn: np.ndarray, usable: np.ndarray,
           states: Part | None, flight: Part | None, beaten: Beaten | None,
           least: np.ndarray | None = None, alike: tuple[np.ndarray, int] | None = None,
           group: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Which of `rows` (full-recompute rows whose recompute-none row does not fit, their
    per-stage memory mn, NaN where the caller has not computed it, and usable memory; their
    states and in-flight parts where the caller has them) are left to solve, and how many of
    the others were counted: `beaten(parts, least)` says which rows (their parts at one
    layer, a floor on their peak at any count) are off the front whatever count they get;
    such a row is only counted, where one layer fewer than its fullest stage's fits (the
    peak does not increase as layers are recomputed, so then and only then does a smaller
    count fit). `least`, a floor on the full row's peak, stands for mn in `beaten`'s floor
    where mn is NaN. `alike`: the rows numbered by their activation tuple (and the count)
    where the caller knows it: rows alike in it are alike at one recomputed layer too (the
    recompute mode is the same), so the activations' tuples are not searched for. `group`:
    each row's layout group where the caller knows it (MemoryParts.group: rows alike but in
    their states), which names the columns `beaten`'s step floor reads."""
    if beaten is None or not len(rows):
        return np.arange(len(rows)), 0
    parts = memory_parts(p, with_cols(rows, recompute_layers=1), states, flight, alike)
    # the peak at any count is at least the full row's (M(n)), the largest stage of mn
    full = mn.max(axis=0)
    off = beaten(parts if group is None else replace(parts, group=group),
                 full if least is None else np.where(np.isnan(full), least, full))
    most = fullest_stage(p, parts.c, parts.acts)
    idx = np.flatnonzero(off & (most >= 2.0))
    counted = _fits_one_fewer(p, parts, rows, idx, most[idx] - 1.0, usable[idx],
                              None if group is None else group.take(idx))
    return np.flatnonzero(~off), counted


def solve(p: Problem, rows: Candidates, mn: np.ndarray, usable: np.ndarray,
          states: Part | None = None, flight: Part | None = None,
          alike: tuple[np.ndarray, int] | None = None
          ) -> tuple[Candidates, np.ndarray, MemoryParts, np.ndarray]:
    """The smallest k (above) for each of `rows` (as screen's, those it leaves): the solved
    rows, which of `rows` they come from, their memory parts (the states and micro-batches
    in flight are those of `rows`: only the activations read the layer count) and their
    exact peak memory. A layout needing every layer is its full row already."""
    parts = memory_parts(p, with_cols(rows, recompute_layers=1), states, flight, alike)
    miss = np.flatnonzero(np.isnan(mn).any(axis=0))
    if len(miss):   # the full rows' per-stage memory the caller did not compute
        mn = mn.copy()
        mn[:, miss] = stage_memory(_parts_at(p, parts, miss, rows.take(miss)).rows(p)[2])
    return _smallest(p, rows, mn, usable, parts)


def _smallest(p: Problem, rows: Candidates, mn: np.ndarray, usable: np.ndarray,
              parts: MemoryParts) -> tuple[Candidates, np.ndarray, MemoryParts, np.ndarray]:
    """solve's smallest k of each of `rows` from their parts at one layer, by the chord, the
    secant and bisection (module docstring)."""
    x, _, m1 = parts.rows(p)
    n = np.stack(x.layers)
    most = n.max(axis=0)
    fits1 = m1.peak <= m1.usable
    m1s = stage_memory(m1)
    drop = np.maximum(m1s - mn, 1e-9)
    with np.errstate(invalid="ignore"):
        k_stage = np.where(m1s <= usable, 1.0,
                           1.0 + np.ceil((m1s - usable) / drop * np.maximum(n - 1, 1) - 1e-9))
    chord = np.minimum(k_stage, n).max(axis=0)
    # lo: a count known not to fit (0: none), hi: the smallest known to fit (most: the full row)
    lo, hi = np.where(fits1, 0.0, 1.0), np.where(fits1, 1.0, most)
    at = np.flatnonzero(chord < most)  # the chord's count, 1 where one layer fits
    c = chord[at]
    at_c = with_cols(rows.take(at), recompute_layers=c.astype(np.int64))
    parts_c = _parts_at(p, parts, at, at_c)
    mc = parts_c.peak(p)
    peak = np.full(len(rows), np.nan)
    fit = mc <= usable[at]
    hi[at[fit]], peak[at[fit]], lo[at[~fit]] = c[fit], mc[fit], c[~fit]
    # the secant through (c, M(c)) and (n, M(n)) lies below M left of c (M convex): where it
    # is above U at c − 1, c is the smallest count that fits
    below = mc + (mc - mn[:, at].max(axis=0)) / np.maximum(most[at] - c, 1.0)
    exact = fit & (below > usable[at] * (1.0 + SECANT_MARGIN))
    lo[at[exact]] = np.maximum(c[exact] - 1.0, lo[at[exact]])
    probe = hi - 1.0  # then halves: the bisection between lo and hi
    while True:
        idx = np.flatnonzero((probe > lo) & (probe < hi))
        if not len(idx):
            break
        k = probe[idx]
        at_k = _peak_at(p, parts, rows, idx, k)
        ok = at_k <= usable[idx]
        hi[idx[ok]], lo[idx[~ok]], peak[idx[ok]] = k[ok], k[~ok], at_k[ok]
        probe = np.where(hi - lo > 1.0, np.floor((lo + hi) / 2.0), lo)
    found = np.flatnonzero(hi < most)
    solved = with_cols(rows.take(found), recompute_layers=hi[found].astype(np.int64))
    on_chord = np.searchsorted(at, found)
    if len(found) and len(at) and np.array_equal(at.take(on_chord, mode="clip"), found) \
            and np.array_equal(c.take(on_chord), hi[found]):   # the chord's rows' parts
        return solved, found, _take_rows(parts_c, on_chord, solved), peak[found]
    return solved, found, _parts_at(p, parts, found, solved), peak[found]


def fullest_stage(p: Problem, c: Candidates, acts: Part | None = None) -> np.ndarray:
    """The layers of each row's fullest stage: the largest of shape(p, c).layers, bit for bit
    (engine.stages.stage_layers on the same float columns), without the rest of the shape,
    once per distinct (PP, chunks, first, last), which the rows' activation tuples (`acts`,
    their part where it is on distinct tuples) name."""
    def fullest(u: Candidates) -> np.ndarray:
        f64 = lambda x: np.asarray(x, dtype=float)  # noqa: E731
        return np.stack([f64(x) for x in stage_layers(p.model.layers, f64(u.pp), f64(u.chunks),
                                                      u.first, u.last)]).max(axis=0)
    groups = None if acts is None or acts.index is None else (acts.index, acts.size)
    return on_distinct(c, LAYER_SPLIT, fullest, groups=groups)


def _fits_one_fewer(p: Problem, parts: MemoryParts, rows: Candidates, idx: np.ndarray,
                    k: np.ndarray, usable: np.ndarray, group: np.ndarray | None) -> int:
    """How many of the rows idx of `rows` fit with k[i] layers recomputed, k a function of
    the row's layer tuple (one fewer than its fullest stage's), from `parts`, the rows' parts
    at one layer: within the ceiling (MemoryParts.ceiling, never below the peak) a row fits,
    above the floor (MemoryParts.floor, never above it) it does not, the exact peak decides
    the rest. The activations are computed once per tuple; `group`, the rows' layout groups
    where known, names the bounds' pairs (rows alike but in their states share k)."""
    sub = recounted(rows, idx, k.astype(np.int64))   # columns built as they are read
    # k is a function of the layer tuple: rows alike in their activation tuple at one layer
    # are alike at k (their full-recompute rows': the recompute mode is the same)
    acts = parts.acts.take(idx)
    at = replace(parts.take(idx, sub).with_acts(
        p, sub, alike=None if acts.index is None else (acts.index, acts.size)), group=group)
    sure = at.ceiling(p, np.arange(len(idx))) <= usable
    rest = np.flatnonzero(~sure)
    rest = rest[at.take(rest, sub.take(rest)).floor(p) <= usable[rest]]
    return int(sure.sum()) + int((at.take(rest, sub.take(rest)).peak(p) <= usable[rest]).sum())


def _take_rows(parts: MemoryParts, idx: np.ndarray, c: Candidates) -> MemoryParts:
    """The parts of the rows idx (candidates c), their activations still on the rows."""
    if len(idx) == len(parts.c):
        return parts
    acts = parts.acts.take(idx) if parts.acts.index is not None else Part(
        tree=gather(parts.acts.tree, idx, parts.acts.size), index=None, size=len(idx))
    return MemoryParts(c=c, states=parts.states.take(idx), acts=acts,
                       flight=parts.flight.take(idx))


def _parts_at(p: Problem, parts: MemoryParts, idx: np.ndarray, c: Candidates) -> MemoryParts:
    """The parts of `c`, the rows idx of `parts`' (their parts at one layer) with another
    recompute count: the states and micro-batches in flight are theirs, the activations
    computed on the rows, their layer bytes once per layer tuple (the rows alike in their
    one-layer activation tuple are alike in its layer tuple)."""
    layer = None if parts.acts.index is None else (parts.acts.index.take(idx), parts.acts.size)
    return parts.take(idx, c).with_acts(p, c, layer)


def _peak_at(p: Problem, parts: MemoryParts, rows: Candidates, idx: np.ndarray,
             k: np.ndarray) -> np.ndarray:
    """The exact peak memory (evaluate.memory's) of row idx[i] of `rows` with full recompute of
    k[i] layers per stage, from `parts`, the rows' parts at one layer."""
    sub = with_cols(rows.take(idx), recompute_layers=k.astype(np.int64))
    return _parts_at(p, parts, idx, sub).peak(p)


def with_cols(c: Candidates, **cols: ArrayLike) -> Candidates:
    """A copy of c with some columns replaced (a scalar or one value per row)."""
    return Candidates(**{f: np.broadcast_to(np.asarray(cols[f], dtype=np.int64), (len(c),)).copy()
                         if f in cols else getattr(c, f) for f in COLUMN_NAMES})
