"""Layouts crossed with their recompute rows without copying every column onto every row
(the space's innermost knob, space.recomputes): a crossing holds its layouts and each row's
layout, and builds a column on the rows when it is first read.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.evaluation.candidates import COLUMN_NAMES, RECOMPUTE_COLUMNS, Candidates
from planner.evaluation.distinct import replaced

__all__ = ["Crossed", "materialize", "recounted", "with_recomputes"]

COLUMNS = COLUMN_NAMES


def with_recomputes(c: Candidates, rec: np.ndarray, rows: np.ndarray | None = None
                    ) -> Candidates:
    """Every row of c (or the rows `rows` of it) crossed with the recompute rows rec, recompute
    innermost (as the space lays them out): a Crossed, whose other columns are built from c's
    on first read (the search reads only some of them on every row)."""
    k = len(rec)
    idx = np.repeat(np.arange(len(c)) if rows is None else rows, k)
    n = len(idx) // k
    out: Candidates = object.__new__(Crossed)
    out.__dict__.update(_layouts=c, _at=idx, recompute=np.tile(rec[:, 0], n),
                        recompute_layers=np.tile(rec[:, 1], n))
    return out


def recounted(c: Candidates, rows: np.ndarray, layers: np.ndarray) -> Candidates:
    """The rows `rows` of c with recompute_layers `layers`, as a Crossed: no column copied but
    the recompute ones, the others built from c's on first read (a caller that reads a few
    columns of many rows, partial._fits_one_fewer, copies only those)."""
    d = c.__dict__
    lay, at = (d["_layouts"], d["_at"].take(rows)) if "_at" in d else (c, rows)
    out: Candidates = object.__new__(Crossed)
    out.__dict__.update(_layouts=lay, _at=at, recompute=c.recompute.take(rows),
                        recompute_layers=np.asarray(layers, dtype=np.int64))
    return out


class _Lazy:
    """A column of a Crossed: its layouts' column at each row's layout, built on first read
    (a non-data descriptor: once built it is in the instance's __dict__, read from there)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, cls: type | None = None) -> object:
        if obj is None:
            return self
        # reached only while the column is not in the instance's __dict__ (non-data descriptor)
        d = obj.__dict__
        v = d[self.name] = getattr(d["_layouts"], self.name).take(d["_at"])
        return v


def _crossed_take(self: Candidates, idx: ArrayLike) -> Candidates:
    """The rows idx (or a boolean mask), still lazy: each one's layout row and recompute columns."""
    d = self.__dict__
    if "_at" not in d:  # rebuilt with every column (distinct.replaced): a plain row subset
        return Candidates.take(self, idx)
    idx = np.asarray(idx)
    if idx.dtype == bool:
        idx = np.flatnonzero(idx)
    return replaced(self, {"_layouts": d["_layouts"], "_at": d["_at"].take(idx),
                           "recompute": d["recompute"].take(idx),
                           "recompute_layers": d["recompute_layers"].take(idx)})


def materialize(c: Candidates, idx: np.ndarray) -> Candidates:
    """The rows idx of c as plain Candidates, every column copied once (a Crossed's from its
    layouts' columns at those rows): what the search keeps between blocks, holding no
    reference to a block's layouts, without a row subset and a concatenation (two copies) and
    the record's constructor (every column given, nothing for it to fill in)."""
    d = c.__dict__
    if "_at" not in d:
        return Candidates.take(c, idx)
    at = d["_at"].take(idx)
    cols = {n: d[n].take(idx) if n in RECOMPUTE_COLUMNS else getattr(d["_layouts"], n).take(at)
            for n in COLUMNS}
    out = object.__new__(Candidates)
    out.__dict__.update(cols)
    return out


# Candidates of layouts crossed with recompute rows (with_recomputes): the recompute columns
# held, every other column built from the layouts' on first read.
Crossed = type("Crossed", (Candidates,), {
    **{n: _Lazy(n) for n in COLUMNS if n not in RECOMPUTE_COLUMNS},
    "take": _crossed_take, "__module__": __name__,
    "__doc__": "Candidates of layouts crossed with recompute rows, columns built on first read."})
