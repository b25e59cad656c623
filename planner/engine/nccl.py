"""Collectives as NCCL runs them: ring or tree per collective, latency per step, bytes at bus rate.

NCCL's own cost model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel and
ncclTopoGetAlgoTime, commit 5067397), Simple protocol (the one NCCL uses for the ≥ 1 MB messages
of training), re-derived here for a group of n ranks with k in each NVLink domain ("node") over
N = ⌈n/k⌉ domains:

    time = latency + bytes_per_gpu / busbw
    Ring, any collective: latency = 8.4 µs base + (steps − x)·α_nvl + x·α_net,
        steps = 2(n−1) for all-reduce, n−1 for all-gather / reduce-scatter,
        x = 2(N−1) (resp. N−1) of them cross the network; multi-node ring all-reduce latency ×1.4
        ("plateau effect of ring" in tuning.cc).
        busbw = NVLink rate inside one domain; across domains min(NVLink, k·NIC): a ring's channel
        leaves a node through one NIC, and the k members' channels stripe the k NICs.
    Tree, all-reduce only (tuning.cc skips Tree for all-gather / reduce-scatter, so those are
        ring-only across nodes): latency = 8.4 µs + 2·((k−1)·α_nvl + ⌈log2 N⌉·α_net);
        bytes: a chain inside the node, 2(N−1)/N·M per node across (half a ring's for N = 2),
        at 0.92 × NCCL's size correction (treeCorrectionFactor, Simple row).
    NVLS-Tree, all-reduce across nodes on NVLink-SHARP domains (Hopper+ NVSwitch): reduce-scatter
        in the switch, all-reduce of the 1/k shard across the N nodes on each GPU's NIC,
        all-gather in the switch, pipelined (the slowest phase sets the rate); latency
        25 µs + 2·⌈log2 N⌉·α_net (hwLatencies NVLS / NVLSTree, Simple). For N = 2 its network
        share is half a ring's: tuning.cc doubles NVLS-Tree's inter-node bandwidth there.
    NCCL picks the fastest; so does `collective`.

Channels split the bytes, not the steps: every channel runs all the steps concurrently, so the
latency is paid once per step whatever the channel count. One GPU per node (k = 1, e.g. a DP
group with stride TP·CP = 8) gets one NIC's rate and pays α_net on every step: at bucket-sized
messages and N in the tens such rings run well below line rate.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from planner.engine.arrays import FloatArray, Num, out

US = 1e-6
# tuning.cc ncclTunerConstantsDefaults, Simple protocol (µs).
BASE_LATENCY_S = 8.4 * US          # baseLatencies, Ring and Tree, Simple
NVLINK_STEP_S = 3.4 * US           # hwLatencies[NVLINK][Ring][Simple]
NVLINK_TREE_STEP_S = 4.0 * US      # hwLatencies[NVLINK][Tree][Simple]
NET_STEP_S = 14.0 * US             # hwLatencies[NET][Ring|Tree][Simple]
RING_PLATEAU = 1.4                 # latency × 1.4, multi-node ring all-reduce, compute cap ≥ 80
TREE_BW_FACTOR = 0.92              # "busBw * .92" for Tree all-reduce
# treeCorrectionFactor[Simple][log2(bytes/64)], 64 B … 256 MB; 1.0 beyond.
# nccl-tests on one 8×A100 NVSwitch node (microsoft/superbenchmark tests/data/nccl_*.log, commit ff563b66): all-gather and
# reduce-scatter peak at 223 / 231 GB/s busbw against all-reduce's 235 (ratio 0.965), and reach
# it later: their ring steps cost ~4.5× an all-reduce step (least squares over the 16 rows ≥ 64 MB;
# the only AG/RS data).
AGRS_BUS_RATIO = 0.965
AGRS_STEP_FACTOR = 4.5
_TREE_CORRECTION = (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5,
                    0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9)

NVLS_STEP_S = 25.0 * US            # hwLatencies[NVLINK][NVLS|NVLSTree][Simple]
NVLS_NET_STEP_S = 20.9 * US        # hwLatencies[NET][NVLSTree][Simple]

ALGO_RING, ALGO_TREE, ALGO_NVLS_TREE = 0, 1, 2
ALGO_NAMES = ("ring", "tree", "nvls-tree")
_KINDS = ("all-reduce", "all-gather", "reduce-scatter")


def _split(ranks: Num, per_node: Num) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(n, k, N): ranks, members per node clipped to [1, n], nodes ⌈n/k⌉."""
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    k = np.clip(np.asarray(per_node, dtype=float), 1.0, n)
    return n, k, np.ceil(n / k)


def bus_factor(kind: str, n: Num) -> Num:
    """nccl-tests bus-bandwidth factor: 2(n−1)/n for all-reduce, (n−1)/n for AG / RS."""
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    f = (n - 1.0) / n
    return out(2.0 * f if kind == "all-reduce" else f)


def ring_latency(kind: str, n: Num, per_node: Num, net_extra_s: Num = 0.0,
                 nvlink_step_s: Num = NVLINK_STEP_S) -> Num:
    """Ring latency: 8.4 µs + (steps − x)·α_nvl + x·α_net (× 1.4 for multi-node all-reduce);
    α_net = 14 µs + 2·net_extra_s (the NIC's latency, counted again for the Simple flush);
    all-gather / reduce-scatter steps on NVLink cost AGRS_STEP_FACTOR·α_nvl."""
    n, k, nodes = _split(n, per_node)
    two = 2.0 if kind == "all-reduce" else 1.0
    a_nvl = np.asarray(nvlink_step_s, dtype=float) * (1.0 if kind == "all-reduce"
                                                       else AGRS_STEP_FACTOR)
    steps = two * (n - 1.0)
    inter = two * (nodes - 1.0)
    a_net = NET_STEP_S + 2.0 * np.asarray(net_extra_s, dtype=float)
    lat = BASE_LATENCY_S + (steps - inter) * a_nvl + inter * a_net
    if kind == "all-reduce":
        lat = np.where(nodes > 1, lat * RING_PLATEAU, lat)
    return out(np.where(n > 1, lat, 0.0))


def tree_latency(n: Num, per_node: Num, net_extra_s: Num = 0.0) -> Num:
    """Tree all-reduce latency: 8.4 µs + 2·((k−1)·α_nvl,tree + ⌈log2 N⌉·α_net)."""
    n, k, nodes = _split(n, per_node)
    a_net = NET_STEP_S + 2.0 * np.asarray(net_extra_s, dtype=float)
    depth = np.ceil(np.log2(np.maximum(nodes, 1.0)))
    lat = BASE_LATENCY_S + 2.0 * ((k - 1.0) * NVLINK_TREE_STEP_S + depth * a_net)
    return out(np.where(n > 1, lat, 0.0))


def ring_busbw(n: Num, per_node: Num, nvlink_bps: Num, nic_bps: Num) -> Num:
    """Per-rank bus bandwidth of a ring: NVLink inside a node; min(NVLink, k·NIC) across."""
    n, k, nodes = _split(n, per_node)
    nic_path = k * np.asarray(nic_bps, dtype=float)
    cross = np.where(k > 1, np.minimum(nvlink_bps, nic_path), nic_path)
    return out(np.where(nodes > 1, cross, np.asarray(nvlink_bps, dtype=float) + 0.0 * n))


def tree_correction(message_bytes: Num) -> Num:
    """NCCL's empirical Tree bandwidth correction by message size (Simple protocol)."""
    m = np.maximum(np.asarray(message_bytes, dtype=float), 1.0)
    idx = np.floor(np.log2(np.maximum(m / 64.0, 1.0))).astype(int)
    table = np.asarray(_TREE_CORRECTION + (1.0,))
    return out(table[np.clip(idx, 0, len(_TREE_CORRECTION))])


def ring_time(kind: str, message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num,
              nic_bps: Num, net_extra_s: Num = 0.0, nvlink_step_s: Num = NVLINK_STEP_S) -> Num:
    """Ring time: latency + factor·M / busbw (M = the full array for AG / RS; their NVLink
    rate is AGRS_BUS_RATIO of all-reduce's)."""
    m = np.asarray(message_bytes, dtype=float)
    nv = np.asarray(nvlink_bps, dtype=float) * (1.0 if kind == "all-reduce" else AGRS_BUS_RATIO)
    bw = np.asarray(ring_busbw(n, per_node, nv, nic_bps))
    return out(np.asarray(ring_latency(kind, n, per_node, net_extra_s, nvlink_step_s))
               + np.asarray(bus_factor(kind, n)) * m / bw)


def _two_level(message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num,
               nic_bps: Num) -> Num:
    """Bandwidth time of a pipelined two-level all-reduce: the slower of 2(k−1)/k·M over
    NVLink inside the node and 2(N−1)/N·(M/k) per GPU on its NIC across the N nodes."""
    m = np.asarray(message_bytes, dtype=float)
    _, k, nodes = _split(n, per_node)
    intra = np.asarray(bus_factor("all-reduce", k)) * m / np.asarray(nvlink_bps, dtype=float)
    inter = np.asarray(bus_factor("all-reduce", nodes)) * (m / k) / np.asarray(nic_bps, dtype=float)
    return out(np.maximum(intra, inter))


def tree_time(message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num, nic_bps: Num,
              net_extra_s: Num = 0.0) -> Num:
    """Tree all-reduce: latency + two-level bandwidth time / (0.92 · size correction). A double
    binary tree sends each node's M up and down once per tree level pair: 2(N−1)/N·M across
    the network per node (M for two nodes, where tuning.cc prices Tree at the intra-node rate),
    striped over the node's k NICs, and a chain of the k GPUs inside the node."""
    m = np.asarray(message_bytes, dtype=float)
    bw_t = np.asarray(_two_level(m, n, per_node, nvlink_bps, nic_bps))
    return out(np.asarray(tree_latency(n, per_node, net_extra_s))
               + bw_t / (TREE_BW_FACTOR * np.asarray(tree_correction(m))))


def nvls_tree_time(message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num, nic_bps: Num,
                   net_extra_s: Num = 0.0) -> Num:
    """NVLS-Tree all-reduce: the two-level bandwidth time (in-switch reduce-scatter and
    all-gather, the 1/k shard across nodes) + 25 µs + 2·⌈log2 N⌉·α_net,NVLSTree."""
    _, _, nodes = _split(n, per_node)
    depth = np.ceil(np.log2(np.maximum(nodes, 1.0)))
    a_net = NVLS_NET_STEP_S + 2.0 * np.asarray(net_extra_s, dtype=float)
    return out(NVLS_STEP_S + 2.0 * depth * a_net
               + np.asarray(_two_level(message_bytes, n, per_node, nvlink_bps, nic_bps)))


def collective(kind: str, message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num,
               nic_bps: Num, net_extra_s: Num = 0.0, nvls: bool = False,
               nvlink_step_s: Num = NVLINK_STEP_S,
               nvls_bps: Optional[Num] = None) -> tuple[Num, Num]:
    """(time, algorithm) of one NCCL collective: the fastest of ring, tree and (with `nvls`,
    across nodes) NVLS-Tree for all-reduce; ring for all-gather and reduce-scatter (NCCL has
    no tree for them). n = 1 costs 0. Algorithm codes index ALGO_NAMES. NVLS-Tree's NVLink half
    runs at `nvls_bps` (the in-switch reduction's measured rate; None: `nvlink_bps`)."""
    if kind not in _KINDS:
        raise ValueError(f"NCCL model covers {_KINDS}, not {kind!r}")
    ring = np.asarray(ring_time(kind, message_bytes, n, per_node, nvlink_bps, nic_bps,
                                net_extra_s, nvlink_step_s))
    alive = np.asarray(n) > 1
    if kind != "all-reduce":
        return out(np.where(alive, ring, 0.0)), out(np.zeros_like(ring) + ALGO_RING)
    _, k, nodes = _split(n, per_node)
    multi = nodes > 1
    # Inside one node NCCL's tree is a chain with no bandwidth advantage; keep the ring there.
    tree = np.where(multi, tree_time(message_bytes, n, per_node, nvlink_bps, nic_bps,
                                     net_extra_s), np.inf)
    nv = np.where(multi & (k > 1) & bool(nvls), nvls_tree_time(
        message_bytes, n, per_node, nvlink_bps if nvls_bps is None else nvls_bps, nic_bps,
        net_extra_s), np.inf)
    times = np.stack(np.broadcast_arrays(ring, tree, nv))
    algo = np.argmin(times, axis=0)
    t = np.min(times, axis=0)
    return out(np.where(alive, t, 0.0)), out(algo.astype(float))


def all_to_all_time(message_bytes: Num, n: Num, per_node: Num, nvlink_bps: Num, nic_bps: Num,
                    net_extra_s: Num = 0.0, nvlink_step_s: Num = NVLINK_STEP_S) -> Num:
    """All-to-all as NCCL runs it, n−1 grouped send/recv pairs: of the (n−1)/n·M each GPU sends,
    the (n−k)/(n−1) share bound for other nodes goes over its NIC and the rest over NVLink
    (at AGRS_BUS_RATIO, as the non-all-reduce kinds measure), concurrently; n−1 peer steps at
    the NVLink step cost of all-gather / reduce-scatter, or α_net once the group spans nodes.
    On the 8×A100 superbench alltoall table this gives 17 µs per peer, measured ~13-20."""
    n, k, nodes = _split(n, per_node)
    total = np.asarray(bus_factor("all-to-all", n)) * np.asarray(message_bytes, dtype=float)
    off = np.where(n > 1, (n - k) / np.maximum(n - 1.0, 1.0), 0.0)
    nv = np.asarray(nvlink_bps, dtype=float) * AGRS_BUS_RATIO
    bw_t = np.maximum(total * (1.0 - off) / nv, total * off / np.asarray(nic_bps, dtype=float))
    lat = all_to_all_latency(n, per_node, net_extra_s, nvlink_step_s)
    return out(np.where(n > 1, lat + bw_t, 0.0))


def all_to_all_latency(n: Num, per_node: Num, net_extra_s: Num = 0.0,
                       nvlink_step_s: Num = NVLINK_STEP_S, steps: Optional[Num] = None) -> Num:
    """The fixed part of an n-rank all-to-all: base latency + `steps` (default n−1) peer steps,
    each at the NVLink step of all-gather / reduce-scatter, or α_net once the group spans
    nodes."""
    n, _, nodes = _split(n, per_node)
    a_nvl = AGRS_STEP_FACTOR * np.asarray(nvlink_step_s, dtype=float)
    a_net = NET_STEP_S + 2.0 * np.asarray(net_extra_s, dtype=float)
    step = np.where(nodes > 1, np.maximum(a_nvl, a_net), a_nvl)
    return out(BASE_LATENCY_S + (n - 1.0 if steps is None else np.asarray(steps)) * step)


def busbw_of(kind: str, message_bytes: Num, n: Num, time_s: Num) -> Num:
    """nccl-tests busbw = factor · M / t (bytes/s), to compare with measured tables."""
    return out(np.asarray(bus_factor(kind, n)) * np.asarray(message_bytes, dtype=float)
               / np.asarray(time_s, dtype=float))
