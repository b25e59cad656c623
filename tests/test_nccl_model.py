"""NCCL cost model (planner/engine/nccl.py): seeds from NCCL's constants and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import nccl

NV, NIC = 400e9, 45e9


def test_ring_seed_inside_one_node():
    # 8 ranks, 1 GB all-reduce: 8.4 µs + 14 × 3.4 µs + 2·7/8·1e9 / 400e9.
    t, algo = nccl.collective("all-reduce", 1e9, 8, 8, NV, NIC)
    assert t == pytest.approx(8.4e-6 + 14 * 3.4e-6 + 1.75e9 / NV)
    assert nccl.ALGO_NAMES[int(algo)] == "ring"


def test_all_gather_and_reduce_scatter_are_ring_only_across_nodes():
    for kind in ("all-gather", "reduce-scatter"):
        _, algo = nccl.collective(kind, 1e9, np.array([16, 256, 4096]), 8, NV, NIC, nvls=True)
        assert np.all(algo == nccl.ALGO_RING)


def test_one_gpu_per_node_ring_runs_at_one_nic_and_pays_network_steps():
    # A DP ring with stride 8 (one member per node) across 64 nodes: one NIC, 126 network steps.
    k1 = nccl.ring_time("all-reduce", 160e6, 64, 1, NV, NIC)
    k8 = nccl.ring_time("all-reduce", 160e6, 64, 8, NV, NIC)
    assert k1 > 5 * k8
    lat = nccl.ring_latency("all-reduce", 64, 1)
    assert lat == pytest.approx(1.4 * (8.4e-6 + 126 * 14e-6))
    bw_only = 2 * 63 / 64 * 160e6 / NIC
    assert k1 / bw_only > 1.3   # a quarter of the time is step latency at a 160 MB bucket


def test_tree_wins_at_many_nodes_small_messages():
    _, algo = nccl.collective("all-reduce", 4e6, 2048, 8, NV, NIC)
    assert nccl.ALGO_NAMES[int(algo)] in ("tree", "nvls-tree")


def test_nvls_tree_halves_network_bytes_for_two_nodes():
    # 2 nodes × 8: in-switch reduce-scatter leaves M/8 per GPU to cross once; a ring crosses ~2M/8.
    ring = nccl.ring_time("all-reduce", 16e9, 16, 8, NV, NIC)
    nvls = nccl.nvls_tree_time(16e9, 16, 8, NV, NIC)
    assert nvls < ring


def test_tree_correction_table():
    assert nccl.tree_correction(64) == 0.9
    assert nccl.tree_correction(2**26) == 0.8   # 64 MiB: log2(2^26 / 64) = 20, Simple row
    assert nccl.tree_correction(2**40) == 1.0


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["all-reduce", "all-gather", "reduce-scatter"]),
       m=st.floats(1e4, 1e11), n=st.integers(2, 4096), k=st.sampled_from([1, 2, 4, 8, 72]),
       factor=st.floats(1.0, 8.0), nvls=st.booleans())
def test_more_bytes_or_slower_links_never_faster(kind, m, n, k, factor, nvls):
    t, _ = nccl.collective(kind, m, n, k, NV, NIC, nvls=nvls)
    assert nccl.collective(kind, m * factor, n, k, NV, NIC, nvls=nvls)[0] >= t * (1 - 1e-12)
    assert nccl.collective(kind, m, n, k, NV, NIC / factor, nvls=nvls)[0] >= t * (1 - 1e-12)
    assert nccl.collective(kind, m, n, k, NV / factor, NIC, nvls=nvls)[0] >= t * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(m=st.floats(1e4, 1e11), n=st.integers(2, 4096), k=st.sampled_from([2, 4, 8]))
def test_busbw_never_exceeds_the_links(m, n, k):
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        t, algo = nccl.collective(kind, m, n, k, NV, NIC)
        if int(algo) == nccl.ALGO_RING:
            assert nccl.busbw_of(kind, m, n, t) <= NV * (1 + 1e-9)
