"""Step time, one function per parallel axis, composed in `pipeline_step_time`.

Each axis's cost is its α–β collective time on the link its group crosses (topology.py),
times how often it runs, times the share not hidden behind computation:
- TP: 2 all-reduces of s·b·h activations per layer forward and 2 backward (with sequence
  parallel, an all-gather + reduce-scatter pair of the same total volume) — Narayanan Sec. 3.2,
  Korthikanti Sec. 4.2.2;
- CP: each rank passes its K/V chunk around a ring (cp − 1 steps), hidden behind attention;
- EP: all-to-all dispatch and combine per MoE layer, forward and backward;
- PP: one s·b·h send per micro-batch per boundary each way (÷TP with scatter/gather);
- DP: gradient reduction once per step (ZeRO-1/2: reduce-scatter + all-gather, same volume as
  an all-reduce; ZeRO-3: all-gather forward and backward + reduce-scatter per micro-batch) —
  ZeRO paper Sec. 7;
- the bubble, (p−1)/v micro-batch slots (pipeline.py), and the optimizer step (memory-bound).
"""

from __future__ import annotations

import numpy as np

from planner.engine._array import Num, out
from planner.engine.pipeline import bubble_slots
from planner.engine.topology import Fabric, members_per_domain, p2p_time, topo_collective_time, link_kind


def tp_time_per_layer(tokens_per_rank: Num, hidden: Num, tp: Num, gpus_per_domain: Num,
                      fab: Fabric, act_bytes: Num = 2.0, passes: Num = 2.0) -> Num:
    """One layer's TP communication for `passes` forward-or-backward passes: 2 all-reduces of
    T·h·bytes each per pass (0 when TP = 1)."""
    msg = np.asarray(tokens_per_rank, dtype=float) * hidden * act_bytes
    per_domain = members_per_domain(tp, 1, gpus_per_domain)
    return out(2.0 * passes * np.asarray(topo_collective_time("all-reduce", msg, tp, per_domain, fab)))


def cp_time_per_layer(tokens_per_rank: Num, kv_dim: Num, cp: Num, tp: Num, gpus_per_domain: Num,
                      fab: Fabric, act_bytes: Num = 2.0) -> Num:
    """Ring context parallel: K and V chunks (2·T/c·k·d·bytes, ÷TP) make cp − 1 hops forward and
    twice that backward (K/V again plus their gradients)."""
    chunk = 2.0 * np.asarray(tokens_per_rank, dtype=float) * kv_dim * act_bytes / tp
    hops = np.maximum(np.asarray(cp, dtype=float) - 1.0, 0.0)
    per_domain = members_per_domain(cp, tp, gpus_per_domain)
    one_hop = p2p_time(chunk, link_kind(cp, per_domain), fab)
    return out(3.0 * hops * np.asarray(one_hop))


def ep_time_per_layer(tokens_per_rank: Num, hidden: Num, top_k: Num, ep: Num, stride: Num,
                      gpus_per_domain: Num, fab: Fabric, act_bytes: Num = 2.0) -> Num:
    """MoE all-to-all: dispatch and combine (top-k copies of each token's h-vector) forward and
    the same backward: 4 all-to-alls per MoE layer (0 when EP = 1)."""
    msg = np.asarray(tokens_per_rank, dtype=float) * top_k * hidden * act_bytes
    per_domain = members_per_domain(ep, stride, gpus_per_domain)
    t = topo_collective_time("all-to-all", msg, ep, per_domain, fab)
    return out(np.where(np.asarray(ep) > 1, 4.0 * np.asarray(t), 0.0))


def pp_time_per_micro_batch(tokens_per_rank: Num, hidden: Num, tp: Num, pp: Num,
                            stride: Num, gpus_per_domain: Num, fab: Fabric, chunks: Num = 1,
                            act_bytes: Num = 2.0) -> Num:
    """Activations forward and their gradients backward across one stage boundary, v times with
    v interleaved chunks; Megatron's scatter/gather (and SP) sends 1/TP of the tensor per rank
    (Narayanan Sec. 4.1)."""
    msg = np.asarray(tokens_per_rank, dtype=float) * hidden * act_bytes / tp
    per_domain = members_per_domain(pp, stride, gpus_per_domain)
    t = p2p_time(msg, link_kind(pp, per_domain), fab)
    return out(np.where(np.asarray(pp) > 1, 2.0 * np.asarray(chunks) * np.asarray(t), 0.0))


def dp_time_per_step(grad_bytes: Num, n: Num, stride: Num, gpus_per_domain: Num,
                     fab: Fabric) -> Num:
    """Gradient all-reduce (or reduce-scatter + all-gather) of this GPU's gradients over the n
    data-parallel ranks, `stride` GPUs apart, once per optimizer step."""
    per_domain = members_per_domain(n, stride, gpus_per_domain)
    return topo_collective_time("all-reduce", grad_bytes, n, per_domain, fab)


def zero3_time_per_micro_batch(param_bytes: Num, n: Num, stride: Num, gpus_per_domain: Num,
                               fab: Fabric) -> Num:
    """ZeRO-3 / FSDP per micro-batch: all-gather the parameters forward and again backward, and
    reduce-scatter the gradients: 3 × (n−1)/n of the unsharded 16-bit parameters."""
    per_domain = members_per_domain(n, stride, gpus_per_domain)
    ag = topo_collective_time("all-gather", param_bytes, n, per_domain, fab)
    rs = topo_collective_time("reduce-scatter", param_bytes, n, per_domain, fab)
    return out(2.0 * np.asarray(ag) + np.asarray(rs))


def exposed(comm_time: Num, hiding_compute: Num, floor_fraction: Num = 0.0) -> Num:
    """Communication left on the critical path when it overlaps `hiding_compute`:
    max(comm − compute, floor × comm)."""
    c = np.asarray(comm_time, dtype=float)
    return out(np.maximum(c - hiding_compute, floor_fraction * c))


def pipeline_step_time(micro_batch_time: Num, micro_batches: Num, stages: Num,
                       chunks: Num = 1) -> tuple[Num, Num]:
    """(busy time, bubble time) of a pipeline: m·t_mb busy and (p−1)/v·t_mb idle (Narayanan
    Eq. 1 and Sec. 2.2). With p = 1 the bubble is 0."""
    t = np.asarray(micro_batch_time, dtype=float)
    busy = np.asarray(micro_batches, dtype=float) * t
    bubble = np.asarray(bubble_slots(stages, chunks)) * t
    return out(busy), out(bubble)


def compose_step(per_micro_batch: list[Num], micro_batches: Num, stages: Num, chunks: Num,
                 per_step: list[Num]) -> tuple[Num, Num]:
    """(step time, bubble): t_mb = Σ per-micro-batch terms; step = m·t_mb + (p−1)/v·t_mb +
    Σ per-step terms (Narayanan Eq. 1). The terms are summed in the order given."""
    t_mb = sum(per_micro_batch)
    busy, bubble = pipeline_step_time(t_mb, micro_batches, stages, chunks)
    step = busy + bubble
    for term in per_step:
        step = step + term
    return out(step), bubble
