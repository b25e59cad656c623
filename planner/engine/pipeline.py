"""Pipeline-parallel bubble.

Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM* (SC21), Sec. 2.2: GPipe and 1F1B idle (p−1)/m of the ideal time; the interleaved
schedule with v model chunks per device idles (p−1)/(v·m).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out
from planner.engine.schedules import (BACKWARD_FORWARD_RATIO, DUALPIPE_HALVES, SPLIT_BACKWARD,
                                      bubble_time)


def bubble_slots(stages: Num, chunks: Num = 1, schedule: str = "1f1b") -> Num:
    """Idle micro-batch slots per step, the bubble itself: (p−1)/v (0 for one stage) for 1F1B,
    GPipe and interleaved; for ZB-H1, DualPipe and DualPipeV schedules.bubble_time in slots of
    t_f + t_b with t_b = 2·t_f: ZB-H1 (p−1)·(1 + r − 2·s·r)/(1 + r) = (p−1)/3 (Qi et al. 2023,
    Sec. 3.1), DualPipe (p/2 − 1)·(1 + 2r − 3·s·r)/(1 + r) = (p − 2)/3, DualPipeV (p − 1)/3."""
    if schedule in SPLIT_BACKWARD:
        r = np.asarray(BACKWARD_FORWARD_RATIO, dtype=float)
        return out(np.asarray(bubble_time(schedule, stages, 1.0, r)) / (1.0 + r))
    return out((np.asarray(stages, dtype=float) - 1.0) / np.asarray(chunks, dtype=float))


def bubble_overhead(stages: Num, micro_batches: Num, chunks: Num = 1) -> Num:
    """Bubble time as a fraction of the ideal (bubble-free) time: (p−1)/(v·m) = slots / m."""
    return out(np.asarray(bubble_slots(stages, chunks)) / micro_batches)


def bubble_fraction(stages: Num, micro_batches: Num, chunks: Num = 1) -> Num:
    """Bubble as a fraction of the whole step: (p−1)/(v·m + p−1); for v = 1, (p−1)/(m+p−1).

    Seed check: p = 4, m = 8 → 3/11 = 27.3 %, pipeline efficiency 72.7 %.
    """
    p = np.asarray(stages, dtype=float)
    return out((p - 1.0) / (np.asarray(chunks, dtype=float) * micro_batches + p - 1.0))


def micro_batches_in_flight(schedule: str, stages: Num, micro_batches: Num, stage_index: Num = 0,
                            chunks: Num = 1) -> Num:
    """Micro-batches whose activations a stage holds at its peak (Korthikanti Sec. 4.2.3).

    GPipe runs all m forwards first: m. 1F1B: stage i (0-based) holds min(p − i, m).
    Interleaved 1F1B (v chunks of L/(p·v) layers): Megatron's schedule runs
    2·(p − i − 1) + (v − 1)·p warm-up chunk forwards on stage i, then one more before its first
    backward, so it holds min(2(p − i − 1) + (v − 1)p + 1, m·v) chunks, ÷v in stage units; on the
    first stage that is p·(1 + (p−1)/(p·v)) (Korthikanti Eq. 6), on the last ((v−1)p + 1)/v
    (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches).
    DualPipe: p + 1 on every rank, DualPipeV: 2p + 1 chunks of half a rank's layers, p + 1/2
    (deepseek-ai/DualPipe README table; schedules.py here) -- both need m ≥ 2p (the rules).
    Priced on the rank's own stage: DualPipe's last rank in fact holds p of them of stage 0,
    which it runs for the reverse direction (dualpipe.py:67-77), one of its own.
    Returned in units of "a full stage's layers for one micro-batch".
    """
    p = np.asarray(stages, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    i = np.asarray(stage_index, dtype=float)
    v = np.asarray(chunks, dtype=float)
    one_f_one_b = np.minimum(p - i, m)
    if schedule == "gpipe":
        return out(m + 0.0 * p)
    if schedule == "interleaved":
        chunks_held = np.minimum(2.0 * (p - i - 1.0) + (v - 1.0) * p + 1.0, m * v)
        return out(chunks_held / v)
    if schedule == "dualpipe":
        return out(p + 1.0 + 0.0 * i)
    if schedule == "dualpipev":
        return out(p + 1.0 / DUALPIPE_HALVES + 0.0 * i)
    return out(one_f_one_b)
