"""Rank placement in Megatron's order: TP fastest-varying, then CP, then DP, then PP, so each
TP group is a block of consecutive ranks inside one node (Megatron-LM parallel_state)."""

from __future__ import annotations

import numpy as np

AXES = ("tp", "cp", "dp", "pp")  # fastest-varying first


def rank_grid(tp: int, cp: int, dp: int, pp: int) -> np.ndarray:
    """Global rank at each (pp, dp, cp, tp) coordinate: rank = t + TP·(c + CP·(d + DP·p))."""
    return np.arange(tp * cp * dp * pp).reshape(pp, dp, cp, tp)


def axis_groups(grid: np.ndarray, axis: str) -> np.ndarray:
    """The communication groups of one axis, one group per row (ranks that differ only there)."""
    dim = {"pp": 0, "dp": 1, "cp": 2, "tp": 3}[axis]
    return np.moveaxis(grid, dim, -1).reshape(-1, grid.shape[dim])


def nodes_spanned(groups: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Distinct nodes each group touches (1 = stays inside one NVLink domain)."""
    nodes = groups // gpus_per_node
    return np.array([len(np.unique(row)) for row in nodes]) if len(groups) else np.zeros(0, int)


def inside_domain(group_size, gpus_per_domain):
    """True where a group of `group_size` consecutive ranks (TP×CP) stays inside one NVLink
    domain and tiles it: size ≤ domain and domain divisible by size."""
    g = np.asarray(group_size)
    ok = (g <= gpus_per_domain) & (gpus_per_domain % g == 0)
    return bool(ok) if np.ndim(ok) == 0 else ok
