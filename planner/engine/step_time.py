"""Step time, one function per parallel axis, composed in `compose_step`.

Each axis's cost is its collective time on the link its group crosses (topology.py), times how
often it runs, less what computation hides (overlap.py); evaluation/timing.py lists the terms:
- TP: 2 all-reduces of s·b·h activations per layer forward and 2 backward (with sequence
  parallel, an all-gather + reduce-scatter pair of the same total volume) — Narayanan Sec. 3.2,
  Korthikanti Sec. 4.2.2;
- CP: each rank passes its K/V chunk around a ring (cp − 1 steps; torch's ring attention
  gathers all heads' K/V and rings fp32 dK/dV home), hidden behind attention;
- EP: all-to-all dispatch and combine per MoE layer, forward, backward and under full
  recompute once more, per token once per expert or (deduplicating dispatchers) once per rank
  and remote domain, within the model's node limit;
- PP: one s·b·h send per micro-batch per boundary each way (÷TP with scatter/gather);
- ZeRO-3 / FSDP: per layer an all-gather of its parameters forward and backward and a
  reduce-scatter of its gradients, hidden layer by layer behind the compute (ZeRO paper
  Sec. 7; Zhao et al. 2023, FSDP Sec. 3); hybrid-sharded (HSDP, a shard group smaller than
  DP·CP) adds an all-reduce of each gradient shard across the replicas, right after the
  reduce-scatter and hidden behind the same backward (hsdp_replica_time);
- DP: gradient reduction once per step (ZeRO-1/2: reduce-scatter + all-gather of the updated
  parameters, the volume of an all-reduce), bucketed behind the backward (Li et al. 2020);
- the bubble, (p−1)/v micro-batch slots (pipeline.py; ZB-H1's from schedules.py), and the
  optimizer step (memory-bound) with any offload traffic.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from planner.engine import overlap as ov
from planner.engine import schedules as sched
from planner.engine.arrays import Num, out
from planner.engine.compute import memory_bound_time
from planner.engine.pipeline import bubble_slots
from planner.engine.topology import (Fabric, link_kind, members_per_domain, p2p_time,
                                     routed_all_to_all_time, topo_collective_time)


def tp_time_per_layer(tokens_per_rank: Num, hidden: Num, tp: Num, gpus_per_domain: Num,
                      fab: Fabric, act_bytes: Num = 2.0, passes: Num = 2.0) -> Num:
    """One layer's TP communication for `passes` forward-or-backward passes: 2 all-reduces of
    T·h·bytes each per pass (0 when TP = 1)."""
    msg = np.asarray(tokens_per_rank, dtype=float) * hidden * act_bytes
    per_domain = members_per_domain(tp, 1, gpus_per_domain)
    return out(2.0 * passes * np.asarray(topo_collective_time("all-reduce", msg, tp, per_domain, fab)))


def cp_time_per_layer(tokens_per_rank: Num, kv_dim: Num, cp: Num, tp: Num, gpus_per_domain: Num,
                      fab: Fabric, act_bytes: Num = 2.0, *, rotate: str = "none",
                      q_dim: Num = 0.0, accum_bytes: Num = 4.0) -> Num:
    """One layer's CP communication, forward and backward, by how the framework runs the ring.

    "none" (Transformer Engine's p2p ring, Megatron): the K|V chunk (2·T·k·d·bytes ÷ TP) makes
    cp − 1 hops forward and twice that backward (K|V again plus their gradients).
    torch's ring attention (torchtitan; pytorch torch/distributed/tensor/experimental/
    _attention.py `_templated_ring_attention` and its backward): the K|V it is given has all
    heads (`q_dim` = heads·d: torchtitan repeats the KV heads before attention); "allgather"
    gathers every rank's K|V once forward and once backward, "alltoall" sends it cp − 1 hops
    each way; backward, dK|dV in `accum_bytes` (fp32) always ride an all-to-all ring, cp hops
    (`dkv_rotater`, ALL_TO_ALL whatever the method; the last hop brings them home)."""
    c = np.asarray(cp, dtype=float)
    hops = np.maximum(c - 1.0, 0.0)
    per_domain = members_per_domain(cp, tp, gpus_per_domain)
    cross = link_kind(cp, per_domain)
    tokens = np.asarray(tokens_per_rank, dtype=float)
    if rotate == "none":
        chunk = 2.0 * tokens * kv_dim * act_bytes / tp
        return out(3.0 * hops * np.asarray(p2p_time(chunk, cross, fab)))
    kv = 2.0 * tokens * q_dim * act_bytes / tp
    grads = 2.0 * tokens * q_dim * np.asarray(accum_bytes, dtype=float) / tp
    kv_pass = (topo_collective_time("all-gather", c * kv, cp, per_domain, fab)
               if rotate == "allgather" else hops * np.asarray(p2p_time(kv, cross, fab)))
    dkv = np.where(c > 1, c, 0.0) * np.asarray(p2p_time(grads, cross, fab))
    return out(2.0 * np.asarray(kv_pass) + dkv)


class EpRoute(NamedTuple):
    """How a MoE layer's tokens travel: the model's routing limit and the framework's dispatcher.

    `dedup` (DeepEP's normal kernels; Megatron-Core's flex dispatcher, core_v0.15.3
    megatron/core/transformer/moe/fused_a2a.py:85-100 get_dispatch_layout → is_token_in_rank,
    num_tokens_per_rdma_rank): a token goes once to each rank and once over the NIC to each
    remote domain holding one of its experts, then NVLink-forwarded (deepseek-ai/DeepEP README
    @567632d "Normal kernels with NVLink and RDMA forwarding"); otherwise (the alltoall
    dispatcher) once per routed expert. `dispatch_bytes`: bytes per element on the dispatch
    and its backward twin (fp8 + one fp32 scale per 128: 1 + 4/128, deep_ep/buffer.py:340-343
    @567632d); the combine and its twin move act_bytes. `gather` (the allgather dispatcher,
    Megatron-Core's default: megatron-core 0.15.3 transformer/moe/token_dispatcher.py
    MoEAllGatherTokenDispatcher gathers every rank's tokens over the EP group, and the combine
    reduce-scatters them back): an all-gather and a reduce-scatter of EP × the rank's tokens."""

    experts: float = 0.0        # routed experts E
    groups: float = 0.0         # n_group (0: every expert allowed)
    group_topk: float = 0.0     # topk_group: groups a token may use
    dedup: bool = False
    dispatch_bytes: Optional[float] = None   # None: act_bytes
    gather: bool = False


def ep_reach(top_k: Num, route: EpRoute, ep: Num, per_domain: Num) -> tuple[Num, Num]:
    """(domains, ranks) a token's k experts sit in, expected under balanced routing: the k
    uniform over the experts of the M domains it may use (E/EP contiguous per rank, N = ⌈EP/
    k_dom⌉ domains, M = N or, with group-limited routing, topk_group × ⌈N/n_group⌉ ≤ N; DeepSeek-V3
    report Sec. 2.1.2, Megatron-Core transformer_config.py:477-493 moe_router_num_groups).
    D = M·(1 − Π_{i<k} (E_M − E/N − i)/(E_M − i)) with E_M = M·E/N; ranks alike with E/EP."""
    ep_f = np.maximum(np.asarray(ep, dtype=float), 1.0)
    k_dom = np.minimum(np.maximum(np.asarray(per_domain, dtype=float), 1.0), ep_f)
    n_dom = np.ceil(ep_f / k_dom)
    e = float(route.experts)
    m = n_dom
    if route.groups > 0 and 0 < route.group_topk < route.groups:
        m = np.minimum(n_dom, route.group_topk * np.ceil(n_dom / route.groups))
    e_m = m * e / n_dom
    miss_dom, miss_rank = np.ones_like(m), np.ones_like(m)
    for i in range(int(top_k)):
        miss_dom = miss_dom * np.clip((e_m - e / n_dom - i) / np.maximum(e_m - i, 1.0), 0.0, 1.0)
        miss_rank = miss_rank * np.clip((e_m - e / ep_f - i) / np.maximum(e_m - i, 1.0), 0.0, 1.0)
    return out(m * (1.0 - miss_dom)), out(m * k_dom * (1.0 - miss_rank))


def ep_time_per_layer(tokens_per_rank: Num, hidden: Num, top_k: Num, ep: Num, stride: Num,
                      gpus_per_domain: Num, fab: Fabric, act_bytes: Num = 2.0,
                      rounds: Num = 2.0, route: EpRoute = EpRoute()) -> Num:
    """MoE all-to-all: `rounds` dispatch + combine pairs per MoE layer (forward, backward, and
    once more per layer that full recompute re-runs: Megatron-Core core_v0.15.3 transformer_
    block.py:668 and 456-486 checkpoint whole layers, token dispatcher included); 0 at EP 1.
    Per token: alltoall, k copies of its h-vector (NCCL's all-to-all, the share bound off the
    domain on the NIC); dedup, D·(N−1)/N copies on the NIC and R·(k_dom−1)/k_dom on NVLink
    (ep_reach, topology.routed_all_to_all_time); gather, NCCL's ring all-gather and
    reduce-scatter over the ETP × EP group (`stride` = ETP), every token to every rank."""
    tokens = np.asarray(tokens_per_rank, dtype=float) * hidden
    per_domain = members_per_domain(ep, stride, gpus_per_domain)
    d_bytes = act_bytes if route.dispatch_bytes is None else route.dispatch_bytes
    if route.gather:   # over the expert TP × EP group (tp_ep_group): ETP·EP adjacent ranks
        n = np.maximum(ep, 1.0) * np.asarray(stride, dtype=float)
        whole = tokens * n * act_bytes   # every rank's tokens, gathered
        near = members_per_domain(n, 1.0, gpus_per_domain)
        pair = sum(topo_collective_time(kind, whole, n, near, fab)
                   for kind in ("all-gather", "reduce-scatter"))
    elif route.dedup and route.experts > 0:
        doms, ranks = ep_reach(top_k, route, ep, per_domain)
        k_dom = np.minimum(np.asarray(per_domain, dtype=float), np.maximum(ep, 1.0))
        n_dom = np.ceil(np.maximum(ep, 1.0) / k_dom)
        net = tokens * np.asarray(doms) * (n_dom - 1.0) / n_dom
        nvl = tokens * np.asarray(ranks) * (k_dom - 1.0) / k_dom
        pair = sum(routed_all_to_all_time(net * b, nvl * b, ep, per_domain, fab)
                   for b in (d_bytes, act_bytes))
    else:
        pair = sum(topo_collective_time("all-to-all", tokens * top_k * b, ep, per_domain, fab)
                   for b in (d_bytes, act_bytes))
    return out(np.where(np.asarray(ep) > 1, rounds * np.asarray(pair), 0.0))


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


def zero3_unit_times(unit_params: Num, gather_bytes: Num, reduce_bytes: Num, n: Num,
                     stride: Num, gpus_per_domain: Num, fab: Fabric) -> tuple[Num, Num]:
    """ZeRO-3 / FSDP, one unit (a layer, or the embedding and output layer): (all-gather of its
    parameters in the gather dtype, reduce-scatter of its gradients in the reduce dtype) over
    the n sharding ranks, `stride` GPUs apart."""
    per_domain = members_per_domain(n, stride, gpus_per_domain)
    return (topo_collective_time("all-gather", unit_params * gather_bytes, n, per_domain, fab),
            topo_collective_time("reduce-scatter", unit_params * reduce_bytes, n, per_domain, fab))


def hsdp_replica_time(unit_params: Num, reduce_bytes: Num, shard: Num, n: Num, stride: Num,
                      gpus_per_domain: Num, fab: Fabric) -> Num:
    """Hybrid sharding (HSDP), one unit: the all-reduce of its gradient shard (unit_params /
    shard × reduce bytes) across the n / shard replicas, which sit `stride` × shard GPUs apart
    (each replica a contiguous shard group); 0 where the shard group is all of n. PyTorch
    FSDP2 runs it right after each reduce-scatter, on the reduce-scatter's side stream
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py `foreach_reduce`: reduce_scatter
    then all_reduce over the replicate group), so it overlaps the backward as the
    reduce-scatter does; Megatron-FSDP's hybrid (outer) data-parallel reduction likewise."""
    shard = np.asarray(shard, dtype=float)
    replicas = np.maximum(np.asarray(n, dtype=float) / np.maximum(shard, 1.0), 1.0)
    member_stride = np.asarray(stride, dtype=float) * shard
    per_domain = members_per_domain(replicas, member_stride, gpus_per_domain)
    t = topo_collective_time("all-reduce", np.asarray(unit_params, dtype=float) * reduce_bytes
                             / np.maximum(shard, 1.0), replicas, per_domain, fab)
    return out(np.where(replicas > 1, np.asarray(t), 0.0))


def zero3_time_per_micro_batch(gather: Num, reduce: Num, edge_gather: Num, edge_reduce: Num,
                               layer_fwd: Num, layer_bwd: Num, units: Num, regathers: Num,
                               once: Num, micro_batches: Num, prefetch_depth: Num,
                               slowdown: Num) -> tuple[Num, Num]:
    """(communication, exposed) of ZeRO-3 per micro-batch over `units` layers: each layer's
    gather g hidden behind its forward as far as the prefetch reaches (overlap.
    layerwise_exposed), again `regathers` times in backward with the reduce-scatter r
    (overlap.backward_exposed); the edge layers' g_e and r_e exposed. Where `once` (a pipeline
    stage kept gathered to the last micro-batch), the forward gathers run once per step and the
    reduce-scatters after the last backward, behind nothing: 1/m of a step per micro-batch."""
    g, r = gather, reduce
    g_b = g * regathers
    share = np.where(once, 1.0 / np.maximum(micro_batches, 1.0), 1.0)
    fwd = share * (ov.layerwise_exposed(g, layer_fwd, units, prefetch_depth, slowdown)
                   + edge_gather)
    bwd = np.where(once, ov.backward_exposed(g_b, 0.0, layer_bwd, units, prefetch_depth, slowdown)
                   + share * (units * r + edge_reduce),
                   ov.backward_exposed(g_b, r, layer_bwd, units, prefetch_depth, slowdown)
                   + edge_reduce)
    total = units * (share * (g + r) + g_b) + share * (edge_gather + edge_reduce)
    return total, fwd + bwd


def dp_reduction_times(grad_bytes: Num, param_gather_bytes: Num, sharded: Num, n: Num,
                       stride: Num, gpus_per_domain: Num, fab: Fabric) -> tuple[Num, Num]:
    """(gradient reduction, gather of the updated parameters) over the n data-parallel ranks,
    `stride` GPUs apart: an all-reduce of the gradients, or where `sharded` (ZeRO ≥ 1) a
    reduce-scatter and an all-gather of the parameters (0 otherwise)."""
    per_domain = members_per_domain(n, stride, gpus_per_domain)
    red = np.where(sharded, topo_collective_time("reduce-scatter", grad_bytes, n, per_domain, fab),
                   topo_collective_time("all-reduce", grad_bytes, n, per_domain, fab))
    gather = np.where(sharded, topo_collective_time("all-gather", param_gather_bytes, n,
                                                    per_domain, fab), 0.0)
    return red, gather


def dp_time_per_step(reduction: Num, gather: Num, buckets: Num, times: Num, overlap: Num,
                     backward: Num, forward: Num, slowdown: Num,
                     last_buckets: Num | None = None) -> tuple[Num, Num]:
    """(communication, exposed) of the DP reduction per step: the reduction run `times` times
    (ZeRO-2 reduce-scatters every micro-batch) bucketed behind the backward, the gather behind
    the next forward (overlap.bucketed_exposed; all exposed without `overlap`). `last_buckets`:
    the count the step's last reduced and first gathered bucket leaves (the one holding the
    embedding, overlap.bucket_count); it prices the gather and a once-per-step reduction."""
    last = buckets if last_buckets is None else last_buckets
    once = np.where(np.asarray(times) > 1, buckets, last)
    exp = (times * ov.bucketed_exposed(reduction, backward, once, overlap, slowdown)
           + ov.bucketed_exposed(gather, forward, last, overlap, slowdown))
    return times * reduction + gather, exp


def pipeline_step_time(micro_batch_time: Num, micro_batches: Num, stages: Num,
                       chunks: Num = 1) -> tuple[Num, Num]:
    """(busy time, bubble time) of a pipeline: m·t_mb busy and (p−1)/v·t_mb idle (Narayanan
    Eq. 1 and Sec. 2.2). With p = 1 the bubble is 0."""
    t = np.asarray(micro_batch_time, dtype=float)
    busy = np.asarray(micro_batches, dtype=float) * t
    bubble = np.asarray(bubble_slots(stages, chunks)) * t
    return out(busy), out(bubble)


def optimizer_time(local_state_bytes: Num, hbm_bytes_per_s: Num) -> Num:
    """The optimizer step: the local weights, gradients and states read and written once at HBM
    speed."""
    return memory_bound_time(2.0 * np.asarray(local_state_bytes, dtype=float), hbm_bytes_per_s)


def optimizer_phase_time(gpu_s: Num, host_s: Num) -> Num:
    """The optimizer step as the step sees it: max(GPU update, host time). The update runs
    eagerly after a host sync (Megatron-Core reads the gradient norm back, NVIDIA/Megatron-LM
    core_v0.15.3 megatron/core/optimizer/clip_grads.py:133 `total_norm.item()`), so the GPU
    waits while the host issues the per-parameter kernels and the loop's next step; the
    longer of the two sets the phase."""
    return out(np.maximum(np.asarray(gpu_s, dtype=float), np.asarray(host_s, dtype=float)))


def offload_time(stage_params: Num, shard: Num, state_bytes: tuple[float, float, float],
                 pcie_bytes_per_s: Num, host_update_bytes_per_s: Num) -> Num:
    """ZeRO-Offload of the optimizer: this rank's gradients down and weights up over PCIe, and
    the update at host speed over its weights, gradients and K optimizer bytes per parameter
    (read and written)."""
    w_b, g_b, k_b = state_bytes
    local = stage_params / shard
    return out(local * (g_b + w_b) / pcie_bytes_per_s
               + local * (k_b + w_b + g_b) * 2.0 / host_update_bytes_per_s)


def paged_optimizer_time(paged_bytes: Num, pcie_bytes_per_s: Num) -> Num:
    """A paged optimizer's states paged to the host: each step brings them to the GPU for the
    update (bitsandbytes prefetch_state) and the driver evicts them again under pressure, twice
    their bytes over the GPU's host link; the update itself runs on the GPU (optimizer_time)."""
    return out(2.0 * np.asarray(paged_bytes, dtype=float) / np.asarray(pcie_bytes_per_s, dtype=float))


def activation_offload_exposed(layer_saved_bytes: Num, pcie_bytes_per_s: Num, layer_fwd_s: Num,
                               layer_bwd_s: Num) -> Num:
    """One layer's PCIe time that its compute does not hide under CPU activation offload: its
    saved tensors go device-to-host on a side stream while the next layer computes forward,
    and come back host-to-device (prefetched) while the layer after it computes backward
    (torchtune OffloadActivations, use_streams=True): max(0, S/B − t_fwd) + max(0, S/B − t_bwd)
    with S the layer's saved bytes and B the GPU's host link."""
    move = np.asarray(layer_saved_bytes, dtype=float) / np.asarray(pcie_bytes_per_s, dtype=float)
    return out(np.maximum(move - layer_fwd_s, 0.0) + np.maximum(move - layer_bwd_s, 0.0))


def compose_step(per_micro_batch: list[Num], micro_batches: Num, stages: Num, chunks: Num,
                 per_step: list[Num], split_backward: dict[str, Num] | None = None,
                 compute: Num = 0.0) -> tuple[Num, Num]:
    """(step time, bubble): t_mb = Σ per-micro-batch terms; step = m·t_mb + (p−1)/v·t_mb +
    Σ per-step terms (Narayanan Eq. 1), summed in the order given. `split_backward` maps a
    schedule that defers the weight gradient (ZB-H1, DualPipe, DualPipeV) to the rows that run
    it; there the bubble is schedules.bubble_time's on the micro-batch's `compute`, a third
    forward and two thirds backward, taken in place of (p−1)/v·t_mb."""
    t_mb = sum(per_micro_batch)
    busy, bubble = pipeline_step_time(t_mb, micro_batches, stages, chunks)
    step = busy + bubble
    for term in per_step:
        step = step + term
    plain = bubble
    for name, rows in (split_backward or {}).items():
        if not np.any(rows):
            continue
        b = sched.bubble_time(name, stages, compute / 3.0, 2.0 * compute / 3.0)
        step = np.where(rows, step - plain + b, step)
        bubble = np.where(rows, b, bubble)
    return out(step), out(bubble)
