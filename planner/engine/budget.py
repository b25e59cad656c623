"""The per-GPU memory budget of one pipeline stage, item by item.

Composes the formulas of memory.py (ZeRO states), activations.py (stored activations) and
pipeline.py (micro-batches in flight). Everything broadcasts over candidate arrays.
Sources: ZeRO (Rajbhandari et al. SC20) Sec. 5; Korthikanti et al. 2022 Sec. 4; the vocabulary
padding of Megatron-LM (ECOSYSTEM.md §2.1: a multiple of 128·TP).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out
from planner.engine.memory import state_split_bytes

OFFLOAD_NONE, OFFLOAD_CPU, OFFLOAD_NVME = 0, 1, 2


def padded_vocab(vocab: Num, tp: Num, multiple: int = 128) -> Num:
    """Megatron pads the vocabulary to a multiple of 128·TP: ceil(V/(128t))·128t."""
    unit = multiple * np.asarray(tp, dtype=float)
    return out(np.ceil(np.asarray(vocab, dtype=float) / unit) * unit)


def stage_params(layers_on_stage: Num, layer_params: Num, expert_layer_params: Num, tp: Num,
                 ep: Num, embedding: Num = 0.0, head: Num = 0.0,
                 etp: Num | None = None) -> tuple[Num, Num]:
    """Parameters one GPU of a stage holds: (dense part, expert part).

    Dense layer weights and the vocabulary-parallel embedding/head split over TP; expert weights
    over EP × ETP (Megatron's --expert-tensor-parallel-size, TP when not given).
    """
    n = np.asarray(layers_on_stage, dtype=float)
    t = np.asarray(tp, dtype=float)
    et = t if etp is None else np.asarray(etp, dtype=float)
    dense = (n * layer_params + embedding + head) / t
    experts = n * np.asarray(expert_layer_params, dtype=float) / (np.asarray(ep, dtype=float) * et)
    return out(dense), out(experts)


def sharded_states(dense_params: Num, expert_params: Num, zero: Num, dense_shard: Num,
                   expert_shard: Num, weight_bytes: Num, grad_bytes: Num,
                   k_bytes: Num) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer) bytes on the GPU under ZeRO: dense parameters shard over
    the data-parallel group, expert parameters over the expert-data-parallel group."""
    d = state_split_bytes(dense_params, zero, dense_shard, weight_bytes, grad_bytes, k_bytes)
    e = state_split_bytes(expert_params, zero, expert_shard, weight_bytes, grad_bytes, k_bytes)
    return out(np.asarray(d[0]) + e[0]), out(np.asarray(d[1]) + e[1]), out(np.asarray(d[2]) + e[2])


def offloaded(weights: Num, optimizer: Num, offload_optimizer: Num, offload_params: Num,
              zero: Num) -> tuple[Num, Num]:
    """(weights, optimizer) left on the GPU after ZeRO-Offload/Infinity moves them to CPU or
    NVMe. Parameter offload exists only with ZeRO-3 (DeepSpeed `offload_param`)."""
    opt_gone = np.asarray(offload_optimizer) > OFFLOAD_NONE
    par_gone = (np.asarray(offload_params) > OFFLOAD_NONE) & (np.asarray(zero) >= 3)
    return out(np.where(par_gone, 0.0, weights)), out(np.where(opt_gone, 0.0, optimizer))
