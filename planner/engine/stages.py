"""Layers per pipeline stage, once for the estimate, the search and the engine-config writers.

Two ways to split L layers over p stages × v chunks:
- dtplan's default: full stages hold ceil(L/(p·v))·v layers; when that overshoots L by 1 or 2,
  the first and last (virtual) stages hold one fewer each (Llama 3's 126 layers on 16 stages,
  Dubey et al. 2024, Sec. 3.3.2; Megatron-LM counts the embedding and the loss as those layers,
  --account-for-{embedding,loss}-in-pipeline-split).
- Stated first/last stage layers, Megatron-Core's --decoder-first/last-pipeline-num-layers
  (num_layers_in_first/last_pipeline_stage, core_v0.15.3 transformer_config.py:1083-1135): a
  stated stage holds that many layers (> 0, a multiple of v under interleaving), the stages not
  stated share the rest evenly (a whole number per stage, a multiple of v). DeepSeek-V3's 61
  layers on PP 16 run as 4 + 14 × 4 + 1 (Megatron-MoE-ModelZoo runtime_configs/benchmarking/
  runtime.conf: PP_FIRST 4, PP_LAST 1).
A stage code of 0 below means "not stated".
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Mask, Num, out

# How many layers the first and last stage may be short of a full stage together and still
# count as a valid split (the Llama 3 recipe takes one off each end).
MAX_STAGE_DEFICIT = 2


def full_stage_layers(layers: Num, stages: Num, chunks: Num = 1) -> Num:
    """Layers on a full (middle) stage: ceil(L/(p·v))·v."""
    per = np.asarray(stages, dtype=float) * np.asarray(chunks, dtype=float)
    return out(np.ceil(np.asarray(layers, dtype=float) / per) * chunks)


def stage_layers(layers: Num, stages: Num, chunks: Num = 1, first: Num = 0,
                 last: Num = 0) -> tuple[Num, Num, Num]:
    """(first, middle, last) layers per stage. Nothing stated (first = last = 0): full =
    ceil(L/(p·v))·v, deficit d = p·full − L, first = full − ceil(d/2), last = full − floor(d/2).
    Stated: those stages hold what is stated, the n other stages (L − stated)/n each; with no
    other stage (p = 2, both stated) the middle is the larger of the two. One stage holds all L."""
    p = np.asarray(stages, dtype=float)
    f, l_ = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    full = np.asarray(full_stage_layers(layers, stages, chunks))
    deficit = p * full - layers
    auto_first = np.where(p > 1, full - np.ceil(deficit / 2), layers)
    auto_last = np.where(p > 1, full - np.floor(deficit / 2), layers)
    stated = (f > 0) | (l_ > 0)
    others: np.ndarray = p - (f > 0).astype(float) - (l_ > 0).astype(float)
    rest = np.asarray(layers, dtype=float) - f - l_
    mid = np.where(others > 0, rest / np.maximum(others, 1.0), np.maximum(f, l_))
    first_n = np.where(stated & (p > 1), np.where(f > 0, f, mid), auto_first)
    last_n = np.where(stated & (p > 1), np.where(l_ > 0, l_, mid), auto_last)
    middle = np.where(stated & (p > 1), mid, full)
    return out(first_n), out(middle), out(last_n)


def stage_deficit(layers: Num, stages: Num, chunks: Num = 1) -> Num:
    """Layers the stages are short of p·v equal chunks: p·ceil(L/(p·v))·v − L."""
    return out(np.asarray(stages, dtype=float) * full_stage_layers(layers, stages, chunks)
               - np.asarray(layers, dtype=float))


def layers_split_valid(layers: Num, stages: Num, chunks: Num = 1, first: Num = 0,
                       last: Num = 0, free_chunks: bool = False) -> Mask:
    """The layer-count rule. Nothing stated: p·v chunks cover L with at most MAX_STAGE_DEFICIT
    layers short, and every stage holds a layer. Under interleaving the first chunk of the first
    stage and the last chunk of the last may be left with no layer (the embedding or the loss
    alone): Megatron-Core builds 0 layers there when the embedding and the loss count as layers
    (get_num_layers_to_build asserts ≥ 0, core_v0.15.3 transformer_block.py:190-201), Llama 3's
    126 layers on PP 16 × v 8 (Dubey et al. 2024 Sec. 3.3.2: "the first model chunk on the first
    stage has only the embedding"). With v = 1 that would be a stage without a layer, so
    p ≤ L there. Stated (Megatron-Core's checks,
    transformer_config.py:1083-1135): PP > 1; each stated stage a multiple of v; the rest
    a whole multiple of v on every other stage (dtplan also wants a layer in every chunk), or
    nothing left where no other stage remains. `free_chunks` (a framework building each virtual
    stage from a layout string): a stated stage needs only a layer in each of its v chunks."""
    p, v = np.asarray(stages, dtype=float), np.asarray(chunks, dtype=float)
    f, l_ = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    auto = (np.asarray(stage_deficit(layers, stages, chunks)) <= MAX_STAGE_DEFICIT) \
        & ((v >= 2) | (p <= layers))
    others: np.ndarray = p - (f > 0).astype(float) - (l_ > 0).astype(float)
    rest = np.asarray(layers, dtype=float) - f - l_
    per = rest / np.maximum(others, 1.0)
    whole = np.where(others > 0, (per >= v) & (np.mod(per, v) == 0) & (np.mod(rest, np.maximum(
        others, 1.0)) == 0), rest == 0)
    if free_chunks:
        edges = ((f == 0) | (f >= v)) & ((l_ == 0) | (l_ >= v))
    else:
        edges = (np.mod(f, v) == 0) & (np.mod(l_, v) == 0)
    stated = (p > 1) & edges & whole
    ok = np.where((f > 0) | (l_ > 0), stated, auto)
    return bool(ok) if np.ndim(ok) == 0 else ok


def uneven_splits(layers: int, stages: int, chunks: int = 1) -> list[tuple[int, int]]:
    """(first, last) stated splits the search offers where L does not divide by p·v: the middle
    stages full (k = ceil(L/(p·v))·v layers), the r = L − (p−2)·k left on the first and last
    stage (each a multiple of v, 1…k): the last as light as it goes (the remainder on the first:
    the last stage also runs the output layer, the loss and any MTP module, as DeepSeek-V3's
    4 + 14 × 4 + 1), the two as even as they go, and the first as light as it goes (the first
    stage keeps the most micro-batches in flight under 1F1B). The split dtplan's default already
    gives (one layer short on each end, v = 1) is not repeated."""
    p, v, n = stages, chunks, layers
    if p < 2 or n % (p * v) == 0:
        return []
    k = -(-n // (p * v)) * v
    r = n - (p - 2) * k
    if r < 2 * v or r > 2 * k:
        return []
    heavy = min(k, (r - v) // v * v)
    even = -(-(r // 2) // v) * v
    options = [(heavy, r - heavy), (even, r - even), (r - heavy, heavy)]
    default = tuple(int(x) for x in np.asarray(stage_layers(n, p, v))[[0, 2]]) if v == 1 \
        and stage_deficit(n, p, v) <= MAX_STAGE_DEFICIT else None
    seen: list[tuple[int, int]] = []
    for f, l_ in options:
        if v <= f <= k and v <= l_ <= k and f % v == 0 and l_ % v == 0 \
                and (f, l_) not in seen and (f, l_) != default:
            seen.append((f, l_))
    return seen


def split_choices(layers: int, stages: int, chunks: int = 1) -> list[tuple[int, int]]:
    """(first, last) codes the search crosses with p stages × v chunks: (0, 0), dtplan's default
    split, where it is valid or v = 1 (there the layer rule rejects it and says why), then the
    stated uneven_splits."""
    default = chunks == 1 or stage_deficit(layers, stages, chunks) <= MAX_STAGE_DEFICIT
    return ([(0, 0)] if default else []) + uneven_splits(layers, stages, chunks)
