"""Global-batch arithmetic: B_global = b × a × N_dp (TP, PP and CP never multiply the batch)."""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Mask, Num, out
from planner.engine.divisors import top_by_gcd


def global_batch(micro_batch: Num, accumulation: Num, data_parallel: Num) -> Num:
    """Samples per optimizer step: b × a × N_dp. Seed: 4 × 8 × 8 = 256."""
    return out(np.asarray(micro_batch) * accumulation * data_parallel)


def accumulation_steps(global_batch_size: Num, micro_batch: Num, data_parallel: Num) -> Num:
    """a = B_global / (b × N_dp); meaningful only where batch_divides() holds."""
    return out(np.asarray(global_batch_size) / (np.asarray(micro_batch) * data_parallel))


def batch_divides(global_batch_size: Num, micro_batch: Num, data_parallel: Num) -> Mask:
    """True where B_global is a whole multiple of b × N_dp (Megatron's and torchtitan's rule)."""
    per_step = np.asarray(micro_batch, dtype=np.int64) * np.asarray(data_parallel, dtype=np.int64)
    g = np.asarray(global_batch_size, dtype=np.int64)
    ok = (g % per_step == 0) & (g >= per_step)
    return bool(ok) if np.ndim(ok) == 0 else ok


def dp_friendly_batch(target_sequences: float, gpus: int, tolerance: float = 0.10) -> int:
    """The global batch (sequences) within ±`tolerance` of the target with the largest
    gcd(B, GPUs): B = b × a × DP needs DP | B, and DP = GPUs ÷ (TP·PP·CP) runs over divisors of
    the GPU count, so every DP dividing that gcd stays open (B = a multiple of 240 on 240 GPUs
    lets TP 8 use DP 30; a power of two there leaves only DP 16 and odd model-parallel splits).
    Ties: the closest to the target, then the smaller. Powers of two on power-of-two clusters
    come back unchanged."""
    t = float(target_sequences)
    lo = max(1, int(np.floor(t * (1 - tolerance))))
    hi = max(lo, int(np.ceil(t * (1 + tolerance))))
    return top_by_gcd(int(gpus), lo, hi, 1, t)[0]  # closed form: no scan of [lo, hi]
