"""Tensor-parallel communication left on the critical path, with or without TP comm overlap.

Without it every TP all-gather / reduce-scatter (or all-reduce) waits on the GEMMs around it:
the GPU profile's tp_exposed_fraction of the traffic is exposed. With the framework's
tp_comm_overlap (Megatron-Core --tp-comm-overlap, NVIDIA/Megatron-LM core_v0.15.3
megatron/core/model_parallel_config.py:160; Transformer Engine userbuffers, NVIDIA/
TransformerEngine v2.9 transformer_engine/pytorch/module/base.py:302-339), which needs sequence
parallel (megatron/training/arguments.py:930-931 at core_v0.15.3 asserts it), each collective is split in chunks run beside the linear GEMM it feeds (the
all-gathers before QKV and FC1, ring exchange in TP-size chunks) or drains (the reduce-scatters
after the projection and FC2, pipelined in tp_overlap_rs_splits chunks); backward mirrors them
beside the dgrad and wgrad GEMMs (TE's bulk and external overlaps, base.py:310-311).
"""

from __future__ import annotations

import numpy as np

from planner.engine import overlap as ov
from planner.evaluation.candidates import Problem


def tp_exposed(p: Problem, sp: np.ndarray, tp_size: np.ndarray, layer_linear: np.ndarray,
               tp: np.ndarray, n_layers: np.ndarray) -> np.ndarray:
    """Exposed TP time per micro-batch of `tp` seconds of TP communication over `n_layers`
    layers. Off (or without SP): tp_exposed_fraction × tp. On: per layer, the all-gathers (half
    the traffic) beside half the layer's linear GEMM seconds in TP-size chunks and the
    reduce-scatters (the other half) beside the other half in tp_overlap_rs_splits chunks,
    each by engine.overlap.split_exposed (σ: the profile's overlap_slowdown); never above
    the plain figure."""
    eff, fw = p.hardware.efficiency, p.fw.time
    plain = eff.tp_exposed_fraction * np.asarray(tp, dtype=float)
    if not fw.tp_comm_overlap:
        return plain
    layers = np.maximum(np.asarray(n_layers, dtype=float), 1.0)
    g = np.asarray(tp, dtype=float) / layers / 2.0
    hide = np.asarray(layer_linear, dtype=float) / 2.0
    rs = np.where(fw.tp_overlap_rs_splits > 0, fw.tp_overlap_rs_splits, tp_size)
    chunked = layers * (np.asarray(ov.split_exposed(g, hide, tp_size, eff.overlap_slowdown))
                        + np.asarray(ov.split_exposed(g, hide, rs, eff.overlap_slowdown)))
    return np.where(np.asarray(sp) > 0, np.minimum(chunked, plain), plain)
