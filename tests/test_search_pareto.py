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


def test_no_tolerance_so_no_chain_of_near_ties_drops_the_fast_rows():
    # each row 5 % slower and 10 GB leaner than the one before: a 10 % tolerance used to drop
    # every row but the leanest (each pushed off by its slower neighbour), a 25 % slower #1
    x = np.array([[10.0 * 1.05 ** k, 80.0 - 10 * k] for k in range(6)])
    assert pareto_front(x).all()
    # a row 0.01 % faster but fuller is a point of the front too
    assert pareto_front(np.array([[10.0, 50.0], [9.999, 50.1]])).tolist() == [True, True]


def test_a_worked_example():
    # (step s, peak GB): (10, 70) and (12, 50) trade time for memory; (12, 60) is dominated
    # by (12, 50); the second (10, 70) is the same point again.
    x = np.array([[10, 70], [12, 60], [12, 50], [10, 70], [15, 50], [20, 40]], dtype=float)
    assert pareto_front(x).tolist() == [True, False, True, False, False, True]


@settings(max_examples=60, deadline=None)
@given(rows=ROWS)
def test_one_gpu_count_front_is_the_definition(rows):
    # a fit at one GPU count: pareto_front skips the cross-count pass, the result must not change
    x = np.array(rows, dtype=float).reshape(-1, 3)
    x[:, 0] = 10.0 + x[:, 0] / 4
    x[:, 2] = 256.0
    np.testing.assert_array_equal(pareto_front(x), _brute(x))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_large_front_takes_the_prefilter_and_is_still_exact(seed):
    # past PREFILTER_ROWS the bins drop rows first: the kept rows are the sort's alone
    rng = np.random.default_rng(seed)
    x = np.stack([rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)], axis=1).astype(float)
    keep = pareto_front(x)
    assert not dominated_by_any(x[keep], x).any()
    dropped = x[~keep]
    equal = (dropped[:, None, :] == x[keep][None, :, :]).all(axis=2).any(axis=1)
    assert (dominated_by_any(dropped, x[keep]) | equal).all()
