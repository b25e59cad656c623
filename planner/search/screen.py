"""The memory floor of a block's rows decided a group at a time where it can be (the search's
per-block step, planner.search.fast).

A group (space.product) holds the layouts alike in every column but their ZeRO, sharding and
offload states; crossed with the recompute rows, a group's rows at one recompute row share
their activations (per micro-batch and the forward working set) and their micro-batches in
flight, and differ only in S, each stage's persistent states. engine.peak.device_floor is, in
exact arithmetic, S + n·A + W + share·(allocated − steady)⁺ + context + NCCL with
allocated − steady = A + W (allocator.steady_bytes: S + (n − 1)⁺·A), so it grows with S and
nothing else of it reads S: the floor of every variant is at least the floor at the group's
least S (per stage), less the float rounding of a dozen operations (a few 1e-16 of the
magnitudes summed, bounded here by FLOOR_MARGIN of them). Where that bound already exceeds the
usable memory every row of the group at that recompute row is rejected, and its floor
(device_floor per row) is not computed: the bound stands for it, still never above the exact
peak (the search reads a rejected row's floor only as an upper bound on its headroom, for the
closest miss). DeepSeek-V3 on 2,048 H800 (measured when its space held MoE layouts under TP
without sequence parallel): two thirds of its 9.5 M priced rows (6.27 M) were rejected so, and
the floor of its blocks took 0.36 CPU s instead of 0.48.
"""

from __future__ import annotations

import numpy as np

from planner.engine import peak as pk
from planner.evaluation.candidates import Problem
from planner.evaluation.evaluate import STAGES
from planner.search.bounds import MemoryParts, _per_layout, columns_at

__all__ = ["screened_floor"]

# Relative margin on the group bound: device_floor's float rounding is a few units in the last
# place of the magnitudes it sums (~1e-16 each); 1e-12 covers it a thousand times over (a bound,
# not a modelling constant: as engine.peak.CEILING_MARGIN).
FLOOR_MARGIN = 1e-12


def screened_floor(p: Problem, parts: MemoryParts, usable: float) -> np.ndarray:
    """A lower bound on every row's peak, as MemoryParts.floor: its value, bit for bit, on
    every row of a group (parts.group) whose bound at its least states (module docstring) is
    within `usable`, and that bound (above `usable`) on the rows of the other groups. Without
    groups, MemoryParts.floor itself."""
    if parts.group is None or not len(parts.c):
        return parts.floor(p)
    k, group = parts.crossed, parts.group
    n = len(group)
    count = int(group.max()) + 1
    least = _least_states(parts, count)
    rep = np.full(count, -1, dtype=np.int64)
    rep[group] = np.arange(n, dtype=np.int64)   # a layout of each group
    live = np.flatnonzero(rep >= 0)
    at = rep.take(live) * k
    middle = columns_at(parts.c, ("pp",), at)[0] > 2   # a group's PP is its layouts'
    wide = np.zeros(count, dtype=bool)
    wide[live] = middle
    wide = wide.take(group)
    out = np.empty((n, k))
    flight_at = parts.flight.rows(at)
    for j in range(k):
        bound = np.full(count, -np.inf)
        bound[live] = _floor(p, parts, {s: v.take(live) for s, v in least.items()}, flight_at,
                             at + j, middle, True)
        row = bound.take(group)
        idx = np.flatnonzero(~(row > usable))
        rows = idx * k + j
        row[idx] = _floor(p, parts, parts.states.rows(rows, pick=lambda t: {
            s: t[s]["persistent"] for s in STAGES}), parts.flight.rows(rows), rows,
            wide.take(idx), False)
        out[:, j] = row
    return out.reshape(-1)


def _least_states(parts: MemoryParts, count: int) -> dict[str, np.ndarray]:
    """Per stage, each group's least persistent states over its layouts: from the states'
    own tuples where the parts name each one's group key (MemoryParts.state_keys: the
    groups sharing a key have the same states tuples), else over the layouts."""
    tree = parts.states.tree
    least = {}
    if parts.state_keys is not None:
        by_group, by_tuple = parts.state_keys
        for s in STAGES:
            low = np.full(int(by_tuple.max()) + 1, np.inf)
            np.minimum.at(low, by_tuple, np.broadcast_to(tree[s]["persistent"], by_tuple.shape))
            least[s] = low.take(np.maximum(by_group, 0))  # -1: no layout in this block
        return least
    k, group = parts.crossed, parts.group
    assert group is not None
    persistent = _per_layout(parts.states, k, lambda t: {s: t[s]["persistent"] for s in STAGES})
    for s in STAGES:
        least[s] = np.full(count, np.inf)
        np.minimum.at(least[s], group, np.broadcast_to(persistent[s], group.shape))
    return least


def _floor(p: Problem, parts: MemoryParts, states: dict, flight: dict, rows: np.ndarray,
           middle: np.ndarray, margin: bool) -> np.ndarray:
    """MemoryParts.floor's value of the crossed rows `rows` (their persistent states and
    micro-batches in flight per stage given, `middle` where PP > 2: the middle stage counts),
    the same operations bit for bit; with `margin`,
    each stage's less FLOOR_MARGIN of the magnitudes it sums (module docstring)."""
    b, fw = p.budget, p.fw
    acts = parts.acts.rows(rows, pick=lambda t: (
        {s: t["stages"][s]["per_mb"] for s in STAGES}, t["stages"]["first"]["forward_working"]))
    floors = {}
    for s in STAGES:
        f = pk.device_floor(states[s], acts[0][s], flight[s], acts[1],
                            share=b.fragmentation_fraction,
                            expandable=fw.memory.expandable_segments,
                            context=b.context_bytes, nccl=b.comm_buffer_bytes)
        if margin:
            f = f - FLOOR_MARGIN * (np.abs(f) + np.abs(states[s])
                                    + np.abs(flight[s] * acts[0][s]) + np.abs(acts[1]))
        floors[s] = f
    return np.maximum(np.maximum(floors["first"], floors["last"]),
                      np.where(middle, floors["middle"], 0.0))
