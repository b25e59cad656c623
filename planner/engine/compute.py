"""Compute time of transformer work on one GPU.

FLOPs: a matmul of an (m×k) by (k×n) costs 2mkn; a layer's forward is 2·(matmul weights)·tokens
plus the attention scores and values, 4·tokens·s_kv·(a·d) (Korthikanti et al. 2022, App. A;
Narayanan et al. 2021, Eq. 3). Backward costs twice the forward.

Achievable rate: peak × measured matmul ceiling (the "MAMF" fraction in the hardware profile)
× a shape factor n/(n + n½) for each GEMM dimension that shrinks under parallelism (the hidden
width per TP rank, the tokens per micro-batch per CP rank): small GEMMs leave tensor cores idle
(half-efficiency point n½, fitted per GPU generation). Memory-bound work (norms, activations,
softmax, dropout, residuals, the optimizer) runs at HBM bandwidth.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

# A fused (Flash) attention backward recomputes the scores QKᵀ and then runs dV, dP, dQ, dK:
# 5 s×s matmuls against the forward's 2, i.e. 2.5× the forward FLOPs, not the 2× of a plain
# GEMM (Dao 2023, FlashAttention-2, Sec. 4 benchmark convention).
FLASH_BACKWARD_FACTOR = 2.5


def shape_efficiency(dim: Num, half_point: Num) -> Num:
    """n/(n + n½): the fraction of the matmul ceiling a GEMM of size n reaches."""
    d = np.asarray(dim, dtype=float)
    return out(d / (d + half_point))


def matmul_rate(peak_flops: Num, ceiling_fraction: Num, hidden_per_rank: Num,
                tokens_per_rank: Num, hidden_half: Num, tokens_half: Num) -> Num:
    """Achieved FLOP/s = peak × ceiling × (h/t)/((h/t) + n½_h) × T/(T + n½_T)."""
    return out(np.asarray(peak_flops, dtype=float) * ceiling_fraction
               * shape_efficiency(hidden_per_rank, hidden_half)
               * shape_efficiency(tokens_per_rank, tokens_half))


def memory_bound_time(bytes_touched: Num, hbm_bytes_per_s: Num) -> Num:
    """Time of bandwidth-bound work: bytes read and written ÷ HBM bandwidth."""
    return out(np.asarray(bytes_touched, dtype=float) / hbm_bytes_per_s)
