"""Topology-aware collective time: which link a group crosses, flat ring vs hierarchical.

Volumes and ring steps come from `comm.py` (nccl-tests bus-bandwidth factors, Hockney α–β).
A group of n ranks has `per_domain` members in each NVLink domain (on 8-GPU DGX/HGX nodes:
per node). If n ≤ per_domain the group never leaves NVLink.

Flat ring across domains: NCCL runs one ring channel per NIC, so a ring's cross-node traffic is
striped over the NICs of the group's k = per_domain members in a node; per-rank bandwidth is
min(NVLink, k·NIC). That bound is why inter-node ring busbw ≈ a node's aggregate NIC rate.

Hierarchical all-reduce: reduce-scatter over NVLink inside the domain, all-reduce of the 1/k
shard across the m = n/k domains (each GPU on its own NIC), all-gather over NVLink. NCCL
pipelines chunks through the phases, so the slowest phase bounds the bandwidth term and the
latency terms add. Evidence: on the OCI 2×8 H100 all-reduce (CALIBRATION.md §7, 16 GiB in
69.3 ms) the serial sum of the phases would predict ~131 ms; the overlapped maximum, 74 ms.

Bandwidths given here are *achieved* per-GPU unidirectional rates (link × bus efficiency).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from ._array import Num, out
from .comm import alpha_beta_time, bytes_per_gpu, collective_time, ring_steps

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


def fabric(profile: Any, span_gpus: Optional[int] = None) -> Fabric:
    """Fabric of a HardwareProfile. Oversubscription applies once a job spans more than
    `pod_gpus` (or always when either is unknown, the conservative reading)."""
    su, so = profile.scale_up, profile.scale_out
    inter = so.nic_bytes_per_s * so.bus_efficiency
    if so.pod_gpus is None or span_gpus is None or span_gpus > so.pod_gpus:
        inter = inter / so.oversubscription
    return Fabric(su.bandwidth_bytes_per_s * su.bus_efficiency, su.latency_s, inter, so.latency_s)


def members_per_domain(n: Num, stride: Num, gpus_per_domain: Num) -> Num:
    """Members of an n-rank group sharing one NVLink domain when its ranks are `stride` GPUs
    apart (e.g. a data-parallel group with stride TP·CP): ⌊domain/stride⌋ clipped to [1, n]."""
    n = np.asarray(n, dtype=float)
    k = np.floor(np.asarray(gpus_per_domain, dtype=float) / np.asarray(stride, dtype=float))
    return out(np.clip(k, 1.0, np.maximum(n, 1.0)))


def _split(n: Num, per_domain: Num) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, k, m): ranks, members per domain (≤ n, ≥ 1), domains spanned ⌈n/k⌉."""
    n = np.asarray(n, dtype=float)
    k = np.clip(np.asarray(per_domain, dtype=float), 1.0, None)
    k = np.minimum(k, np.maximum(n, 1.0))
    return n, k, np.ceil(n / k)


def link_kind(n: Num, per_domain: Num) -> Num:
    """Slowest link a group crosses: 0 = NVLink (all n ranks in one domain), 1 = network."""
    n, k, _ = _split(n, per_domain)
    return out(np.where(n > k, LINK_NETWORK, LINK_NVLINK).astype(float))


def flat_ring_time(kind: str, message_bytes: Num, n: Num, per_domain: Num, fab: Fabric) -> Num:
    """One ring over all n ranks, paced by the slowest link it crosses.

    Inside a domain: NVLink rate, NVLink latency. Across domains: min(NVLink, k·NIC) with the
    network's per-step latency (a ring step waits for its slowest hop).
    """
    n, k, _ = _split(n, per_domain)
    crosses = n > k
    nic_path = k * np.asarray(fab.inter_bytes_per_s, dtype=float)
    # A lone member per domain (k = 1) never touches NVLink inside the ring.
    cross_bw = np.where(k > 1, np.minimum(fab.intra_bytes_per_s, nic_path), nic_path)
    bw = np.where(crosses, cross_bw, fab.intra_bytes_per_s)
    lat = np.where(crosses, np.maximum(fab.intra_latency_s, fab.inter_latency_s),
                   fab.intra_latency_s)
    return collective_time(kind, message_bytes, n, bw, lat)


def hierarchical_time(kind: str, message_bytes: Num, n: Num, per_domain: Num,
                      fab: Fabric) -> Num:
    """Two-level all-reduce / all-gather / reduce-scatter (phases overlapped; see module doc).

    all-reduce:     RS(M, k) + AG(M, k) on NVLink ‖ AR(M/k, m) on NICs
    all-gather:     AG(M/k, m) on NICs ‖ AG(M, k) on NVLink   (reduce-scatter mirrors it)
    Inside one domain (m = 1) this is the flat ring.
    """
    if kind not in _RING_KINDS:
        raise ValueError(f"no hierarchical variant of {kind!r}")
    M = np.asarray(message_bytes, dtype=float)
    n, k, m = _split(n, per_domain)
    if kind == "all-reduce":
        intra_bytes = 2.0 * np.asarray(bytes_per_gpu("reduce-scatter", M, k))
        intra_steps = 2.0 * np.asarray(ring_steps("reduce-scatter", k))
    else:
        intra_bytes = np.asarray(bytes_per_gpu(kind, M, k))
        intra_steps = np.asarray(ring_steps(kind, k))
    inter_bytes = bytes_per_gpu(kind, M / k, m)
    bw_time = np.maximum(alpha_beta_time(intra_bytes, fab.intra_bytes_per_s),
                         alpha_beta_time(inter_bytes, fab.inter_bytes_per_s))
    lat_time = (intra_steps * np.asarray(fab.intra_latency_s, dtype=float)
                + np.asarray(ring_steps(kind, m)) * np.asarray(fab.inter_latency_s, dtype=float))
    return out(bw_time + lat_time)


def all_to_all_time(message_bytes: Num, n: Num, per_domain: Num, fab: Fabric) -> Num:
    """All-to-all: of the (n−1)/n·M each GPU sends, the (n−k)/(n−1) share bound for other
    domains goes over its NIC and the rest over NVLink, concurrently; n−1 steps of latency."""
    n, k, _ = _split(n, per_domain)
    total = np.asarray(bytes_per_gpu("all-to-all", message_bytes, n))
    off_share = np.where(n > 1, (n - k) / np.maximum(n - 1.0, 1.0), 0.0)
    bw_time = np.maximum(alpha_beta_time(total * (1.0 - off_share), fab.intra_bytes_per_s),
                         alpha_beta_time(total * off_share, fab.inter_bytes_per_s))
    lat = np.where(n > k, np.maximum(fab.intra_latency_s, fab.inter_latency_s),
                   fab.intra_latency_s)
    return out(bw_time + np.asarray(ring_steps("all-to-all", n)) * lat)


def p2p_time(message_bytes: Num, crosses_network: Num, fab: Fabric) -> Num:
    """Point-to-point send of M bytes (e.g. pipeline activations): one α–β step on NVLink or,
    if `crosses_network` (1/True), on the NIC."""
    cross = np.asarray(crosses_network).astype(bool)
    bw = np.where(cross, fab.inter_bytes_per_s, fab.intra_bytes_per_s)
    lat = np.where(cross, fab.inter_latency_s, fab.intra_latency_s)
    return collective_time("send-recv", message_bytes, 2.0, bw, lat)


def topo_collective_time(kind: str, message_bytes: Num, n: Num, per_domain: Num,
                         fab: Fabric) -> Num:
    """Best estimate of one collective on a two-level fabric.

    Ring kinds: the faster of flat ring and hierarchical (NCCL picks its algorithm by tuning).
    all-to-all: `all_to_all_time`. send-recv: `p2p_time` (crossing iff n > per_domain).
    """
    if kind in _RING_KINDS:
        return out(np.minimum(flat_ring_time(kind, message_bytes, n, per_domain, fab),
                              hierarchical_time(kind, message_bytes, n, per_domain, fab)))
    if kind == "all-to-all":
        return all_to_all_time(message_bytes, n, per_domain, fab)
    if kind == "send-recv":
        return p2p_time(message_bytes, link_kind(n, per_domain), fab)
    raise ValueError(f"unknown collective {kind!r}")
