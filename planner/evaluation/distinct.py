"""A sub-result computed once per distinct tuple of the candidate columns it depends on.

The search's candidates cross every knob, but each part of the cost model reads only some of
them (a layer's activations: TP, SP, CP and micro-batch; the ZeRO states: the split and the
sharding), so a batch of ~130,000 candidates holds a few thousand distinct tuples per part. A
part runs on one representative row per tuple and its arrays are gathered back to every row:
the same arithmetic on the same numbers, so the results are bit-for-bit those of the full
arrays (elementwise IEEE operations do not depend on their neighbours).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np


T = TypeVar("T")

# Below this share of distinct rows the gather pays for itself; above it the part runs on the
# rows as they are (a single-row estimate never pays for the key).
WORTH_IT = 0.5
# A wide column is numbered by its runs (distinct_rows) when it has fewer than one run per this
# many rows; more runs than that would split its tuples too finely to pay, so it is sorted.
RUNS_SHARE = 8


def _dense(key: np.ndarray, radix: int) -> tuple[np.ndarray, int]:
    """key (values in [0, radix)) renumbered 0, 1, … in key order, and the count of values."""
    number = np.cumsum(np.bincount(key, minlength=radix) > 0) - 1
    return number.take(key), int(number[-1]) + 1


def _runs(col: np.ndarray, limit: int) -> tuple[np.ndarray, int] | None:
    """Each row's run of equal values in col (0, 1, … down the rows) and the count of runs,
    or None when there are more than `limit`."""
    start = np.flatnonzero(col[1:] != col[:-1])
    if len(start) >= limit:
        return None
    code = np.zeros(len(col), dtype=np.int64)
    code[start + 1] = 1
    return np.cumsum(code), len(start) + 1


def distinct_rows(cols: Sequence[np.ndarray], at_most: int | None = None, runs: bool = False
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """(a row of each distinct tuple, each row's tuple index) for parallel integer columns.

    The key is mixed-radix over each column's range, numbered densely (a table over the key's
    range instead of a sort) whenever the range would outgrow a few times the row count;
    tuples come in key order, as np.unique gives them, and any row of a tuple stands for it
    (its rows are alike in every named column). None when there are more than `at_most`.
    With `runs`, a column too wide for a table is numbered by its runs of equal values where
    they are few (the search's candidates come split by split: a split's DP is one run)
    instead of sorted: a tuple may then be split over more than one index, which a part
    computed once per index (on_distinct) does not mind."""
    n = len(cols[0])
    limit = 4 * n + 1024
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for col in cols:
        lo, hi = int(col.min()), int(col.max())
        span = hi - lo + 1
        if span == 1:
            continue
        code = col - lo if lo else col
        if span > limit:
            found = _runs(code, n // RUNS_SHARE + 1) if runs else None
            if found is None:
                _, code = np.unique(code, return_inverse=True)
                found = code.reshape(-1), int(code.max()) + 1
            code, span = found
        if radix * span > limit:
            key, radix = _dense(key, radix)
            if at_most is not None and radix > at_most:
                return None
        if radix * span > limit:  # a wide column of few values (a shard group): its own
            code, span = _dense(code, span)
        key = code if radix == 1 else key * span + code  # (code is never written to)
        radix *= span
        if radix > limit:  # both large: a sort, rare
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1)
            radix = int(key.max()) + 1
    inverse, count = _dense(key, radix)
    if at_most is not None and count > at_most:
        return None
    return _first_rows(inverse, count), inverse


def _first_rows(inverse: np.ndarray, count: int) -> np.ndarray:
    """A row of each of `count` tuples, from each row's tuple index."""
    rep = np.empty(count, dtype=np.int64)
    rep[inverse] = np.arange(len(inverse), dtype=np.int64)
    return rep


def _leaves(tree: Any, n: int, found: list[np.ndarray]) -> None:
    """Append tree's arrays of length n to found, in the order _rebuild takes them back."""
    if isinstance(tree, np.ndarray):
        if tree.ndim == 1 and len(tree) == n:
            found.append(tree)
    elif is_record(tree):
        for name in field_names(type(tree)):
            _leaves(getattr(tree, name), n, found)
    elif isinstance(tree, dict):
        for v in tree.values():
            _leaves(v, n, found)
    elif isinstance(tree, (tuple, list)):
        for v in tree:
            _leaves(v, n, found)


def _rebuild(tree: Any, n: int, new: Iterator[np.ndarray]) -> Any:
    """tree with its arrays of length n replaced, in _leaves order, by the next of `new`."""
    if isinstance(tree, np.ndarray):
        return next(new) if tree.ndim == 1 and len(tree) == n else tree
    if is_record(tree):
        return replaced(tree, {name: _rebuild(getattr(tree, name), n, new)
                               for name in field_names(type(tree))})
    if isinstance(tree, dict):
        return {k: _rebuild(v, n, new) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_rebuild(v, n, new) for v in tree)
    return tree


def is_record(obj: Any) -> bool:
    """Whether obj is a record (a dataclass instance)."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """A record class's field names, in order (read once per class: ~300 rebuilds a search)."""
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return _FIELD_NAMES[cls]


def replaced(obj: T, values: dict[str, Any]) -> T:
    """obj with its fields set to `values`, which are obj's own values or arrays in place of its
    arrays: nothing for the constructor to fill in or check, so it is not run (its per-field
    loop was ~4 % of a search, on ~300 rebuilt values and row subsets)."""
    out = object.__new__(type(obj))
    out.__dict__.update(values)
    return out


def gather(tree: Any, idx: np.ndarray, n: int) -> Any:
    """tree with every array of length n indexed by idx (records, dicts, tuples and lists
    walked; scalars and other objects as they are). One ndarray.take per array: stacking them
    into one matrix first copies every array once more and measured 2-3x slower."""
    found: list[np.ndarray] = []
    _leaves(tree, n, found)
    return _rebuild(tree, n, iter([a.take(idx) for a in found]))


@dataclass(frozen=True, kw_only=True)
class Part:
    """A sub-result on one row per distinct tuple (`tree`, arrays of `size` rows) and each
    candidate's row in it (`index`; None: the tree holds the candidates' own rows)."""

    tree: Any
    index: np.ndarray | None
    size: int

    def rows(self, idx: np.ndarray | None = None, pick: Callable[[Any], Any] | None = None
             ) -> Any:
        """The tree (or `pick` of it) gathered to the candidates idx (None: every candidate)."""
        tree = self.tree if pick is None else pick(self.tree)
        if idx is None:
            return tree if self.index is None else gather(tree, self.index, self.size)
        return gather(tree, idx if self.index is None else self.index.take(idx), self.size)


    def take(self, idx: np.ndarray) -> "Part":
        """The part of the candidates idx (the tree as it is, the index narrowed)."""
        return Part(tree=self.tree, index=idx if self.index is None else self.index.take(idx),
                    size=self.size)


def concat_parts(parts: Sequence[Part | None]) -> Part | None:
    """The parts of consecutive candidate sets as one: each distinct tree (by identity, the
    parts of one scan share theirs) once, in first-seen order, and each part's index offset by
    the sizes of the trees before its own; parts of no candidates are left out. None where one
    is None or holds its candidates' own rows (index None: its tree is as large as they are)
    or the trees' arrays do not pair up."""
    live: list[tuple[Part, np.ndarray]] = []  # (part, its index) of each part of candidates
    for q in parts:
        if q is None or q.index is None:
            return None
        if len(q.index):
            live.append((q, q.index))
    if not live:
        return None
    trees: dict[int, tuple[Part, int]] = {}  # id(tree) → (its first part, its offset)
    size = 0
    for q, _ in live:
        if id(q.tree) not in trees:
            trees[id(q.tree)] = (q, size)
            size += q.size
    index = np.concatenate([i + trees[id(q.tree)][1] for q, i in live])
    if len(trees) == 1:  # one scan's part: only the indices
        return Part(tree=live[0][0].tree, index=index, size=size)
    found: list[list[np.ndarray]] = []
    for q, _ in trees.values():
        found.append([])
        _leaves(q.tree, q.size, found[-1])
    if len({len(f) for f in found}) != 1:
        return None
    first = next(iter(trees.values()))[0]
    tree = _rebuild(first.tree, first.size, iter([np.concatenate(arrays) for arrays in zip(*found)]))
    return Part(tree=tree, index=index, size=size)


def _representatives(c: Any, names: Sequence[str],
                     groups: tuple[np.ndarray, int] | None = None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """(first row of each distinct tuple of the named columns, each row's tuple), from
    `groups` where the caller has them; None where fewer than two rows or most rows are
    distinct (computing on the rows themselves is then cheaper)."""
    n = len(c)
    if n < 2:
        return None
    if groups is not None:
        inverse, count = _dense(groups[0], groups[1])
        return None if count > int(WORTH_IT * n) else (_first_rows(inverse, count), inverse)
    return distinct_rows([getattr(c, k) for k in names], at_most=int(WORTH_IT * n), runs=True)


def distinct_part(c: Any, names: Sequence[str], part: Callable[..., Any],
                  groups: tuple[np.ndarray, int] | None = None) -> Part:
    """part(c) computed on one row per distinct tuple of the named columns of c (or on c itself
    where most rows are distinct), not yet gathered: a caller that needs only some rows, or
    only some of the arrays, gathers those (Part.rows). `groups` as on_distinct's."""
    n = len(c)
    found = _representatives(c, names, groups)
    if found is None:
        return Part(tree=part(c), index=None, size=n)
    first, inverse = found
    return Part(tree=part(c.take(first)), index=inverse, size=len(first))


def on_distinct(c: Any, names: Sequence[str], part: Callable[..., Any],
                rows: bool = False, groups: tuple[np.ndarray, int] | None = None) -> Any:
    """part(c) computed on one row per distinct tuple of the named columns of c and gathered
    back to every row (or on c itself where most rows are distinct). With `rows` the part is
    called as part(sub, idx), idx being the rows of c that sub holds (to index other per-row
    arrays that depend on the named columns alone). `groups` (each row's group in [0, count),
    the count) stands for the tuples where the caller knows rows alike in those columns."""
    call = (lambda sub, idx: part(sub, idx)) if rows else (lambda sub, idx: part(sub))
    found = _representatives(c, names, groups)
    if found is None:
        return call(c, np.arange(len(c)))
    first, inverse = found
    return gather(call(c.take(first), first), inverse, len(first))


def crossed_part(c: Any, outer: Any, k: int, names: Sequence[str], part: Callable[..., Any],
                 inner: Sequence[str] = (), groups: tuple[np.ndarray, int] | None = None
                 ) -> Part:
    """distinct_part(c, names + inner, part) where c is `outer` crossed with k inner rows (row
    i·k + j: outer row i with inner row j, as crossing.with_recomputes lays them out) and `names`
    are columns of outer: the tuples are found on outer's rows, k times fewer. With `inner`
    (columns the inner rows set) a tuple is an outer tuple at one inner position (positions
    alike in `inner` stay apart, which a part computed once per index does not mind).
    `groups` (outer's rows numbered alike by their named tuples, the count) where known."""
    found = _representatives(outer, names, groups)
    if found is None:
        return distinct_part(c, tuple(names) + tuple(inner), part)
    first, inverse = found
    if not inner:
        return Part(tree=part(c.take(first * k)), index=inverse.repeat(k), size=len(first))
    at = np.arange(k, dtype=np.int64)
    return Part(tree=part(c.take((first[:, None] * k + at).reshape(-1))),
                index=(inverse[:, None] * k + at).reshape(-1), size=len(first) * k)
