"""fp8 as a precision: which GEMMs run in fp8, and the cast and scaling work around them.

Frameworks convert the transformer blocks' linear layers (QKV, attention output, MLP up/gate
and down) to fp8; attention's s×s part, norms and the output head stay in bf16 (torchtitan's
documented Float8 config filters "output", torchtitan/components/quantization/float8.md;
Transformer Engine's fp8_autocast covers te.Linear / LayerNormLinear only). All three GEMMs of a
converted linear (output, input gradient, weight gradient) run at the fp8 rate: peak_fp8 ×
its measured matmul ceiling (MAMF fp8, CALIBRATION.md §8: H100 1402.6 of 1978.9 TFLOP/s).

Dynamic (tensor-wise) scaling casts, per linear and step: the input activation and the weight
in forward, the output gradient in backward; each cast reads bf16 and writes fp8 after an
amax reduction that reads the tensor once more: (2 + 1 + 2) = 5 bytes per element of HBM
traffic per cast. Weights are cast once per micro-batch (FSDP all-gathers them in bf16 first).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

CAST_BYTES_PER_ELEM = 5.0   # amax read (2) + bf16 read (2) + fp8 write (1)


def fp8_gemm_rate(peak_fp8: Num, fp8_ceiling: Num, sustained: Num, shape_eff: Num) -> Num:
    """Achieved fp8 GEMM FLOP/s: peak_fp8 × MAMF share × sustained share × shape factor."""
    return out(np.asarray(peak_fp8, dtype=float) * fp8_ceiling * sustained * shape_eff)


def cast_time(activation_elems: Num, weight_elems: Num, hbm_bytes_per_s: Num) -> tuple[Num, Num]:
    """(forward, backward) seconds of dynamic-scaling casts for one layer: forward casts the
    input activations and weights, backward the output gradients (same element count as the
    activations): 5 bytes per element each."""
    a = np.asarray(activation_elems, dtype=float)
    w = np.asarray(weight_elems, dtype=float)
    fwd = CAST_BYTES_PER_ELEM * (a + w) / hbm_bytes_per_s
    bwd = CAST_BYTES_PER_ELEM * a / hbm_bytes_per_s
    return out(fwd), out(bwd)


def linear_time(linear_flops_fwd: Num, bf16_rate: Num, fp8_rate: Num, fp8: bool) -> tuple[Num, Num]:
    """(forward, backward) seconds of a layer's linear GEMMs at the bf16 or fp8 rate
    (backward = 2 × forward FLOPs)."""
    rate = np.asarray(fp8_rate if fp8 else bf16_rate, dtype=float)
    f = np.asarray(linear_flops_fwd, dtype=float)
    return out(f / rate), out(2.0 * f / rate)
