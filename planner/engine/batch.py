"""Global-batch arithmetic: B_global = b × a × N_dp (TP, PP and CP never multiply the batch)."""

from __future__ import annotations

import numpy as np

from ._array import Num, out


def global_batch(micro_batch: Num, accumulation: Num, data_parallel: Num) -> Num:
    """Samples per optimizer step: b × a × N_dp. Seed: 4 × 8 × 8 = 256."""
    return out(np.asarray(micro_batch) * accumulation * data_parallel)


def accumulation_steps(global_batch_size: Num, micro_batch: Num, data_parallel: Num) -> Num:
    """a = B_global / (b × N_dp); meaningful only where batch_divides() holds."""
    return out(np.asarray(global_batch_size) / (np.asarray(micro_batch) * data_parallel))


def batch_divides(global_batch_size: Num, micro_batch: Num, data_parallel: Num) -> Num:
    """True where B_global is a whole multiple of b × N_dp (Megatron's and torchtitan's rule)."""
    per_step = np.asarray(micro_batch, dtype=np.int64) * np.asarray(data_parallel, dtype=np.int64)
    g = np.asarray(global_batch_size, dtype=np.int64)
    ok = (g % per_step == 0) & (g >= per_step)
    return bool(ok) if np.ndim(ok) == 0 else ok
