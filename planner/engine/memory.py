"""Model-state memory: bytes per parameter for a precision/optimizer recipe, and ZeRO sharding.

Sources: Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models* (SC20), Sec. 3.1 and 5; Megatron-LM keeps an fp32 gradient buffer by default
(ECOSYSTEM.md §1.5 quotes DeepSpeed's estimator: "2 grads16 + 4 grads32 + 4 params32 + 8 Adam").
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import FloatArray, Num, out

# (weight bytes, gradient bytes, master-copy bytes) per parameter for each precision recipe.
# "mixed": 16-bit weights and grads, fp32 master (ZeRO's mixed-precision Adam).
# "mixed-fp32-grads": as mixed but gradients accumulated in fp32 (Megatron's default main_grad).
# "fp8": fp8 GEMMs with bf16 weights kept for the update; state bytes as "mixed".
# "fp32": everything fp32, no separate master copy.
# "bf16-pure": bf16 weights, grads and optimizer moments, no master copy.
PRECISION_RECIPES: dict[str, tuple[float, float, float]] = {
    "mixed": (2.0, 2.0, 4.0),
    "mixed-fp32-grads": (2.0, 4.0, 4.0),
    "fp8": (2.0, 2.0, 4.0),
    "fp32": (4.0, 4.0, 0.0),
    "bf16-pure": (2.0, 2.0, 0.0),
}

# bitsandbytes ≥ 0.46 blockwise 8-bit states: one fp32 absmax per 256 elements of each state
# (bitsandbytes 0.50.2 optim/optimizer.py:514-529; 2048-element blocks before 0.46).
BNB_8BIT_BLOCK = 256

# Optimizer-state bytes per parameter at fp32 (moments), before any master copy.
# Adam/AdamW: m and v (4 + 4). SGD with momentum: one buffer (4). 8-bit Adam (bitsandbytes
# AdamW8bit): two 1-byte moments + an fp32 absmax per 256-element block of each, 2 + 8/256 =
# 2.03125. Paged AdamW (32- or 8-bit, bitsandbytes PagedAdamW*): the same bytes in CUDA managed
# memory that the driver evicts to host under pressure, invisible to
# torch.cuda.max_memory_allocated; resident on the GPU unless the layout pages them to the host
# (--offload-optimizer cpu, at any ZeRO stage: PAGED_STATES below). Adafactor without momentum: factored second moment,
# O(rows + cols) per matrix, counted as 0 per parameter. Muon (KellerJordan/Muon, torch.optim.
# Muon): one momentum buffer for the hidden matrices (4); the embeddings and head it leaves to
# AdamW hold 4 more (evaluation/memory.py adds them: MUON_ADAMW_EXTRA).
OPTIMIZER_STATE_BYTES: dict[str, float] = {
    "adam": 8.0,
    "adamw": 8.0,
    "sgd-momentum": 4.0,
    "sgd": 0.0,
    "adam-8bit": 2.0 + 2.0 * 4.0 / BNB_8BIT_BLOCK,
    "adafactor": 0.0,
    "paged-adamw": 8.0,
    "paged-adamw-8bit": 2.0 + 2.0 * 4.0 / BNB_8BIT_BLOCK,
    "muon": 4.0,
}
# bitsandbytes paged optimizers (0.49.2 optim/optimizer.py:363-381): the moment buffers of a
# parameter with at least 1e5 elements are allocated in CUDA managed memory (functional.py:134
# get_paged), the rest with torch.zeros_like on the GPU; each paged buffer is prefetched to the
# GPU before its parameter's update. Paged to the host (offload_optimizer = cpu), the moments
# cross PCIe twice a step (in for the update, out again under pressure); the fp32 master copy
# and the gradients are ordinary tensors and stay on the GPU, and the update runs on the GPU.
PAGED_STATES = ("paged-adamw", "paged-adamw-8bit")
PAGED_MIN_ELEMENTS = 1e5
# Optimizers whose states are 8-bit codes whatever the parameters' dtype.
EIGHT_BIT_STATES = ("adam-8bit", "paged-adamw-8bit")
# Muon's embedding and output-layer parameters run AdamW: its second moment beyond Muon's one.
MUON_ADAMW_EXTRA = 4.0


def optimizer_bytes_per_param(precision: str, optimizer: str) -> tuple[float, float, float]:
    """(weight, gradient, K) bytes per parameter, K = master copy + optimizer moments (ZeRO's K).

    Mixed-precision Adam: 2 + 2 + (4 + 4 + 4) = 16 bytes, K = 12. With "bf16-pure" the moments
    are stored in bf16 too, halving them (not 8-bit states, which are 8-bit either way).
    """
    w, g, master = PRECISION_RECIPES[precision]
    moments = OPTIMIZER_STATE_BYTES[optimizer]
    if precision == "bf16-pure" and optimizer not in EIGHT_BIT_STATES:
        moments /= 2.0
    return w, g, master + moments


def paged_moment_bytes(precision: str, optimizer: str) -> float:
    """Bytes per parameter a paged optimizer keeps in managed memory: its moments (K less the
    master copy), 0 for an optimizer that pages nothing."""
    if optimizer not in PAGED_STATES:
        return 0.0
    _, _, k = optimizer_bytes_per_param(precision, optimizer)
    return k - PRECISION_RECIPES[precision][2]


# ZeRO's partitioning, once (Rajbhandari Sec. 5.1): the stage from which each model state is
# divided over the N sharding ranks. P_os: optimizer state from stage 1; P_g: gradients from 2;
# P_p: parameters (weights) from 3.
SHARDED_FROM_STAGE = {"weights": 3, "gradients": 2, "optimizer": 1}


def model_state_bytes(params: Num, zero_stage: Num, shard_degree: Num,
                      weight_bytes: Num = 2.0, grad_bytes: Num = 2.0, k_bytes: Num = 12.0) -> Num:
    """Per-GPU bytes of weights, gradients and optimizer state under ZeRO (Rajbhandari Sec. 5):
    the sum of state_split_bytes, i.e.
    stage 0: (w+g+K)Ψ;  stage 1: (w+g)Ψ + KΨ/N;  stage 2: wΨ + (g+K)Ψ/N;  stage 3: (w+g+K)Ψ/N
    where Ψ is the parameters this GPU holds before sharding and N the sharding degree.
    """
    w, g, k = state_split_bytes(params, zero_stage, shard_degree, weight_bytes, grad_bytes,
                                k_bytes)
    return out(np.asarray(w) + g + k)


def state_split_bytes(params: Num, zero_stage: Num, shard_degree: Num,
                      weight_bytes: Num = 2.0, grad_bytes: Num = 2.0,
                      k_bytes: Num = 12.0) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) per GPU under ZeRO; the three sum to model_state_bytes.

    Each item is divided by N from the stage that shards it: optimizer state from stage 1,
    gradients from stage 2, weights from stage 3 (ZeRO's P_os, P_g, P_p).
    """
    psi = np.asarray(params, dtype=float)
    n = np.asarray(shard_degree, dtype=float)
    z = np.asarray(zero_stage)
    def divisor(item: str) -> FloatArray:
        return np.where(z >= SHARDED_FROM_STAGE[item], n, 1.0)
    weights = psi * weight_bytes / divisor("weights")
    grads = psi * grad_bytes / divisor("gradients")
    optim = psi * k_bytes / divisor("optimizer")
    return out(weights), out(grads), out(optim)


def expert_shard_degree(shard: Num, dp_cp: Num, expert_dp: Num) -> Num:
    """Ranks an expert's ZeRO states are divided over: its expert-DP group (TP·CP·DP / (ETP·EP))
    in the shard group's share, expert-DP × S / (DP·CP), at least 1. Megatron-Core splits the
    expert-DP group into as many partial distributed-optimizer instances as the dense DP·CP
    group (parallel_state.py:1447-1452 at d98e8a64); torchtitan's expert FSDP mesh is
    dp_shard·cp·tp / ep (config/configs.py:282-290 at b5bcd76c), the same with ETP 1."""
    s, n, e = (np.asarray(x, dtype=float) for x in (shard, dp_cp, expert_dp))
    return out(np.maximum(e * s / n, 1.0))
