"""The layouts of some splits that pass every structural rule, built as the grid they form
instead of filtered out of every row (blocks.passing_blocks' layouts).

A run of structural rules (blocks.RUNS) reads the split and its own knob tables alone, and no
two runs read a table in common, so a row passes every run exactly where each run's tuple of
it passes: within a split the passing rows are the cross product of each run's passing tuples
(a table no run reads: all of its rows), in the rows' C order when each run's tables are
consecutive in space.FACTORS. Only those rows are built, run tuple by run tuple, never the
rows that fail; the same columns, positions and groups as space.product with blocks'
structural `keep`, element for element (tests/test_search_group_count.py). Where a run's
tables are not consecutive (no rule set so far), None: the caller filters every row.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.search.space import FACTORS, SPLIT_COLUMNS, Splits, product

__all__ = ["passing_grid"]


# A run of structural rules: (the tables it reads, its rules' indices into rules.RULES).
Run = tuple[tuple[str, ...], tuple[int, ...]]


def _units(runs: Sequence[Run]) -> list[Run] | None:
    """The tables as consecutive units in FACTORS order, each with the rules that read them
    (a run's tables; a table no run reads alone, with none); None where a run's tables are
    not consecutive in FACTORS."""
    units: list[Run] = []
    owner = {f: run for run in runs for f in run[0]}
    i = 0
    while i < len(FACTORS):
        run = owner.get(FACTORS[i])
        tables = (FACTORS[i],) if run is None else tuple(f for f in FACTORS if f in run[0])
        if FACTORS[i:i + len(tables)] != tables:
            return None
        units.append((tables, () if run is None else run[1]))
        i += len(tables)
    return units


def passing_grid(p: Problem, s: Splits, live: np.ndarray, runs: Sequence[Run],
                 passes: Callable[[Problem, Candidates, tuple[int, ...]], np.ndarray]
                 ) -> tuple[Candidates, np.ndarray, np.ndarray] | None:
    """The rows of product(s, live) that pass every structural rule (`passes(p, c, rules)`,
    each run's (tables, rules) on its tables' tuples): (those rows, the mask of them over every row
    of product(s, live), each one's group as product's positions["group"]); None where the
    runs' tables are not consecutive or the states share a run (module docstring). Built unit
    by unit, outermost first, each level's columns repeated to the rows once at the end."""
    units = _units(runs)
    if units is None or units[0][0] != FACTORS[:1]:
        return None
    live = np.asarray(live, dtype=np.int64)
    size = {f: s.factors[f].size[live] for f in FACTORS}
    count = np.prod([size[f] for f in FACTORS], axis=0).astype(np.int64)
    inner = np.prod([size[f] for f in FACTORS[1:]], axis=0).astype(np.int64)  # per states row
    owner = np.arange(len(live), dtype=np.int64)
    within = np.zeros(len(live), dtype=np.int64)  # the row's position in its states row
    levels: list[tuple[np.ndarray, dict[str, np.ndarray]]] = [
        (owner, {k: s.cols[k].take(live) for k in SPLIT_COLUMNS})]
    shift = None
    n_good = []
    for tables, rules in units:
        tuples = np.prod([size[f] for f in tables], axis=0).astype(np.int64)
        ok = passes(p, product(s, live, tables)[0], rules) if rules else \
            np.ones(int(tuples.sum()), dtype=bool)
        at = np.flatnonzero(ok)   # each split's passing tuples, their index over the unit
        split_of = np.repeat(np.arange(len(live)), tuples).take(at)
        local = at - (np.cumsum(tuples) - tuples).take(split_of)
        n = np.bincount(split_of, minlength=len(live)).astype(np.int64)
        n_good.append(n)
        reps = n.take(owner)
        new = np.repeat(owner, reps)
        t = local.take(np.arange(len(new), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
                       + (np.cumsum(n) - n).take(new))
        owner, within = new, np.repeat(within, reps)
        if shift is None:   # the states: the row's states row
            shift = ((np.cumsum(count) - count) - (np.cumsum(inner) - inner)).take(owner) \
                + t * inner.take(owner)
        else:
            shift = np.repeat(shift, reps)
            within = within * tuples.take(owner) + t
        cols: dict[str, np.ndarray] = {}
        split = live.take(owner)
        for f in reversed(tables):
            z = size[f].take(owner)
            pos, t = (t % z, t // z) if f != tables[0] else (t, t)
            row = s.factors[f].start.take(split) + pos
            cols.update({name: col.take(row) for name, col in s.factors[f].cols.items()})
        levels.append((owner, cols))
    out: dict[str, np.ndarray] = {}
    for i, (at, cols) in enumerate(levels):   # each level's columns repeated to the rows
        rest = np.prod([n.take(at) for n in n_good[i:]], axis=0).astype(np.int64) \
            if i < len(n_good) else None
        out.update({k: v if rest is None else np.repeat(v, rest) for k, v in cols.items()})
    group = (np.cumsum(inner) - inner).take(owner) + within
    mask = np.zeros(int(count.sum()), dtype=bool)
    mask[group + shift] = True
    out["recompute"] = np.full(len(owner), s.first_recompute[0], dtype=np.int64)
    out["recompute_layers"] = np.full(len(owner), s.first_recompute[1], dtype=np.int64)
    return Candidates(**out), mask, group
