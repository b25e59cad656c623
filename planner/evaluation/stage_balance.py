"""Pipeline stage balance: the work each stage adds beyond its layers (the first stage's
embedding; the last stage's output layer, loss and MTP modules), and the stage that paces the
pipeline, the one with the most work per micro-batch (Narayanan et al. 2021, Sec. 2.2: the
pipeline runs at its slowest stage's pace). Stage layers are engine.stages'.
"""

from __future__ import annotations

import numpy as np

from planner.engine import compute as cmp
from planner.engine.arrays import array
from planner.evaluation.candidates import Problem, Shape


def stage_edges(p: Problem, x: Shape, tokens: np.ndarray, rate: np.ndarray,
                lin_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(last stage's edge, first stage's edge) per micro-batch. Last: the output layer's GEMM
    2·V·h per token, forward and two backward passes (two where it is frozen), and per MTP module
    (Megatron-Core builds them on the last stage, multi_token_prediction.py:345-353) its
    projection h×2h and its own pass through the shared output layer (DeepSeek-V3 report Sec.
    2.2); the MTP module's transformer layer is priced as a layer of the stage (pace).
    First: the embedding lookup, memory-bound: its rows read and written forward, the gradient
    read and scatter-added backward (5 passes over tokens·h)."""
    h = p.model.hidden
    f_head = 2.0 * x.vocab_padded * h * tokens / x.tp
    passes = 2.0 if p.tuning.frozen else 3.0  # a frozen output layer: no weight gradient
    mtp_proj = 3.0 * 2.0 * tokens * 2.0 * h * h / x.tp / lin_rate
    head = (1.0 + x.mtp) * passes * f_head / rate + x.mtp * mtp_proj
    embed = cmp.memory_bound_time(5.0 * tokens * h * x.act_bytes,
                                  p.hardware.gpu.hbm_bytes_per_s)
    return array(head), array(embed)


def pace(x: Shape, embed: np.ndarray, head: np.ndarray, layer_terms: list[np.ndarray],
         mirrored: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scale, edge): the stage that paces the pipeline is the one with the most work per
    micro-batch, n_i·u + its edge, u the per-layer sum of `layer_terms` (computed on the middle
    stage's n layers); first: its layers and the embedding; last: its layers, one per MTP
    module, the output layer and the loss; middle stages (PP > 2): their layers. One stage runs
    all L layers and both edges (embed, head: stage_edges). Its terms are the middle's × n_i/n,
    plus its edge. `mirrored` rows (DualPipe: rank i runs stage i for the micro-batches of one
    direction and stage p−1−i for the other's, half of them each, deepseek-ai/DualPipe
    dualpipe.py:345-353) pace by the edge ranks' mean of the first and last stage, or the middle."""
    first, mid, last = x.layers
    n = np.maximum(mid, 1.0)
    u = sum(layer_terms) / n
    single = x.pp == 1
    last_n = np.where(single, first, last) + x.mtp
    t_first = first * u + embed + np.where(single, head + x.mtp * u, 0.0)
    t_last = np.where(single, -np.inf, last_n * u + head)
    t_mid = np.where(x.pp > 2, mid * u, -np.inf)
    at = np.argmax(np.stack([t_first, t_mid, t_last]), axis=0)
    scale = np.choose(at, [np.where(single, last_n, first), mid, last_n]) / n
    edge = np.choose(at, [embed + np.where(single, head, 0.0), 0.0 * n, head])
    if mirrored is not None and np.any(mirrored):
        pair = np.asarray(mirrored) & ~single
        ends = (t_first + t_last) / 2.0 >= t_mid
        scale = np.where(pair, np.where(ends, (first + last_n) / 2.0 / n, mid / n), scale)
        edge = np.where(pair, np.where(ends, (embed + head) / 2.0, 0.0), edge)
    return array(scale), array(edge)
