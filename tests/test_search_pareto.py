"""Pareto fronts (planner.search.pareto) against the definition, row by row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.search.pareto import dominated_by_any, pareto_front


def _brute(x: np.ndarray) -> np.ndarray:
    keep = np.zeros(len(x), dtype=bool)
    for i in range(len(x)):
        dominated = any((x[j] <= x[i]).all() and (x[j] < x[i]).any() for j in range(len(x)))
        duplicate = any((x[j] == x[i]).all() for j in range(i))
        keep[i] = not dominated and not duplicate
    return keep


def _brute_tolerant(x: np.ndarray, tol: float) -> np.ndarray:
    """Kept: exactly non-dominated, and no earlier-or-leaner row within (1 + tol) in time."""
    keep = _brute(x)
    for i in np.flatnonzero(keep):
        for j in range(len(x)):
            leaner = (x[j, 1:] <= x[i, 1:]).all() and (x[j, 1:] < x[i, 1:]).any()
            earlier_same = (x[j, 1:] == x[i, 1:]).all() and x[j, 0] < x[i, 0]
            if j != i and x[j, 0] <= x[i, 0] * (1 + tol) and (leaner or earlier_same):
                keep[i] = False
    return keep


ROWS = st.integers(0, 40).flatmap(lambda n: st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([64, 128, 256])),
    min_size=n, max_size=n))


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, three=st.booleans())
def test_front_is_the_definition(rows, three):
    x = np.array(rows, dtype=float).reshape(-1, 3)
    if not three:
        x = x[:, :2]
    np.testing.assert_array_equal(pareto_front(x), _brute(x))


@settings(max_examples=40, deadline=None)
@given(rows=ROWS)
def test_no_kept_row_is_dominated_and_every_dropped_row_is(rows):
    x = np.array(rows, dtype=float).reshape(-1, 3)
    keep = pareto_front(x)
    assert not dominated_by_any(x[keep], x).any()
    dropped = x[~keep]
    # a dropped row is dominated by a kept one, or equals one
    equal = (dropped[:, None, :] == x[keep][None, :, :]).all(axis=2).any(axis=1)
    assert (dominated_by_any(dropped, x[keep]) | equal).all()


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, three=st.booleans())
def test_a_time_tolerance_drops_rows_a_leaner_one_nearly_matches(rows, three):
    x = np.array(rows, dtype=float).reshape(-1, 3)
    x[:, 0] = 10.0 + x[:, 0] / 4  # steps 10.0 ... 11.5: a 10 % tolerance spans neighbours
    if not three:
        x = x[:, :2]
    keep = pareto_front(x, tolerance=0.1)
    np.testing.assert_array_equal(keep, _brute_tolerant(x, 0.1))
    assert not (keep & ~pareto_front(x)).any()  # a subset of the exact front


def test_a_worked_example():
    # (step s, peak GB): (10, 70) and (12, 50) trade time for memory; (12, 60) is dominated
    # by (12, 50); the second (10, 70) is the same point again.
    x = np.array([[10, 70], [12, 60], [12, 50], [10, 70], [15, 50], [20, 40]], dtype=float)
    assert pareto_front(x).tolist() == [True, False, True, False, False, True]
    # 10 s at 70 GB is within 25 % of 12 s at 50 GB: with that tolerance only the lean ones stay
    assert pareto_front(x, tolerance=0.25).tolist() == [False, False, True, False, False, True]


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, tol=st.sampled_from([0.0, 0.1]))
def test_one_gpu_count_front_is_the_definition(rows, tol):
    # a fit at one GPU count: pareto_front skips the cross-count pass, the result must not change
    x = np.array(rows, dtype=float).reshape(-1, 3)
    x[:, 0] = 10.0 + x[:, 0] / 4
    x[:, 2] = 256.0
    expect = _brute(x) if tol == 0.0 else _brute_tolerant(x, tol)
    np.testing.assert_array_equal(pareto_front(x, tolerance=tol), expect)
