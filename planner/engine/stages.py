"""Layers per pipeline stage, once for the estimate, the search and the engine-config writers.

Full stages hold ceil(L/(p·v))·v layers; when that overshoots L by 1 or 2, the first and last
(virtual) stages hold one fewer each: Llama 3's 126 layers on 16 stages (Dubey et al. 2024,
Sec. 3.3.2), Megatron-LM's --decoder-first/last-pipeline-num-layers.
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


def stage_layers(layers: Num, stages: Num, chunks: Num = 1) -> tuple[Num, Num, Num]:
    """(first, middle, last) layers per stage: full = ceil(L/(p·v))·v, deficit d = p·full − L,
    first = full − ceil(d/2), last = full − floor(d/2); a single stage (p = 1) holds all L."""
    p = np.asarray(stages, dtype=float)
    full = np.asarray(full_stage_layers(layers, stages, chunks))
    deficit = p * full - layers
    first = np.where(p > 1, full - np.ceil(deficit / 2), layers)
    last = np.where(p > 1, full - np.floor(deficit / 2), layers)
    return out(first), out(full), out(last)


def stage_deficit(layers: Num, stages: Num, chunks: Num = 1) -> Num:
    """Layers the stages are short of p·v equal chunks: p·ceil(L/(p·v))·v − L."""
    return out(np.asarray(stages, dtype=float) * full_stage_layers(layers, stages, chunks)
               - np.asarray(layers, dtype=float))


def layers_split_valid(layers: Num, stages: Num, chunks: Num = 1) -> Mask:
    """The layer-count rule: p·v chunks cover L with at most MAX_STAGE_DEFICIT layers short,
    and there are no more chunks than layers."""
    per = np.asarray(stages) * np.asarray(chunks)
    ok = (np.asarray(stage_deficit(layers, stages, chunks)) <= MAX_STAGE_DEFICIT) & (per <= layers)
    return bool(ok) if np.ndim(ok) == 0 else ok
