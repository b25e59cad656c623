"""Pareto fronts over candidate layouts: which rows no other row dominates.

Row a dominates row b when a is no worse in every objective and better in at least one (all
objectives minimised). Rows equal in every objective are one point: the first of them (in the
order given) stands for it. The 2-D front is the classic sort-and-sweep (Kung, Luccio and
Preparata, "On finding the maxima of a set of vectors", JACM 1975). Pure numpy; O(n log n) per distinct value of the last objective
(the GPU count, a handful of values in a sweep) plus a quadratic pass over the fronts only.
"""

from __future__ import annotations

import numpy as np


def _front_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of the 2-objective front of (a, b), each point once: sort by a then b, keep a
    row when its b is below every b seen before it (the skyline sweep)."""
    order = np.lexsort((b, a))  # stable: equal points keep their given order
    bs = b[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], bs[:-1])))
    return order[bs < best_before]


def pareto_front(objectives: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of `objectives` (rows × 2 or rows × 3, minimised).
    With three columns the third is treated as a small set of values (GPU counts): a 2-D front
    per value, then the fronts are checked against each other."""
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
    for g in np.unique(x[:, 2]):
        idx = np.flatnonzero(x[:, 2] == g)
        cand.append(idx[_front_2d(x[idx, 0], x[idx, 1])])
    idx = np.concatenate(cand)
    f = x[idx]
    no_worse = (f[:, None, :] <= f[None, :, :]).all(axis=2)    # [i, j]: i no worse than j
    better = (f[:, None, :] < f[None, :, :]).any(axis=2)
    dominated = (no_worse & better).any(axis=0)
    keep[idx[~dominated]] = True
    return keep


def dominated_by_any(objectives: np.ndarray, others: np.ndarray) -> np.ndarray:
    """For each row of `objectives`, True when some row of `others` dominates it (the check a
    test runs on a shown list against every valid row)."""
    a = np.asarray(objectives, dtype=float)[:, None, :]
    b = np.asarray(others, dtype=float)[None, :, :]
    return ((b <= a).all(axis=2) & (b < a).any(axis=2)).any(axis=1)
