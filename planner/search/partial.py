"""Partial full recompute: the smallest count of recomputed layers per stage that fits, solved
from a layout's recompute-none and full-recompute rows instead of enumerated
(planner.search.fast's step after its blocks).

A stage's memory at each moment of the step is linear in the count k from k = 1 to its n
layers (each recomputed layer keeps its input instead of its activations); the peak, the
largest over the moments and the stages, is then convex and non-increasing in k. The chord from
k = 1 to k = n lies above it, so the k where the chord reaches the usable memory U,
k = 1 + ⌈(M(1) − U)/(M(1) − M(n))·(n − 1)⌉, fits and is exact when one moment holds the peak
throughout; where another moment takes over as layers are recomputed (the optimizer step's,
which holds no activations, on a ZeRO-3 hybrid-shard layout say), fewer layers fit: the count
below the chord's is tried (one pass over the layouts decides most), and where it fits too,
the smallest k is found by bisection between 1 and it. planner.search.reference scans every k.
"""

from __future__ import annotations

import numpy as np

from planner.evaluation.candidates import COLUMN_NAMES, RECOMPUTE_CODES, Candidates, Problem
from planner.evaluation.evaluate import Memory, usable_bytes
from planner.evaluation.distinct import Part
from planner.search.bounds import MemoryParts, memory_parts

__all__ = ["pairs", "solve", "stage_memory", "to_solve"]


def stage_memory(m: Memory) -> np.ndarray:
    """Per-stage totals (3 × n); 0 for the middle stage where there is none (PP ≤ 2)."""
    return np.stack([m.first.total, np.where(m.has_middle, m.middle.total, 0.0), m.last.total])


def to_solve(c: Candidates, fits: np.ndarray, n_rec: int) -> np.ndarray:
    """solve's layouts: the full-recompute rows that fit whose recompute-none row does
    not (`fits` per row of c)."""
    return pairs(c, fits, fits, n_rec)


def pairs(c: Candidates, none_ok: np.ndarray, full_ok: np.ndarray, n_rec: int) -> np.ndarray:
    """The full-recompute rows of c where full_ok holds and none_ok does not on the layout's
    recompute-none row (c holds each layout's n_rec recompute rows, none first, full last)."""
    none, full = RECOMPUTE_CODES["none"], RECOMPUTE_CODES["full"]
    if n_rec < 2 or not len(c) or c.recompute[0] != none or c.recompute[n_rec - 1] != full:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(~none_ok[0::n_rec] & full_ok[n_rec - 1::n_rec]) * n_rec + (n_rec - 1)


def solve(p: Problem, rows: Candidates, mn: np.ndarray, usable: np.ndarray,
          states: Part | None = None, flight: Part | None = None
          ) -> tuple[Candidates, np.ndarray, MemoryParts]:
    """The smallest k (above) for each of `rows` (full-recompute rows whose recompute-none row
    does not fit, their per-stage memory mn and usable memory; their states and in-flight
    parts where the caller has them): the solved rows, which of `rows` they come from, and
    their memory parts (the states and micro-batches in flight are those of `rows`: only the
    activations read the layer count). A layout needing every layer is its full row already."""
    parts = memory_parts(p, with_cols(rows, recompute_layers=1), states, flight)
    x, _, m1 = parts.rows(p)
    n = np.stack(x.layers)
    most = n.max(axis=0)
    fits1 = m1.peak <= m1.usable
    m1 = stage_memory(m1)
    drop = np.maximum(m1 - mn, 1e-9)
    with np.errstate(invalid="ignore"):
        k_stage = np.where(m1 <= usable, 1.0,
                           1.0 + np.ceil((m1 - usable) / drop * np.maximum(n - 1, 1) - 1e-9))
    chord = np.minimum(k_stage, n).max(axis=0)
    # lo: a count known not to fit (0: none); hi: one that fits (the chord's, by convexity)
    lo, hi = np.where(fits1, 0.0, 1.0), np.where(fits1, 1.0, chord)
    probe = hi - 1.0
    while True:
        idx = np.flatnonzero(probe > lo)
        if not len(idx):
            break
        k = probe[idx]
        fit = _fits(p, parts, rows, idx, k)
        hi[idx[fit]], lo[idx[~fit]] = k[fit], k[~fit]
        probe = np.where(hi - lo > 1.0, np.floor((lo + hi) / 2.0), lo)
    ok = np.flatnonzero(hi < most)
    solved = with_cols(rows.take(ok), recompute_layers=hi[ok].astype(np.int64))
    # the rows alike in their (one-layer) activation tuple are alike in its layer tuple
    layer = None if parts.acts.index is None else (parts.acts.index.take(ok), parts.acts.size)
    return solved, ok, parts.take(ok, solved).with_acts(p, solved, layer)


def _fits(p: Problem, parts: MemoryParts, rows: Candidates, idx: np.ndarray, k: np.ndarray
          ) -> np.ndarray:
    """Whether row idx[i] of `rows` fits with full recompute of k[i] layers per stage: its exact
    peak (evaluate.memory without the detail) where its floor leaves it open. `parts` are the
    rows' parts at one layer: the states and micro-batches in flight are theirs, the
    activations computed on the rows, their layer bytes once per layer tuple."""
    sub = with_cols(rows.take(idx), recompute_layers=k.astype(np.int64))
    layer = None if parts.acts.index is None else (parts.acts.index.take(idx), parts.acts.size)
    at = parts.take(idx, sub).with_acts(p, sub, layer)
    usable = usable_bytes(p)
    fit = np.zeros(len(idx), dtype=bool)
    open_ = np.flatnonzero(at.floor(p) <= usable)
    mem = at.rows(p, open_, sub.take(open_))[2]
    fit[open_] = mem.peak <= mem.usable
    return fit


def with_cols(c: Candidates, **cols) -> Candidates:
    """A copy of c with some columns replaced (a scalar or one value per row)."""
    return Candidates(**{f: np.broadcast_to(np.asarray(cols[f], dtype=np.int64), (len(c),)).copy()
                         if f in cols else getattr(c, f) for f in COLUMN_NAMES})
