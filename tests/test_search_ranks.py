"""Rank groups in closed form (planner.engine.ranks) against a brute-force rank grid."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import ranks


def _grid_groups(sizes: dict[str, int], axis: str) -> np.ndarray:
    """Reference: build every rank, rank = t + TP·(c + CP·(d + DP·p)), and cut one axis out."""
    grid = np.arange(sizes["tp"] * sizes["cp"] * sizes["dp"] * sizes["pp"]).reshape(
        sizes["pp"], sizes["dp"], sizes["cp"], sizes["tp"])
    dim = {"pp": 0, "dp": 1, "cp": 2, "tp": 3}[axis]
    return np.moveaxis(grid, dim, -1).reshape(-1, grid.shape[dim])


def _spanned(groups: np.ndarray, g: int) -> int:
    return max(len(np.unique(row // g)) for row in groups)


SIZES = st.fixed_dictionaries({a: st.integers(1, 6) for a in ranks.AXES})


@settings(max_examples=150, deadline=None)
@given(sizes=SIZES, g=st.integers(1, 12), axis=st.sampled_from(ranks.AXES))
def test_closed_form_matches_the_grid(sizes, g, axis):
    ref = _grid_groups(sizes, axis)
    assert ranks.group_count(sizes, axis) == ref.shape[0]
    np.testing.assert_array_equal(ranks.group_ranks(sizes, axis, count=ref.shape[0]), ref)
    assert ranks.max_nodes_spanned(sizes, axis, g) == _spanned(ref, g)


@settings(max_examples=50, deadline=None)
@given(sizes=SIZES, axis=st.sampled_from(ranks.AXES), first=st.integers(0, 40),
       count=st.integers(0, 10), limit=st.integers(1, 8))
def test_a_window_of_groups_is_a_slice_of_the_grid(sizes, axis, first, count, limit):
    ref = _grid_groups(sizes, axis)[first:first + count, :limit]
    got = ranks.group_ranks(sizes, axis, first=first, count=count, limit=limit)
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)


def test_megatron_405b_layout_groups():
    # Llama 3 405B at 16,384 GPUs: TP8 × CP1 × DP128 × PP16 on 8-GPU nodes. TP stays in a node;
    # DP ranks are 8 apart (one per node); a PP group strides TP·DP = 1,024 ranks.
    sizes = {"tp": 8, "cp": 1, "dp": 128, "pp": 16}
    assert [ranks.max_nodes_spanned(sizes, a, 8) for a in ranks.AXES] == [1, 1, 128, 16]
    assert ranks.group_ranks(sizes, "pp", limit=3)[0].tolist() == [0, 1024, 2048]
    assert ranks.group_count(sizes, "dp") == 128


def test_ten_million_gpus_without_the_grid():
    sizes = {"tp": 8, "cp": 1, "dp": 312_500, "pp": 4}
    assert ranks.group_count(sizes, "tp") == 1_250_000
    assert ranks.max_nodes_spanned(sizes, "tp", 8) == 1
    assert ranks.max_nodes_spanned(sizes, "dp", 8) == 312_500
    assert ranks.group_count(sizes, "dp") == 32
    # DP group 9 = (PP 1, TP 1): starts at 1 + 2,500,000 and steps by TP = 8.
    rows = ranks.group_ranks(sizes, "dp", first=9, count=2, limit=2)
    assert rows.tolist() == [[2_500_001, 2_500_009], [2_500_002, 2_500_010]]


def test_tp_not_dividing_the_node_spans_two_nodes():
    # TP3 on 8-GPU nodes: the group 6,7,8 straddles nodes 0 and 1.
    assert ranks.max_nodes_spanned({"tp": 3, "cp": 1, "dp": 8, "pp": 1}, "tp", 8) == 2
