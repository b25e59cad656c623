"""Communication hidden behind computation, bounded layer by layer (no flat overlap share).

Sharded data parallel (ZeRO-3 / FSDP): each unit (layer) is all-gathered before its compute;
with prefetch the gather of unit i+1 runs on its own stream beside unit i's compute. In steady
state a pass over L units takes L·max(c, g) plus the first gather, which nothing hides (Zhao et
al. 2023, PyTorch FSDP, Sec. 3: prefetching and the rate limiter): exposed = L·beside(g, c) + g.
With no prefetch (blocking gathers, depth 0) every gather is exposed: L·g. In backward the unit's
gather (when re-gathered) and the previous unit's gradient reduce-scatter share the links, so
c_bwd runs beside g + r per unit and the last reduce-scatter, after the final layer, is exposed.

Bucketed gradient reduction (DDP, ZeRO-1/2, Megatron's distributed optimizer): bucket j's
reduction can run only once its gradients exist; the stream starts a bucket into the backward
and must carry D of traffic by the backward's end. Exposed = D/n_b + beside(D·(1 − 1/n_b),
B·(1 − 1/n_b)), the last bucket at least (Li et al. 2020, PyTorch Distributed, Sec. 3.2:
gradient bucketing and overlap). Without overlap (DeepSpeed ZeRO-1/2 default, or Megatron 2021)
the whole D is exposed.

Every overlapped collective slows the compute it runs beside: its kernels hold SMs and HBM
bandwidth, so compute c beside communication a lasts max(c + σ·a, a), exposing max(σ·a, a − c)
of a (beside, one law for every overlap below). σ is the GPU profile's overlap_slowdown:
compute slows 18.9% on average while a collective runs beside it (Lee et al. 2025, arXiv
2507.03114, GPT and Llama layers on A100, H100, MI250, MI210), and, for DeepEP-style kernels
that hold a fixed SM count, the profile's comm_sm_fraction.

Paired forward and backward chunks (DualPipe, DualPipeV, Megatron-Core's combined 1F1B): the
forward chunk of one micro-batch runs beside the backward chunk of another, so each one's
all-to-alls (and DualPipe's PP sends) run under the other's compute (DeepSeek-V3 report
§3.2.1). While the communication kernels run they hold σ of the SMs (§3.2.2: 20 of H800's
132), so compute c runs at 1 − σ for the a seconds they take: the pair lasts
T = max(c + σ·a, a) as above (paired_exposed).

Chunked TP collectives (Transformer Engine userbuffers, --tp-comm-overlap): each collective
split in k chunks, chunk i's transfer beside GEMM chunk i − 1 (split_exposed).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out


def beside(comm: Num, compute: Num, slowdown: Num) -> Num:
    """Exposed time of communication a run beside compute c that it slows by σ while it runs:
    max(σ·a, a − c); the pair lasts c + that, never less than either (the module's law)."""
    a = np.asarray(comm, dtype=float)
    return out(np.maximum(np.asarray(slowdown, dtype=float) * a,
                          a - np.asarray(compute, dtype=float)))


def layerwise_exposed(comm_per_unit: Num, compute_per_unit: Num, units: Num,
                      prefetch_depth: Num = 1, slowdown: Num = 0.0) -> Num:
    """Exposed time of per-unit collectives over a pass of `units` units:
    depth ≥ 1: units·beside(g, c) + g (the first gather waits); depth 0: units·g."""
    g = np.asarray(comm_per_unit, dtype=float)
    n = np.asarray(units, dtype=float)
    pre = n * np.asarray(beside(g, compute_per_unit, slowdown)) + g
    return out(np.where(np.asarray(prefetch_depth) > 0, np.minimum(pre, n * g), n * g))


def split_exposed(comm: Num, compute: Num, splits: Num, slowdown: Num = 0.0) -> Num:
    """Exposed time of a collective split into k chunks, each run beside one chunk of the GEMM
    it feeds or drains (Transformer Engine userbuffers: ring-exchange all-gathers in TP-size
    chunks, pipelined reduce-scatters in 4, NVIDIA/TransformerEngine v2.9 transformer_engine/
    pytorch/module/base.py:302-339): the first chunk waits, the other k − 1 run beside c/k
    each: g/k + (k − 1)·beside(g/k, c/k), between g/k and g."""
    k = np.maximum(np.asarray(splits, dtype=float), 1.0)
    g = np.asarray(comm, dtype=float) / k
    c = np.asarray(compute, dtype=float) / k
    return out(g + (k - 1.0) * np.asarray(beside(g, c, slowdown)))


def backward_exposed(gather_per_unit: Num, reduce_per_unit: Num, compute_per_unit: Num,
                     units: Num, prefetch_depth: Num = 1, slowdown: Num = 0.0) -> Num:
    """Backward of a sharded pass: per unit, c_bwd runs beside its re-gather g (0 if not
    re-gathered) and the reduce-scatter r of the unit after it; the last r runs after the
    backward: layerwise_exposed of g + r, units·beside(g + r, c) + g + r (depth 0:
    units·(g + r))."""
    gr = np.asarray(gather_per_unit, dtype=float) + np.asarray(reduce_per_unit, dtype=float)
    return layerwise_exposed(gr, compute_per_unit, units, prefetch_depth, slowdown)


def bucketed_exposed(comm_total: Num, backward_compute: Num, buckets: Num, overlap: Num = True,
                     slowdown: Num = 0.0) -> Num:
    """Exposed gradient reduction: the last bucket D/n_b after the backward, the others beside
    the backward left once the first is ready, B·(1 − 1/n_b): D/n_b + beside(D·(1 − 1/n_b),
    B·(1 − 1/n_b)) when overlapped (at most D), D if not."""
    d = np.asarray(comm_total, dtype=float)
    nb = np.maximum(np.asarray(buckets, dtype=float), 1.0)
    rest = 1 - 1 / nb
    ov = d / nb + np.asarray(beside(d * rest, np.asarray(backward_compute, dtype=float) * rest,
                                    slowdown))
    return out(np.where(np.asarray(overlap, dtype=bool), np.minimum(ov, d), d))


def bucket_count(grad_elements: Num, bucket_elements: Num, largest_param: Num = 0.0) -> Num:
    """Buckets a gradient buffer splits into, as the exposed last bucket sees them: ⌈elements /
    bucket⌉ (≥ 1; bucket 0 = one bucket per unit, left to the caller), and at most elements /
    largest_param where that is given: a parameter is never split and a bucket closes once it
    holds ≥ bucket elements, so the bucket holding the largest parameter is at least that big
    (NVIDIA/Megatron-LM core_v0.15.3 megatron/core/distributed/param_and_grad_buffer.py:639-661;
    the embedding, first parameter of the model, closes the last bucket reduced and the first
    gathered)."""
    e = np.asarray(grad_elements, dtype=float)
    b = np.asarray(bucket_elements, dtype=float)
    n = np.where(b > 0, np.maximum(np.ceil(e / np.maximum(b, 1.0)), 1.0), 1.0)
    big = np.asarray(largest_param, dtype=float)
    return out(np.where(big > 0, np.maximum(np.minimum(n, e / np.maximum(big, 1.0)), 1.0), n))


def paired_exposed(comm: Num, compute: Num, paired_share: Num, sm_share: Num) -> Num:
    """Exposed time of communication a per micro-batch when a share f of the chunks runs in a
    forward-backward pair whose compute c hides it, the communication kernels holding σ of the
    SMs while they run: (1 − f)·a + f·max(σ·a, a − c). Between 0 and a; the step it enters is
    never below the compute alone (c + max(σ·a, a − c) ≥ c)."""
    a = np.asarray(comm, dtype=float)
    f = np.clip(np.asarray(paired_share, dtype=float), 0.0, 1.0)
    return out((1.0 - f) * a + f * np.clip(np.asarray(beside(a, compute, sm_share)), 0.0, a))
