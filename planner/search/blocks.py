"""The layout space in blocks, each split's structural verdict counted without its rows.

The structural rules read the split (TP, CP, PP, DP, EP) and some of its knob tables
(space.FACTORS): rules.RuleSpec.reads names them. Taken in table order, the rules fall into
runs reading the same tables; where no two runs read a table in common (as the rules are
written), a row's first failing rule is in the first run it fails, and the count of rows of a
split that first fail rule k of run j is exact arithmetic on the tables alone:

    count_k = Π_{i<j} pass_i · fail_{j,k} · Π_{tables no run up to j reads} size

(pass_i: tuples of run i's tables passing all its rules; fail_{j,k}: tuples of run j's tables
whose first failure there is k). A run is evaluated only on the splits that passed the runs
before it. Splits with no valid row are never built; their rows are counted by rule, and the
first candidate of a rule (the example a rejection table shows) is built from the one split
that holds it. Were two runs ever to read a common table, every rule is one run over all
tables (every row built: exact, only slower).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.errors import InputError
from planner.evaluation.rules import RULE_NAMES, RULES, Predicate
from planner.search.grid import passing_grid
from planner.search.space import (BLOCK_GROWTH, BLOCK_ROWS, FACTORS, SearchSpace, Splits,
                                  block_ends, empty, product, recomputes, split_table)

# (left-out rule, its rows with the recompute knob, the rule's first candidate or None)
Left = list[tuple[int, int, Candidates | None]]

# The structurally valid candidates one search prices, at most: the cost model prices ~1-2 M per
# CPU second after its floors (benchmarks/fit_speed.py; 11.0 M for Mixtral on 8,192 GPUs with a
# 10^9-sequence batch: 6.5 CPU s, 354 MB, benchmarks/bounds.py), so this bounds a search near
# 10 s. Only huge global batches reach it (Llama 3 70B on 10^7 GPUs with a 10^9-sequence batch
# has 7.3 M; 8,648,640 GPUs with 518,918,400 sequences 53.7 M: every divisor a micro-batch), and
# the search then says so up front instead of running for minutes. It is the budget of a whole
# fit: its GPU counts (search.sweep) and its follow-up searches (what would fit, a bigger batch)
# share it (Budget).
MAX_PRICED = 16_000_000
# With --all (search(dominated=True)) every valid row is kept and evaluated in full at the end,
# so the bound is memory, not time: ~0.9 KB of arrays held per row (evaluate.Evaluation and its
# candidates), ~1.4 KB at the evaluation's peak (measured as the peak RSS of one child,
# benchmarks/bounds.py): Mixtral 8x7B on 256 GPUs, 568,386 layouts: 793 MB and 2.6 CPU s;
# on 8,192 GPUs on Megatron, 1.09 M: 1.76 GB and 6.5 CPU s. 600,000 keeps one fit --all
# under ~0.9 GB and a few CPU s, and admits the ordinary questions (70B on 1,024 GPUs: 218,865).
MAX_PRICED_ALL = 600_000


def price_limit(dominated: bool) -> int:
    """The structurally valid candidates one fit prices at most: MAX_PRICED_ALL where it keeps
    every valid row (--all), MAX_PRICED where it keeps the front."""
    return MAX_PRICED_ALL if dominated else MAX_PRICED


class SpaceTooLarge(InputError):
    """A search refused before it starts: more structurally valid candidates than its bound."""


NARROW = "fix some of --tp, --pp, --cp, --ep, --zero, --micro-batch"


def check_priced(priced: int, limit: int | None, dominated: bool = False,
                 counts: int = 1) -> None:
    """Refuse a space with more than `limit` structurally valid candidates (the search's own
    count, verdicts; summed over a sweep's `counts` GPU counts, all counted before any is
    priced), naming the options that narrow it; `dominated`: the search keeps every valid row
    (--all), whose bound is price_limit(True)."""
    if limit is None or priced <= limit:
        return
    full, one = price_limit(dominated), "one fit --all keeps" if dominated else "one search prices"
    bound = (f"the {limit:,} {one}" if limit >= full else
             f"the {limit:,} left of the {full:,} {one.replace('search', 'fit')} over all its "
             "GPU counts")
    if counts > 1:   # every count counted up front, none priced yet
        bound = f"the {limit:,} {one.replace('search', 'fit')}"
    keep, drop = (" and keep (--all keeps every valid one)", "drop --all (the front alone is "
                  "kept), ") if dominated else ("", "")
    over = f" over its {counts} GPU counts" if counts > 1 else ""
    raise SpaceTooLarge("layout space", f"{priced:,} structurally valid layouts to price{keep}"
                        f"{over}, over {bound}; {drop}{NARROW}, or ask for a smaller "
                        "--global-batch (or fewer GPU counts)")


def space_priced(p: Problem, space: SearchSpace) -> int:
    """The structurally valid candidates a search of `space` prices (layout_blocks' count,
    checked against its limit): verdicts' arithmetic on the knob tables, no row built (a few
    ms, what a sweep sums over its GPU counts before it prices any)."""
    p = p.resolved()
    s = split_table(p, space)
    return _priced(verdicts(p, s)[1], len(recomputes(p, space))) if len(s) else 0


def _priced(valid: np.ndarray, n_rec: int) -> int:
    """Structurally valid rows: per split the rows passing every structural rule (verdicts),
    each crossed with the recompute knob's n_rec rows."""
    return int(valid.sum()) * n_rec


@dataclass
class Budget:
    """Structurally valid candidates a fit's follow-up searches may still price (what would fit,
    a bigger batch): what its own search left of MAX_PRICED. `short`: a search stopped (or
    was not run) for want of it."""

    left: int
    short: bool = False

    def take(self, rows: int) -> bool:
        """Spend `rows` if that many are left (True); else spend nothing, note it (False)."""
        if rows > self.left:
            self.short = True
            return False
        self.left -= rows
        return True


@dataclass(frozen=True)
class Run:
    """Consecutive structural rules (indices into RULES) reading the same knob tables."""

    rules: tuple[int, ...]
    reads: tuple[str, ...]


def rule_runs() -> tuple[Run, ...]:
    """The structural rules in table order as runs, a rule joining the run before it where
    their tables are the same or overlap; one run over every table where two runs would read a
    table in common."""
    runs: list[Run] = []
    for i, r in enumerate(RULES):
        if r.predicate is None:
            continue
        if runs and (runs[-1].reads == r.reads or set(runs[-1].reads) & set(r.reads)):
            reads = tuple(f for f in FACTORS if f in runs[-1].reads or f in r.reads)
            runs[-1] = Run(runs[-1].rules + (i,), reads)
        else:
            runs.append(Run((i,), r.reads))
    seen = [t for run in runs for t in run.reads]
    if len(seen) != len(set(seen)):
        return (Run(tuple(i for run in runs for i in run.rules), FACTORS),)
    return tuple(runs)


RUNS = rule_runs()
GRID_RUNS = tuple((run.reads, run.rules) for run in RUNS)  # as grid.passing_grid reads them
# The structural rules' predicates by index into RULES (fits-in-memory has none).
PREDICATES: dict[int, Predicate] = {i: r.predicate for i, r in enumerate(RULES)
                                    if r.predicate is not None}


def first_failures(p: Problem, c: Candidates, rules: tuple[int, ...]) -> np.ndarray:
    """Per row of c: the first of `rules` (indices into RULES) it fails, -1 where it passes
    them all."""
    m = p.global_batch / (c.mb * c.dp)
    first = np.full(len(c), -1, dtype=np.int64)
    for i in reversed(rules):  # the earliest failing rule is written last
        ok = np.asarray(PREDICATES[i](p, c, m), dtype=bool) & np.ones(len(c), dtype=bool)
        first = np.where(ok, first, i)
    return first


def passes(p: Problem, c: Candidates, rules: tuple[int, ...]) -> np.ndarray:
    """Per row of c: whether it passes every one of `rules` (first_failures(...) < 0, without
    tracking which rule fails first)."""
    m = p.global_batch / (c.mb * c.dp)
    ok = np.ones(len(c), dtype=bool)
    for i in rules:
        ok &= np.asarray(PREDICATES[i](p, c, m), dtype=bool)
    return ok


def verdicts(p: Problem, s: Splits) -> tuple[np.ndarray, np.ndarray]:
    """Per split: rows (before the recompute knob) first failing each rule, (splits × rules),
    and rows passing every structural rule; by the run formula above, a run's tuples built
    for at most about BLOCK_ROWS splits' worth at a time (memory bounded)."""
    n, k = len(s), len(RULE_NAMES)
    counts = np.zeros((n, k), dtype=np.int64)
    passing = np.ones(n, dtype=np.int64)   # Π pass_i over the runs so far
    read: set[str] = set()
    for run in RUNS:
        alive = np.flatnonzero(passing > 0)
        read |= set(run.reads)
        free = [f for f in FACTORS if f not in read]
        for a, b in block_ends(_sizes(s, alive, list(run.reads)), BLOCK_ROWS):
            idx = alive[a:b]
            c, owner = product(s, idx, run.reads)
            first = first_failures(p, c, run.rules)
            fails = np.bincount(owner * k + np.maximum(first, 0), weights=first >= 0,
                                minlength=len(idx) * k).reshape(len(idx), k).astype(np.int64)
            counts[idx] += passing[idx, None] * fails * _sizes(s, idx, free)[:, None]
            passing[idx] *= np.bincount(owner, weights=first < 0,
                                        minlength=len(idx)).astype(np.int64)
    return counts, passing * _sizes(s, np.arange(n), [f for f in FACTORS if f not in read])


def _sizes(s: Splits, idx: np.ndarray, tables: list[str]) -> np.ndarray:
    out = np.ones(len(idx), dtype=np.int64)
    for f in tables:
        out *= s.factors[f].size[idx]
    return out


def _in_valid_splits(s: Splits, live: np.ndarray, valid: np.ndarray,
                     grid: tuple[Candidates, np.ndarray, np.ndarray]
                     ) -> tuple[Candidates, np.ndarray, np.ndarray]:
    """passing_grid's (layouts, mask, groups) less the rows of a split built though none of
    its rows is valid (a rule reading the split alone fails it: the grid reads the runs of
    knob tables only). Only where every split is built (the search's reference tests)."""
    lay, mask, group = grid
    dead = valid[live] == 0
    if not dead.any():
        return grid
    alive = np.repeat(~dead, s.sizes()[live])   # per row of product(s, live), split-major
    keep = np.flatnonzero(alive[mask])
    return lay.take(keep), mask & alive, group.take(keep)


def built_splits(valid: np.ndarray) -> np.ndarray:
    """The splits whose rows are built: those with a structurally valid row."""
    return valid > 0


def structural_passes(p: Problem, s: Splits, live: np.ndarray, owner: np.ndarray,
                      positions: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of product(s, live) (each row's split in live and row of each table,
    `positions`): whether it passes every structural rule, passes() on every row without
    evaluating a rule on a row. A run's rules read the split and the run's tables alone (the
    formula above rests on it), so each run is evaluated on its tables' tuples of the splits
    (product(s, live, the run's tables)) and a row takes its tuple's verdict; a run reading
    no table passes on every row of a split that has a structurally valid row."""
    ok = np.ones(len(owner), dtype=bool)
    for run in RUNS:
        tables = tuple(f for f in FACTORS if f in run.reads)
        if not tables:
            continue
        good = passes(p, product(s, live, tables)[0], run.rules)
        sizes = [s.factors[f].size[live] for f in tables]
        count = np.prod(sizes, axis=0).astype(np.int64)
        row = np.zeros(len(owner), dtype=np.int64)
        for f, size in zip(tables, sizes):   # the tuple's row in C order over `tables`
            row = row * size.take(owner) + positions[f]
        ok &= good.take((np.cumsum(count) - count).take(owner) + row)
    return ok


def _example(p: Problem, s: Splits, split: int, rule: int) -> Candidates:
    """The first row of a split whose first failing structural rule is `rule`."""
    c, _ = product(s, np.array([split]))
    first = first_failures(p, c, tuple(i for run in RUNS for i in run.rules))
    return c.take(np.flatnonzero(first == rule)[:1])


def layout_blocks(p: Problem, space: SearchSpace, rows: int | None = None,
                  limit: int | None = None, dominated: bool = False
                  ) -> Iterator[tuple[Candidates, Left, np.ndarray, np.ndarray]]:
    """space.candidate_blocks before the recompute knob is crossed (every row holds the first
    recompute row; crossing.with_recomputes crosses it), in the same blocks, with the splits
    that have no structurally valid row left out: per block (its layouts, Left: per rule the
    rows of the splits left out since the block before, with the rule's first candidate where
    it lies in one of them, per rule the layouts' rows first failing it, from verdicts, and
    per layout whether it passes every structural rule, structural_passes).
    Consecutive blocks of left-out splits only come as one. With
    `limit`, a space of more structurally valid candidates is refused before any is built
    (`dominated`: the search keeps every valid row, check_priced's wording)."""
    for lay, left, counts, ok, *_ in _blocks(p, space, rows, limit, dominated, False):
        yield lay, left, counts, ok


# A block's layouts (all, or those passing every structural rule), Left, the counts by rule,
# which layouts pass, the block's first splits built on demand (every layout, up to the first
# split where each of some rules fails; all of them for none), and each layout's group
# (space.product: the layouts alike but in their states share one).
Block = tuple[Candidates, Left, np.ndarray, np.ndarray, Callable[[Sequence[int]], Candidates],
              np.ndarray]


def passing_blocks(p: Problem, space: SearchSpace, limit: int | None = None,
                   dominated: bool = False) -> Iterator[Block]:
    """layout_blocks with only the layouts that pass every structural rule built (the first
    item: what the search prices; about three in four of DeepSeek-V3's on 2,048 GPUs), the
    block's layouts built on demand (the fifth item: for a rule's first example)."""
    return _blocks(p, space, None, limit, dominated, True)


def _blocks(p: Problem, space: SearchSpace, rows: int | None, limit: int | None,
            dominated: bool, passing: bool) -> Iterator[Block]:
    """layout_blocks' blocks, each with the whole block's layouts on demand; with `passing`
    only those that pass are built (grid.passing_grid; where the runs form no grid,
    space.product's `keep`)."""
    rows = rows or BLOCK_ROWS
    n_rec = len(recomputes(p, space))
    s = split_table(p, space)
    if not len(s):   # no split at all (fixed degrees that do not divide the GPUs)
        return
    counts, valid = verdicts(p, s)
    check_priced(_priced(valid, n_rec), limit, dominated)
    built = built_splits(valid)
    unbuilt = np.concatenate([np.zeros((1, counts.shape[1]), dtype=np.int64),
                              np.cumsum(counts * ~built[:, None], axis=0)])
    any_row = counts > 0
    first = np.where(any_row.any(axis=0), np.argmax(any_row, axis=0), -1)
    ex = {int(r): int(first[r]) for r in np.flatnonzero(first >= 0) if not built[first[r]]}
    done = 0
    for a, b in block_ends(s.sizes() * n_rec, rows, BLOCK_GROWTH):
        live = np.flatnonzero(built[a:b]) + a
        if len(live) or (b == len(s) and done < b):
            left = [(r, int(x) * n_rec, _example(p, s, ex[r], r) if done <= ex.get(r, -1) < b
                     else None) for r, x in enumerate(unbuilt[b] - unbuilt[done]) if x]
            if not len(live):
                none = np.zeros(0, dtype=bool)
                yield (empty(), left, counts[live].sum(axis=0), none, lambda rules: empty(),
                       none.astype(np.int64))
                done = b
                continue
            found: list[np.ndarray] = []  # which layouts pass
            positions: dict[str, np.ndarray] = {}
            grid = passing_grid(p, s, live, GRID_RUNS, passes) if passing else None

            def whole(rules: Sequence[int], live: np.ndarray = live) -> Candidates:
                # the block's splits up to the first where each of `rules` fails, all built
                upto = 1 + max((int(np.argmax(counts[live, r] > 0)) for r in rules), default=-1)
                return product(s, live[:upto or len(live)])[0]
            if grid is not None:
                lay, mask, positions["group"] = _in_valid_splits(s, live, valid, grid)
                found.append(mask)
            elif passing:
                def keep(owner: np.ndarray, at: dict[str, np.ndarray],
                         live: np.ndarray = live) -> np.ndarray:
                    found.append(structural_passes(p, s, live, owner, at))
                    return found[0]
                lay = product(s, live, positions=positions, keep=keep)[0]
            else:
                lay, owner = product(s, live, positions=positions)
                found.append(structural_passes(p, s, live, owner, positions))
            yield lay, left, counts[live].sum(axis=0), found[0], whole, positions["group"]
            done = b
