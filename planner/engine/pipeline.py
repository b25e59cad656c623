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
                            chunks: Num = 1, stage_layers: Num | None = None,
                            short_chunk: Num = 0) -> Num:
    """Micro-batches whose activations a stage holds at its peak (Korthikanti Sec. 4.2.3).

    GPipe runs all m forwards first: m. 1F1B: stage i (0-based) holds min(p − i, m).
    Interleaved 1F1B (v chunks of L/(p·v) layers): Megatron's schedule runs
    2·(p − i − 1) + (v − 1)·N warm-up chunk forwards on stage i (N = vp_group_size, p where p
    divides m), then one more before its first backward, so it holds
    min(2(p − i − 1) + (v − 1)N + 1, m·v) chunks, ÷v in stage units; with N = p on the
    first stage that is p·(1 + (p−1)/(p·v)) (Korthikanti Eq. 6), on the last ((v−1)p + 1)/v
    (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches); with
    `stage_layers` (the stage's layers, one chunk `short_chunk` short of the others) the chunks
    are counted one by one (interleaved_in_flight).
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
        return interleaved_in_flight(p, m, i, v, v if stage_layers is None else stage_layers,
                                     short_chunk)
    if schedule == "dualpipe":
        return out(p + 1.0 + 0.0 * i)
    if schedule == "dualpipev":
        return out(p + 1.0 / DUALPIPE_HALVES + 0.0 * i)
    return out(one_f_one_b)


def vp_group_size(stages: Num, micro_batches: Num) -> Num:
    """Megatron's micro-batch group N per virtual stage: the pipeline size p, its default
    (core_v0.15.3 model_parallel_config.py:395-396), where that is valid, else the smallest
    valid one, which --microbatch-group-size-per-virtual-pipeline-stage must then state: the
    interleaved schedule wants p ≤ N ≤ m and m mod N either 0 or ≥ p (schedules.py:975-995).
    N = m always qualifies; m < p (no valid N, the interleaving rule refuses it) gives p."""
    p = np.asarray(stages, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    n = np.broadcast_to(p, np.broadcast_shapes(p.shape, m.shape)).copy()
    def done(g: np.ndarray) -> np.ndarray:
        r = np.mod(m, g)
        return (r == 0) | (r >= p) | (g >= m)
    ok = done(n)
    while not np.all(ok):   # ends by N = m; in practice a few steps past p
        n = np.where(ok, n, n + 1.0)
        ok = done(n)
    return out(n)


def interleaved_in_flight(stages: Num, micro_batches: Num, stage_index: Num, chunks: Num,
                          stage_layers: Num, short_chunk: Num) -> Num:
    """micro_batches_in_flight("interleaved", …) where one chunk of the stage holds fewer layers
    than the others: the layers whose activations the stage holds, ÷ its layers, in the same
    "full stage for one micro-batch" units.

    The stage's L_s layers sit in v chunks of c = ceil(L_s/v) layers but one, short by
    v·c − L_s: Megatron's first chunk of the first stage and last chunk of the last stage where
    the embedding and the loss count as layers (stages.layers_split_valid), `short_chunk` the
    index of that chunk (0 or v − 1). Megatron's schedule table (core_v0.15.3
    schedules.py:753-780, get_schedule_table) runs forwards in groups of N micro-batches
    (vp_group_size), chunk 0 for the group, then chunk 1, …; the F = min(2(p − i − 1) +
    (v − 1)·N + 1, m·v) forwards before stage i's first backward (get_pp_rank_microbatches,
    :728-729) leave chunk k with n_k = ⌊F/(vN)⌋·N + clip(F mod vN − k·N, 0, N) micro-batches
    (F passes the first group by at most 2p − 1 − N < p forwards, all of chunk 0), or m each
    when F = m·v. Held layers Σ n_k·c_k = c·F − short·n_short, over L_s. With equal chunks
    this is F/v; on Llama 3 405B's first stage (p 16, v 8, m 32, chunk 0 empty) 112/7 = 16
    where equal chunks give 17.875."""
    p = np.asarray(stages, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    v = np.asarray(chunks, dtype=float)
    layers = np.asarray(stage_layers, dtype=float)
    i = np.asarray(stage_index, dtype=float)
    n = np.asarray(vp_group_size(p, m), dtype=float)
    f = np.minimum(2.0 * (p - i - 1.0) + (v - 1.0) * n + 1.0, m * v)
    c = np.ceil(layers / np.maximum(v, 1.0))
    short = v * c - layers
    group = v * n
    n_short = np.where(f >= m * v, m, np.floor(f / group) * n + np.clip(
        np.mod(f, group) - np.asarray(short_chunk, dtype=float) * n, 0.0, n))
    return out((c * f - short * n_short) / np.maximum(layers, 1.0))
