"""Pipeline schedules: bubble time from per-micro-batch stage times, and what each keeps alive.

With p stages, m micro-batches, per-micro-batch forward t_f and backward t_b on the slowest
stage (the one that paces the pipeline; uneven first/last stages are priced by the caller):
- GPipe and 1F1B idle (p−1)·(t_f + t_b) (Narayanan et al. 2021, Sec. 2.2); what each schedule keeps
  in flight per stage is pipeline.micro_batches_in_flight (one formula for memory and time).
- Interleaved 1F1B with v chunks per rank idles (p−1)·(t_f + t_b)/v (Narayanan Sec. 2.2.2) and
  holds p·(1 + (p−1)/(p·v)) stage-sized units (Korthikanti Sec. 4.2.3, pipeline.py). Llama 3
  ran it with m not a multiple of p (Dubey et al. 2024, Sec. 3.3.2); the bubble formula needs
  only m ≥ p (every rank busy in steady state).
- ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Sec. 3.1): the backward split into
  input-gradient B and weight-gradient W, W deferred into the cool-down: bubble
  (p−1)·(t_f + t_B − t_W), with 1F1B's peak memory (p micro-batches in flight). With W half the
  backward (t_B = t_W = t_b/2) the bubble is (p−1)·t_f: a third of 1F1B's when t_b = 2·t_f.
- DualPipe and DualPipeV (deepseek-ai/DualPipe @3da1bbe, README table, for S stages of F, B, W
  per chunk): bubble (S/2 − 1)·(F&B + B − 3W), F&B the time of an overlapped forward and
  backward pair, taken here as F + B (the pair shares the SMs; what the overlap hides is
  communication, not compute). DualPipe runs S = p stages on p ranks, each rank holding two
  (stage i and its mirror p−1−i: twice the parameters) and p + 1 micro-batches in flight
  (dualpipe/dualpipe.py:359-383, steps 1-4: 2(p/2−h−1) + 2(h+1) forwards, then one more).
  DualPipeV folds it in a V: S = 2p stages of half a rank's layers on p ranks, a rank's
  parameters as 1F1B's and 2p + 1 half-stage chunks in flight (dualpipe/dualpipev.py:331-354).
  In a rank's t_f, t_b, w = s·t_b: DualPipe (p/2 − 1)·(t_f + 2·t_b − 3w), DualPipeV
  (p − 1)/2·(t_f + 2·t_b − 3w); with t_b = 2·t_f and w = t_b/2, (p − 2)·t_f and ZB-H1's
  (p − 1)·t_f.
- Paired chunks (paired_share): DualPipe and DualPipeV run most of a rank's forward chunks
  beside another micro-batch's backward chunk so that each hides the other's communication
  (DeepSeek-V3 report §3.2.1; overlap.paired_exposed prices it); so does Megatron-Core's
  combined 1F1B (--overlap-moe-expert-parallel-comm) in the steady phase of the interleaved
  schedule and without PP. Warm-up and cool-down chunks run alone.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe", "dualpipev")
# The schedules that split the backward into B and W and defer W (their bubble is bubble_time's
# on the micro-batch's compute split into forward and backward).
SPLIT_BACKWARD = ("zb-h1", "dualpipe", "dualpipev")
# Ranks per half of DualPipe's bidirectional pipeline: it runs p/2 − 1 bubble units on p ranks
# (dualpipe/dualpipe.py:334 num_half_ranks = num_ranks // 2).
DUALPIPE_HALVES = 2.0
# Weight-gradient share of a layer's backward: dW and dX are one GEMM each per linear
# (Qi et al. 2023, Sec. 2: T_B ≈ T_W), so W is half the backward FLOPs.
WEIGHT_GRAD_SHARE = 0.5
# A layer's backward against its forward when only the schedule is known: each GEMM's dX and dW
# are one forward-sized GEMM each (Narayanan et al. 2021, Eq. 3; engine/compute.py), so t_b = 2·t_f.
BACKWARD_FORWARD_RATIO = 2.0


def dualpipe_choices(layers: int, pp: int, runs: tuple[str, ...] | list[str]) -> list[str]:
    """DualPipe (PP even) and DualPipeV under PP > 1 where the framework runs them, each only
    where the layers split into whole, equal stages (DualPipe p of them, DualPipeV 2p: the V
    puts the first and the last stage on one rank, so a short first or last stage would not be
    the stage dtplan prices as first or last)."""
    out = ["dualpipe"] if pp > 1 and pp % 2 == 0 and layers % pp == 0 else []
    out += ["dualpipev"] if pp > 1 and layers % (2 * pp) == 0 else []
    return [s for s in out if s in runs]


def bubble_time(schedule: str, stages: Num, t_fwd: Num, t_bwd: Num, chunks: Num = 1,
                weight_grad_share: Num = WEIGHT_GRAD_SHARE) -> Num:
    """Idle time of the slowest stage per step for `schedule` (0 when p = 1)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    p = np.asarray(stages, dtype=float)
    tf = np.asarray(t_fwd, dtype=float)
    tb = np.asarray(t_bwd, dtype=float)
    if schedule == "interleaved":
        b = (p - 1.0) * (tf + tb) / np.asarray(chunks, dtype=float)
    elif schedule == "zb-h1":
        w = np.asarray(weight_grad_share, dtype=float) * tb
        b = (p - 1.0) * np.maximum(tf + (tb - w) - w, 0.0)
    elif schedule in ("dualpipe", "dualpipev"):
        w = np.asarray(weight_grad_share, dtype=float) * tb
        pair = tf + tb                                   # F&B: the overlapped pair's compute
        units = p / DUALPIPE_HALVES - 1.0 if schedule == "dualpipe" else (p - 1.0) / DUALPIPE_HALVES
        b = units * np.maximum(pair + tb - 3.0 * w, 0.0)
    else:
        b = (p - 1.0) * (tf + tb)
    return out(np.where(p > 1, b, 0.0))


def paired_share(schedule: str, stages: Num, micro_batches: Num, chunks: Num = 1) -> Num:
    """Share of the pacing rank's forward chunks that run in a forward-backward pair, on the
    rank with the most chunks alone (clipped to [0, 1]):
    - DualPipe, half-rank 0: steps 4 and 5 pair 2·(m/2 − p + 1) + (p/2 − 1) of its m forward
      chunks, one fewer where it is the middle rank (p = 2: the first pair is split to shorten
      the bubble) (deepseek-ai/DualPipe @3da1bbe dualpipe/dualpipe.py:381-402);
    - DualPipeV, rank 0: 2·(m − 2p + 1) + (p − 1) of its 2m (dualpipe/dualpipev.py:352-373);
    - interleaved 1F1B (Megatron-Core combined 1F1B), rank 0: its m·v chunks less the warm-up
      2(p − 1) + (v − 1)·p + 1, the + 1 the extra forward the overlap schedules so that the
      steady pairs are independent (NVIDIA/Megatron-LM core_v0.15.3
      megatron/core/pipeline_parallel/schedules.py:727-734, micro-batch group = p);
    - 1F1B without PP: m − 1 of m, the first forward and the last backward alone
      (core_v0.15.3 megatron/core/pipeline_parallel/combined_1f1b.py:43-73);
    - any other schedule: 0."""
    p = np.asarray(stages, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    v = np.asarray(chunks, dtype=float)
    if schedule == "dualpipe":
        pairs, total = m - 1.5 * p + 1.0 - np.where(p == 2, 1.0, 0.0), m
    elif schedule == "dualpipev":
        pairs, total = 2.0 * m - 3.0 * p + 1.0, 2.0 * m
    elif schedule == "interleaved":
        pairs = m * v - (2.0 * (p - 1.0) + (v - 1.0) * p + 1.0)
        total = m * v
    elif schedule == "1f1b":
        pairs, total = np.where(p > 1, 0.0, m - 1.0), m
    else:
        pairs, total = np.zeros_like(m), m
    return out(np.clip(pairs / np.maximum(total, 1.0), 0.0, 1.0))
