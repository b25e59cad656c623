"""Failure and checkpoint arithmetic: what a checkpoint holds, how long it takes to write, how
often the job fails, what a restart costs, the goodput, time to train, and stragglers.

The interval and waste formulas (Young 1974, Daly 2006 Eq. 37, δ/τ + τ/(2M) + R/M) live in
``checkpoint.py``; this module supplies their inputs δ, M and R and consumes their output.
Sources: Narayanan et al. SC21 Sec. 5.10 (1T checkpoint 13.8 TB written at 273 GB/s);
Llama 3 (Dubey et al. 2024, Sec. 3.3.4: 419 unexpected interruptions in 54 days);
MegaScale (Jiang et al., NSDI 2024: diagnosis < 10 min, catch-up within 15 min).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

# The small items of a checkpoint: (bytes each, who writes one). Scopes: "job" = written once
# (by rank 0), "gpu" = one per rank, "dp" = one per data-parallel rank. Sizes are order-of-
# magnitude estimates; they are eight or more orders below the model states and never bind.
SMALL_ITEMS: dict[str, tuple[float, str, str]] = {
    "LR scheduler": (1e3, "job",
                     "step count, base and last LR per parameter group, schedule settings: "
                     "a few dozen numbers, ~1 kB pickled"),
    "RNG states": (1e4, "gpu",
                   "torch CPU generator 5,056 B + NumPy and Python Mersenne-Twister states "
                   "~2.5 kB each + CUDA Philox seed/offset 16 B per generator: ~10 kB per rank"),
    "data-loader cursor": (1e3, "dp",
                           "consumed samples, epoch, shuffle seed, offsets into each dataset "
                           "of a blend: ~1 kB per data-parallel rank"),
    "loss scale": (16.0, "job",
                   "dynamic loss scale (fp32) and growth counter: 16 B (bf16 runs keep 1.0)"),
    "parallel layout metadata": (4e3, "gpu",
                                 "TP/PP/DP/ZeRO degrees and a shard index (tensor name, global "
                                 "shape, offsets, ~100 B per tensor): ~4 kB per rank"),
}


def shard_bytes(total: Num, tp: Num, pp: Num, shards: Num) -> Num:
    """Bytes one rank writes of a state split over TP·PP ranks and `shards` ZeRO ranks:
    total / (TP·PP·shards). Replicated states pass shards = 1 (one DP replica writes)."""
    return out(np.asarray(total, dtype=float) / (np.asarray(tp) * np.asarray(pp) * shards))


def writing_ranks(tp: Num, pp: Num, shards: Num) -> Num:
    """Ranks that write a state: TP·PP·shards (no duplicates: a replicated state is written by
    one data-parallel replica only)."""
    return out(np.asarray(tp) * np.asarray(pp) * np.asarray(shards, dtype=float))


def write_time(size: Num, storage_bytes_per_s: Num, writers: Num, link_bytes_per_s: Num) -> Num:
    """size ÷ min(aggregate storage write bandwidth, writers × link bandwidth per writer).

    The file system or the writers' network links, whichever binds. Narayanan et al. (SC21,
    Sec. 5.10): 13.8 TB at 273 GB/s → 50.5 s.
    """
    link = np.asarray(writers, dtype=float) * link_bytes_per_s
    return out(np.asarray(size, dtype=float) / np.minimum(storage_bytes_per_s, link))


def copy_stall(bytes_per_gpu: Num, pcie_bytes_per_s: Num) -> Num:
    """Asynchronous checkpointing blocks training only to copy the GPU's shard to host memory:
    bytes per GPU ÷ PCIe bandwidth. The write to storage then runs in the background."""
    return out(np.asarray(bytes_per_gpu, dtype=float) / pcie_bytes_per_s)


def job_mtbf(component_mtbf: Num, components: Num) -> Num:
    """Job MTBF = component MTBF ÷ component count (independent, exponentially distributed
    failures; any one stops a synchronous job). Per GPU: M_gpu / N; per node: M_node / nodes."""
    return out(np.asarray(component_mtbf, dtype=float) / components)


def mtbf_from_interruptions(period: Num, interruptions: Num) -> Num:
    """Observed mean time between interruptions: period ÷ count.
    Llama 3: 54 days × 24 h ÷ 419 = 3.09 h."""
    return out(np.asarray(period, dtype=float) / interruptions)


def reload_time(size: Num, read_bytes_per_s: Num) -> Num:
    """Time to read the last checkpoint back: size ÷ aggregate read bandwidth (Narayanan:
    13.8 TB at 1 TB/s peak read → 13.8 s)."""
    return out(np.asarray(size, dtype=float) / read_bytes_per_s)


def restart_time(detect: Num, reschedule: Num, reload: Num, warmup: Num) -> Num:
    """R = detect + reschedule + reload + warm-up: the time from a failure to training again."""
    return out(np.asarray(detect, dtype=float) + reschedule + reload + warmup)


def goodput(waste: Num) -> Num:
    """Fraction of wall-clock time that advances training: 1 − waste."""
    return out(1.0 - np.asarray(waste, dtype=float))


def train_time(tokens: Num, tokens_per_s: Num, goodput_fraction: Num = 1.0) -> Num:
    """Wall-clock time to train a token budget: (tokens ÷ tokens/s) ÷ goodput."""
    return out(np.asarray(tokens, dtype=float) / tokens_per_s / goodput_fraction)


def gpu_hours(seconds: Num, gpus: Num) -> Num:
    """GPU-hours: wall-clock seconds × GPUs ÷ 3600."""
    return out(np.asarray(seconds, dtype=float) * gpus / 3600.0)


def straggler_step_time(step_time: Num, slowdown: Num) -> Num:
    """A synchronous step waits for its slowest rank: one GPU at ×s makes every step ×s."""
    return out(np.asarray(step_time, dtype=float) * np.maximum(slowdown, 1.0))


def gpus_lost_to_eviction(gpus_per_node: Num, replica_gpus: Num) -> Num:
    """GPUs idled by evicting one node with no spare: the whole data-parallel replicas that
    share it, i.e. ⌈node / replica⌉ · replica (a node when TP·PP ≤ node, else one replica)."""
    r = np.asarray(replica_gpus, dtype=float)
    return out(np.ceil(np.asarray(gpus_per_node, dtype=float) / r) * r)


def evicted_throughput_fraction(gpus: Num, gpus_lost: Num) -> Num:
    """Throughput after eviction relative to nominal, assuming linear scaling in DP:
    (N − lost) / N."""
    n = np.asarray(gpus, dtype=float)
    return out((n - gpus_lost) / n)


def break_even_slowdown(gpus: Num, gpus_lost: Num) -> Num:
    """Slowdown above which evicting the straggler wins (ignoring the one restart):
    N / (N − lost)."""
    n = np.asarray(gpus, dtype=float)
    return out(n / (n - gpus_lost))
