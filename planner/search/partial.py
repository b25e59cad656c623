"""Partial full recompute: the smallest count of recomputed layers per stage that fits, solved
from a layout's recompute-none and full-recompute rows (memory is linear in the count) instead
of enumerated (planner.search.fast's step after its batches)."""

from __future__ import annotations

import numpy as np

from planner.evaluation.candidates import COLUMN_NAMES, RECOMPUTE_CODES, Candidates, Problem
from planner.evaluation.evaluate import Memory
from planner.evaluation.distinct import Part
from planner.search.bounds import MemoryParts, memory_parts

__all__ = ["pairs", "solve", "solve_partial", "stage_memory", "to_solve"]


def stage_memory(m: Memory) -> np.ndarray:
    """Per-stage totals (3 × n); 0 for the middle stage where there is none (PP ≤ 2)."""
    return np.stack([m.first.total, np.where(m.has_middle, m.middle.total, 0.0), m.last.total])


def solve_partial(p: Problem, c: Candidates, mem: Memory, n_rec: int) -> Candidates:
    """Full recompute of only k layers per stage, with the smallest k that fits, for each
    layout where recompute none does not fit and full recompute of every layer does. c holds
    each layout's n_rec recompute variants as consecutive rows, none first and full last (as
    planner.search.space lays them out), mem their memory (evaluate.memory).

    A stage's memory is linear in k from k = 1 to its n layers (each recomputed layer keeps its
    input instead of its activations): M(k) = M(1) + (k − 1)·(M(n) − M(1))/(n − 1), so a stage
    needs k = 1 + ⌈(M(1) − U)/(M(1) − M(n))·(n − 1)⌉ for usable memory U, and the layout the
    largest k over its stages. Layouts needing every layer are already the full rows."""
    base = to_solve(c, mem.peak <= mem.usable, n_rec)
    return solve(p, c.take(base), stage_memory(mem)[:, base], mem.usable[base])[0]


def to_solve(c: Candidates, fits: np.ndarray, n_rec: int) -> np.ndarray:
    """solve_partial's layouts: the full-recompute rows that fit whose recompute-none row does
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
    """solve_partial on its layouts (full-recompute rows, their per-stage memory mn and usable
    memory; their states and in-flight parts where the caller has them): the solved rows,
    which of `rows` they come from, and their memory parts (the states and micro-batches in
    flight are those of `rows`: only the activations read the layer count)."""
    parts = memory_parts(p, with_cols(rows, recompute_layers=1), states, flight)
    x, _, m1 = parts.rows(p)
    n = np.stack(x.layers)
    m1 = stage_memory(m1)
    drop = np.maximum(m1 - mn, 1e-9)
    with np.errstate(invalid="ignore"):
        k_stage = np.where(m1 <= usable, 1.0,
                           1.0 + np.ceil((m1 - usable) / drop * np.maximum(n - 1, 1) - 1e-9))
    k = np.minimum(k_stage, n).max(axis=0)
    ok = np.flatnonzero(k < n.max(axis=0))
    solved = with_cols(rows.take(ok), recompute_layers=k[ok].astype(np.int64))
    # the rows alike in their (one-layer) activation tuple are alike in its layer tuple
    layer = None if parts.acts.index is None else (parts.acts.index.take(ok), parts.acts.size)
    return solved, ok, parts.take(ok, solved).with_acts(p, solved, layer)


def with_cols(c: Candidates, **cols) -> Candidates:
    """A copy of c with some columns replaced (a scalar or one value per row)."""
    return Candidates(**{f: np.broadcast_to(np.asarray(cols[f], dtype=np.int64), (len(c),)).copy()
                         if f in cols else getattr(c, f) for f in COLUMN_NAMES})
