"""Pareto fronts over candidate layouts: which rows no other row dominates.

Row a dominates row b when a is no worse in every objective and better in at least one (all
objectives minimised); the front is exact: no tolerance, so a row stays whenever nothing is
at least as good in every objective and better in one (a tolerance on step time drops rows in
a chain, each pushed off by a leaner one a little slower, until the list's fastest row is far
slower than a row it dropped). Rows equal in every objective are one point: the first of them (in the order given) stands for it. The 2-D front
is the classic sort-and-sweep (Kung, Luccio and Preparata, "On finding the maxima of a set of
vectors", JACM 1975). Pure numpy; O(n log n) per distinct value of the third objective (the
GPU count, a handful of values in a sweep) plus a quadratic pass over the fronts only.
"""

from __future__ import annotations

import numpy as np


# Rows above which an exact 2-D front first drops, bin by bin, the rows a faster row with less
# memory already beats (the sort is then over what is left); below it the sort alone is cheaper.
PREFILTER_ROWS = 4096
PREFILTER_BINS = 64


def _front_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices kept of (a, b): sort by b then a (stable), keep a row when every row before it
    (b no larger) has a larger a."""
    if len(a) > PREFILTER_ROWS:
        left = np.flatnonzero(_maybe_kept(a, b))
        if len(left) < len(a):
            return left[_front_2d(a[left], b[left])]
    order = np.lexsort((a, b))
    a_sorted = a[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], a_sorted[:-1])))
    return order[best_before > a_sorted]


def _maybe_kept(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows an exact (tolerance 0) 2-D front may keep: b cut into bins by value (a monotone
    map, so a lower bin means a strictly smaller b), a row is dropped when a lower bin holds a
    row with a no larger. Every row dropped is one the sort would drop (that row comes before
    it), and every row that beats a kept row is itself kept or beaten by a kept one."""
    lo, hi = float(b.min()), float(b.max())
    if not hi > lo or not np.isfinite(hi - lo):
        return np.ones(len(a), dtype=bool)
    bins = np.minimum(((b - lo) * (PREFILTER_BINS / (hi - lo))).astype(np.int64),
                      PREFILTER_BINS - 1)
    best = np.full(PREFILTER_BINS, np.inf)
    np.minimum.at(best, bins, a)
    below = np.concatenate(([np.inf], np.minimum.accumulate(best)[:-1]))
    return below.take(bins) > a


def pareto_front(objectives: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of `objectives` (rows × 2 or rows × 3,
    minimised). With three columns the third is treated as a
    small set of values (GPU counts): a 2-D front per value, then the fronts against each other."""
    x = np.asarray(objectives, dtype=float)
    n = len(x)
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    if x.shape[1] == 2:
        keep[_front_2d(x[:, 0], x[:, 1])] = True
        return keep
    if x.shape[1] != 3:
        raise ValueError("pareto_front takes two or three objectives")
    cand = []
    # The distinct GPU counts by sorting: np.unique would import numpy.ma (~20 ms) in a CLI run.
    counts = np.sort(x[:, 2])
    values = counts[np.concatenate(([True], counts[1:] != counts[:-1]))]
    for g in values:
        idx = np.flatnonzero(x[:, 2] == g)
        cand.append(idx[_front_2d(x[idx, 0], x[idx, 1])])
    idx = np.concatenate(cand)
    if len(values) == 1:
        # One GPU count: a row of its 2-D front is dominated by no other row of it, so the
        # quadratic pass would mark nothing.
        keep[idx] = True
        return keep
    keep[idx[~dominated_by_any(x[idx], x[idx])]] = True
    return keep


def dominated_by_any(objectives: np.ndarray, others: np.ndarray) -> np.ndarray:
    """For each row of `objectives`, True when some row of `others` dominates it (the check a
    test runs on a shown list against every valid row)."""
    a = np.asarray(objectives, dtype=float)[:, None, :]
    b = np.asarray(others, dtype=float)[None, :, :]
    return np.any(np.all(b <= a, axis=2) & np.any(b < a, axis=2), axis=1)


def surely_dominated(anchor_first: np.ndarray, anchor_second_most: np.ndarray,
                     first: np.ndarray, second_least: np.ndarray,
                     inverse: np.ndarray | None = None) -> np.ndarray:
    """For each row (first objective at least `first`, second at least `second_least`), True
    when some anchor (first objective exact, second at most `anchor_second_most`) dominates it
    whatever the rows' exact figures: t_a < t_r with u_a ≤ l_r, or t_a ≤ t_r with u_a < l_r (no
    worse in both, better in one). Rows whose `first` is not finite are never marked. Anchors
    sorted by the first objective with prefix minima of the second: two binary searches a row,
    or a value of `first` where the rows share them (`inverse`: each row's value in `first`)."""
    n = len(first) if inverse is None else len(inverse)
    if not len(anchor_first):
        return np.zeros(n, dtype=bool)
    order = np.argsort(anchor_first, kind="stable")
    t = np.asarray(anchor_first, dtype=float)[order]
    u = np.minimum.accumulate(np.asarray(anchor_second_most, dtype=float)[order])
    best = np.concatenate(([np.inf], u))  # best[j]: the leanest of the j fastest anchors
    below = best.take(np.searchsorted(t, first, side="left"))    # anchors with t_a < t_r
    at_most = best.take(np.searchsorted(t, first, side="right"))  # anchors with t_a ≤ t_r
    finite = np.isfinite(first)
    if inverse is not None:
        below, at_most, finite = below.take(inverse), at_most.take(inverse), finite.take(inverse)
    return finite & ((below <= second_least) | (at_most < second_least))
