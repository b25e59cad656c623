"""Attention kernel time by kernel (FlashAttention-2 / -3), sequence length, head dim and mask.

FLOPs (Dao 2023, FlashAttention-2, Sec. 4 benchmark convention): forward 4·T·s_kv·(a·d)·f with
f = ½ under a causal mask (the kernel skips the masked tiles), backward 2.5× the forward (it
recomputes QKᵀ: 5 s×s matmuls against the forward's 2).

Rate = peak × fraction(kernel) × s̄/(s̄ + s½) × head-dim factor, where
- fraction is the kernel's forward+backward share of the bf16 peak at long sequences and head
  dim 128 (the GPU profile's efficiency section; FA3 only on Hopper and later, else FA2 runs);
- s̄ is the mean number of keys a query attends to (s_kv, or s_kv/2 causal): short rows leave the
  tile pipeline half empty. s½ ≈ 512 reproduces the shape of FlashAttention-2's A100 curves
  (Dao 2023, Fig. 4: forward+backward, head dim 128, rising from ~0.5 of the 16K rate at 512 to
  ~0.9 at 4K; approximate reading of the figure);
- head dims below 128 use the tensor cores less well: d/(d + d½) ÷ 128/(128 + d½), d½ = 48
  (FlashAttention-3, Shah et al. 2024, Fig. 5: head dim 64 forward at ~3/4 of head dim 128;
  approximate reading), capped at 1 above 128.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out
from planner.engine.compute import FLASH_BACKWARD_FACTOR
from planner.engine.params import attention_score_forward_flops as forward_flops  # 4·T·s_kv·(a·d)·f, once

KERNELS = ("fa2", "fa3")
BACKWARD_FACTOR = FLASH_BACKWARD_FACTOR  # FA2 Sec. 4: backward FLOPs = 2.5 × forward
HEAD_DIM_HALF = 48.0       # FA3 Fig. 5, see module docstring
REFERENCE_HEAD_DIM = 128.0


def kernel_fraction(kernel: str, fa2_fraction: float, fa3_fraction: float | None) -> float:
    """Share of peak the kernel reaches at long sequences; FA3 falls back to FA2 where the GPU
    has no FA3 (fa3_fraction None: pre-Hopper)."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "fa3" and fa3_fraction is not None:
        return float(fa3_fraction)
    return float(fa2_fraction)


def sequence_efficiency(kv_len: Num, causal: bool, half_seq: Num) -> Num:
    """s̄/(s̄ + s½), s̄ = s_kv (or s_kv/2 causal)."""
    s = np.asarray(kv_len, dtype=float) * (0.5 if causal else 1.0)
    return out(s / (s + np.asarray(half_seq, dtype=float)))


def head_dim_efficiency(head_dim: Num) -> Num:
    """d/(d + d½) relative to head dim 128, capped at 1."""
    d = np.asarray(head_dim, dtype=float)
    ref = REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + HEAD_DIM_HALF)
    return out(np.minimum(d / (d + HEAD_DIM_HALF) / ref, 1.0))


def attention_rate(peak_flops: Num, fraction: Num, kv_len: Num, head_dim: Num, causal: bool,
                   half_seq: Num) -> Num:
    """Achieved FLOP/s of a flash kernel: peak × fraction × sequence × head-dim efficiency."""
    return out(np.asarray(peak_flops, dtype=float) * fraction
               * np.asarray(sequence_efficiency(kv_len, causal, half_seq))
               * np.asarray(head_dim_efficiency(head_dim)))


def attention_time(tokens: Num, kv_len: Num, attn_dim: Num, head_dim: Num, causal: bool,
                   peak_flops: Num, fraction: Num, half_seq: Num) -> tuple[Num, Num]:
    """(forward, backward) seconds of one layer's flash attention on one GPU: FLOPs ÷ rate,
    the backward at 2.5× the forward FLOPs."""
    fwd_flops = np.asarray(forward_flops(tokens, kv_len, attn_dim, causal))
    rate = np.asarray(attention_rate(peak_flops, fraction, kv_len, head_dim, causal, half_seq))
    fwd = fwd_flops / rate
    return out(fwd), out(BACKWARD_FACTOR * fwd)
