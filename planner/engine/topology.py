"""Topology-aware collective time: which link a group crosses, and what each collective costs there.

A group of n ranks has `per_domain` members in each NVLink domain (on 8-GPU DGX/HGX nodes:
per node). If n ≤ per_domain the group never leaves NVLink.

Ring-kind collectives (all-reduce, all-gather, reduce-scatter) are priced as NCCL prices them,
ring / tree / NVLS-Tree per collective, and all-to-all as grouped sends (`nccl.py`, from NCCL's
own tuning model); point-to-point sends keep `comm.py`'s α–β form (Hockney).

Bandwidths given here are *achieved* per-GPU unidirectional rates (link × bus efficiency).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from planner.engine.arrays import FloatArray, Num, out
from planner.engine import nccl
from planner.engine.comm import collective_time

LINK_NVLINK = 0
LINK_NETWORK = 1
LINK_NAMES = ("nvlink", "network")

_RING_KINDS = ("all-reduce", "all-gather", "reduce-scatter")


class Fabric(NamedTuple):
    """Achieved per-GPU link rates and per-step latencies; fields may be numpy arrays."""

    intra_bytes_per_s: Num   # NVLink bandwidth × bus efficiency (one direction, per GPU)
    intra_latency_s: Num
    inter_bytes_per_s: Num   # NIC bandwidth × bus efficiency ÷ oversubscription (per GPU)
    inter_latency_s: Num
    nvls: bool = False       # NVLink SHARP domain (NCCL's NVLS-Tree all-reduce available)
    nvls_bytes_per_s: Optional[Num] = None   # NVLink rate under NVLS (None: intra_bytes_per_s)


def fabric(profile: Any, span_gpus: Optional[int] = None) -> Fabric:
    """Fabric of a HardwareProfile. Oversubscription applies once a job spans more than
    `pod_gpus` (or always when either is unknown, the conservative reading)."""
    su, so = profile.scale_up, profile.scale_out
    inter = so.nic_bytes_per_s * so.bus_efficiency
    if so.pod_gpus is None or span_gpus is None or span_gpus > so.pod_gpus:
        inter = inter / so.oversubscription
    nvls_eff = getattr(su, "nvls_bus_efficiency", None)
    return Fabric(su.bandwidth_bytes_per_s * su.bus_efficiency, su.latency_s, inter, so.latency_s,
                  bool(getattr(su, "nvls", False)),
                  None if nvls_eff is None else su.bandwidth_bytes_per_s * nvls_eff)


def members_per_domain(n: Num, stride: Num, gpus_per_domain: Num) -> Num:
    """Members of an n-rank group sharing one NVLink domain when its ranks are `stride` GPUs
    apart (e.g. a data-parallel group with stride TP·CP): ⌊domain/stride⌋ clipped to [1, n]."""
    n = np.asarray(n, dtype=float)
    k = np.floor(np.asarray(gpus_per_domain, dtype=float) / np.asarray(stride, dtype=float))
    return out(np.clip(k, 1.0, np.maximum(n, 1.0)))


def _split(n: Num, per_domain: Num) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(n, k, m): ranks, members per domain (≤ n, ≥ 1), domains spanned ⌈n/k⌉."""
    n = np.asarray(n, dtype=float)
    k = np.clip(np.asarray(per_domain, dtype=float), 1.0, None)
    k = np.minimum(k, np.maximum(n, 1.0))
    return n, k, np.ceil(n / k)


def link_kind(n: Num, per_domain: Num) -> Num:
    """Slowest link a group crosses: 0 = NVLink (all n ranks in one domain), 1 = network."""
    n, k, _ = _split(n, per_domain)
    return out(np.where(n > k, LINK_NETWORK, LINK_NVLINK).astype(float))


def all_to_all_time(message_bytes: Num, n: Num, per_domain: Num, fab: Fabric) -> Num:
    """All-to-all as NCCL runs it (grouped send/recv; `nccl.all_to_all_time`)."""
    return nccl.all_to_all_time(message_bytes, n, per_domain, fab.intra_bytes_per_s,
                                fab.inter_bytes_per_s, fab.inter_latency_s, fab.intra_latency_s)


def routed_all_to_all_time(network_bytes: Num, nvlink_bytes: Num, n: Num, per_domain: Num,
                           fab: Fabric) -> Num:
    """All-to-all of a dispatcher that sends each token once per remote domain over the NIC and
    forwards it over NVLink inside the domain (DeepEP's normal kernels): each GPU's
    `network_bytes` and `nvlink_bytes` move concurrently, the slower link sets the time, and
    the peers are served at once: one step of latency, not n−1 (deepseek-ai/DeepEP README
    @567632d: EP 64 over 8 H800 nodes, 4,096 tokens, reaches 51 GB/s on a ~50 GB/s NIC, so no
    per-peer serial latency shows)."""
    nv = np.asarray(fab.intra_bytes_per_s, dtype=float) * nccl.AGRS_BUS_RATIO
    bw_t = np.maximum(np.asarray(network_bytes, dtype=float) / fab.inter_bytes_per_s,
                      np.asarray(nvlink_bytes, dtype=float) / nv)
    lat = nccl.all_to_all_latency(n, per_domain, fab.inter_latency_s, fab.intra_latency_s, 1.0)
    return out(np.where(np.asarray(n) > 1, lat + bw_t, 0.0))


def p2p_time(message_bytes: Num, crosses_network: Num, fab: Fabric) -> Num:
    """Point-to-point send of M bytes (e.g. pipeline activations): one α–β step on NVLink or,
    if `crosses_network` (1/True), on the NIC."""
    cross = np.asarray(crosses_network).astype(bool)
    bw = np.where(cross, fab.inter_bytes_per_s, fab.intra_bytes_per_s)
    lat = np.where(cross, fab.inter_latency_s, fab.intra_latency_s)
    return collective_time("send-recv", message_bytes, 2.0, bw, lat)


def nccl_time(kind: str, message_bytes: Num, n: Num, per_domain: Num,
              fab: Fabric) -> tuple[Num, Num]:
    """(time, algorithm code in nccl.ALGO_NAMES) of a ring-kind collective on this fabric."""
    return nccl.collective(kind, message_bytes, n, per_domain, fab.intra_bytes_per_s,
                           fab.inter_bytes_per_s, fab.inter_latency_s, nvls=fab.nvls,
                           nvlink_step_s=fab.intra_latency_s, nvls_bps=fab.nvls_bytes_per_s)


def topo_collective_time(kind: str, message_bytes: Num, n: Num, per_domain: Num,
                         fab: Fabric) -> Num:
    """Best estimate of one collective on a two-level fabric.

    Ring kinds: NCCL's algorithms and cost model (`nccl.collective`: ring, tree, NVLS-Tree).
    all-to-all: `all_to_all_time`. send-recv: `p2p_time` (crossing iff n > per_domain).
    """
    if kind in _RING_KINDS:
        return nccl_time(kind, message_bytes, n, per_domain, fab)[0]
    if kind == "all-to-all":
        return all_to_all_time(message_bytes, n, per_domain, fab)
    if kind == "send-recv":
        return p2p_time(message_bytes, link_kind(n, per_domain), fab)
    raise ValueError(f"unknown collective {kind!r}")
