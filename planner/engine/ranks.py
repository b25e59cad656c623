"""Rank placement in Megatron's order: TP fastest-varying, then CP, then DP, then PP, so each
TP group is a block of consecutive ranks inside one node (Megatron-LM parallel_state).

rank = t + TP·(c + CP·(d + DP·p)). A group of one axis is an arithmetic progression
r0 + k·stride (k < size), so everything here is closed-form in the axis sizes: nothing builds
the world-sized rank grid, and memory stays bounded by what the caller asks to list.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import IntArray, Mask, Num

AXES = ("tp", "cp", "dp", "pp")  # fastest-varying first
_ORDER = ("pp", "dp", "cp", "tp")  # slowest first: the order groups are listed in


def strides(sizes: dict[str, int]) -> dict[str, int]:
    """Rank distance between neighbours on each axis: TP 1, CP TP, DP TP·CP, PP TP·CP·DP."""
    out, step = {}, 1
    for axis in AXES:
        out[axis] = step
        step *= sizes[axis]
    return out


def group_count(sizes: dict[str, int], axis: str) -> int:
    """Groups of one axis: world size ÷ that axis's size."""
    world = int(np.prod([sizes[a] for a in AXES]))
    return world // sizes[axis]


def group_ranks(sizes: dict[str, int], axis: str, first: int = 0, count: int = 1,
                limit: int | None = None) -> IntArray:
    """Ranks of groups `first … first+count-1` of one axis (one row each, listed with the other
    axes in PP, DP, CP, TP order, the last fastest), each cut to its first `limit` ranks."""
    st = strides(sizes)
    others = [a for a in _ORDER if a != axis]
    count = max(0, min(count, group_count(sizes, axis) - first))
    idx = np.arange(first, first + count)
    coords = np.unravel_index(idx, [sizes[a] for a in others]) if others else ()
    base = sum((c * st[a] for c, a in zip(coords, others)), np.zeros(count, dtype=np.int64))
    n = sizes[axis] if limit is None else min(sizes[axis], limit)
    return base[:, None] + np.arange(n, dtype=np.int64)[None, :] * st[axis]


def _base_residues(sizes: dict[str, int], axis: str, g: int) -> IntArray:
    """Every value of (first rank of a group) mod g over all groups of `axis`. The first rank
    is Σ c_b·stride_b over the other axes; c·stride mod g repeats with a period ≤ g, so at most
    g values of each coordinate matter and the set never holds more than g residues."""
    st = strides(sizes)
    res = np.zeros(1, dtype=np.int64)
    for b in AXES:
        if b == axis or sizes[b] == 1:
            continue
        step = (np.arange(min(sizes[b], g), dtype=np.int64) * st[b]) % g
        seen = np.zeros(g, dtype=bool)
        seen[((res[:, None] + step[None, :]) % g).ravel()] = True
        res = np.flatnonzero(seen)
    return res


def max_nodes_spanned(sizes: dict[str, int], axis: str, gpus_per_node: int) -> int:
    """Most nodes any group of `axis` touches (1 = inside one node). Ranks r0 + k·s, k < n,
    with node = ⌊rank / g⌋: a stride s ≥ g lands every rank on a new node (n nodes); s < g
    skips no node, so the group touches ⌊(r0 mod g + (n−1)·s)/g⌋ + 1 nodes."""
    n, g = sizes[axis], gpus_per_node
    if n == 1:
        return 1
    s = strides(sizes)[axis]
    if s >= g:
        return n
    return int(((_base_residues(sizes, axis, g) + (n - 1) * s) // g).max()) + 1


def inside_domain(group_size: Num, gpus_per_domain: int) -> Mask:
    """True where a group of `group_size` consecutive ranks (TP×CP) stays inside one NVLink
    domain and tiles it: size ≤ domain and domain divisible by size."""
    g = np.asarray(group_size)
    ok = (g <= gpus_per_domain) & (gpus_per_domain % g == 0)
    return bool(ok) if np.ndim(ok) == 0 else ok
