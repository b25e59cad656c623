"""Low-precision training recipes: which GEMMs run in fp8 / fp4, at what rate, and the
quantisation (cast) traffic and stored bytes around them.

Frameworks convert the transformer blocks' linear layers (QKV, attention output, MLP up/gate
and down) to low precision; attention's s×s part, norms and the output head stay in bf16
(torchtitan's documented Float8 config filters "output", torchtitan/components/quantization/
float8.md; Transformer Engine's autocast covers te.Linear / LayerNormLinear only). A converted
linear runs its forward (fprop), input-gradient (dgrad) and weight-gradient (wgrad) GEMMs in
low precision unless the recipe keeps one in bf16.

The recipes, as their sources define them (research/finetune fp8.md; TE = NVIDIA/
TransformerEngine@d0067d0, torchao = pytorch/ao@36027d8):
- tensorwise: one fp32 scale per tensor from a fresh amax (torchao Float8Linear default; TE
  Float8CurrentScaling). The scale needs the whole tensor's amax first: an amax pass (read 2 B)
  then the cast (read 2, write 1) = 5 B per element.
- delayed: per-tensor scale from an amax history (TE DelayedScaling, amax_history_len 1024;
  Megatron-LM's default --fp8-recipe): the amax is taken inside the cast, 3 B per element.
- rowwise: one scale per row, e4m3 everywhere (torchao ROWWISE, config.py:141-176). A row's amax
  is local to the cast kernel (3 B); the wgrad GEMM reduces over tokens, so x and dy are cast
  again scaled along the token axis, and dgrad re-casts the weight along its other axis (amax
  over a column: a separate pass, 5 B each).
- rowwise-gw-hp: rowwise fprop and dgrad (the weight tensorwise for dgrad), wgrad in bf16
  (torchao ROWWISE_WITH_GW_HP).
- blockwise: DeepSeek-V3 style, 1×128 blocks for activations and gradients, 128×128 for weights,
  fp32 scales (TE Float8BlockScaling, float8_blockwise_tensor.py:55 block_len = 128). Row- and
  column-wise copies are both quantised from the bf16 tensor in one pass: read 2, write
  2 × (1 + 4/128) B.
- mxfp8: OCP MX, 32 elements along K share one E8M0 byte (TE MXFP8BlockScaling, constants.py:175
  MXFP8_BLOCK_SCALING_SIZE = 32): 1 + 1/32 B per element, row- and column-wise copies in one pass.
- nvfp4: E2M1 values, an E4M3 scale per 16 (constants.py:177) and one fp32 per tensor:
  0.5 + 1/16 B per element; the tensor scale needs a global amax pass (read 2) before the
  one-pass row/column quantisation (TE NVFP4BlockScaling, recipe/__init__.py:486-600).
Each quantised weight copy a framework caches costs the recipe's element bytes; Transformer
Engine's fp8 saved inputs cost them too (linear.py:600-660 keeps the quantised input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.engine.arrays import Num, out

CAST_BYTES_PER_ELEM = 5.0   # tensorwise: amax read (2) + bf16 read (2) + fp8 write (1)

# GEMM inputs Transformer Engine saves in fp8 under fp8 training (engine.activations' names).
FP8_SAVED_TERMS = ("qkv_in", "proj_in", "fc1_in", "gelu_out", "swiglu_product")
# The MLP activation's own input (Megatron-Core TransformerConfig.activation_func_fp8_input_store,
# "Store the input of MLP activation function in FP8 for backprop", passed to bias_swiglu_impl
# in core/transformer/mlp.py) and the fused attention's q, k, v (Transformer Engine fp8
# DotProductAttention with NVTE_FP8_DPA_BWD=1: FusedAttnFunc keeps the fp8 q, k, v it ran on
# for an fp8 backward).
ACTIVATION_INPUT_TERMS = ("fc1_out", "swiglu_gate", "swiglu_up")
ATTENTION_INPUT_TERMS = ("q", "k", "v")


def fp8_saved_terms(activation_input: bool = False, attention: bool = False) -> tuple[str, ...]:
    """The saved tensors kept at the recipe's element bytes: the linears' GEMM inputs, plus the
    MLP activation's input and the attention's q, k, v where the framework stores them in fp8
    (framework profile memory.fp8_activation_input / memory.fp8_attention_saved)."""
    return (FP8_SAVED_TERMS + (ACTIVATION_INPUT_TERMS if activation_input else ())
            + (ATTENTION_INPUT_TERMS if attention else ()))


@dataclass(frozen=True)
class Recipe:
    """One low-precision recipe: the peak_tflops key its GEMMs run at, which GEMMs are low
    precision, the stored bytes per element (scales included) and the cast bytes per element
    of the tensors it quantises (forward: inputs x and weights w; backward: output gradients dy
    plus x re-cast, and w re-cast)."""

    name: str
    rate_key: str            # "fp8", "mxfp8" (block-scaled fp8 rate) or "fp4"
    wgrad_low: bool          # the weight-gradient GEMM runs in low precision
    element_bytes: float     # bytes per stored element, its scales included
    cast_fwd_act: float      # bytes moved per activation element in forward
    cast_fwd_weight: float   # per weight element per micro-batch in forward
    cast_bwd_act: float      # per activation element in backward (dy, and x re-cast)
    cast_bwd_weight: float   # per weight element in backward
    fsdp_all_gather: bool    # FSDP2 can all-gather the weight in this format (torchao:
                             # "float8 all-gather only supports tensorwise", config.py:300-306)


_BLOCK_PASS = 2.0 + 2.0 * (1.0 + 4.0 / 128.0)        # bf16 read + row- and column-wise 1×128
_WEIGHT_BLOCK_PASS = 2.0 + 2.0 * (1.0 + 4.0 / 16384)  # 128×128 weight blocks
_MX_PASS = 2.0 + 2.0 * (1.0 + 1.0 / 32.0)            # E8M0 byte per 32
_NVFP4_BYTES = 0.5 + 1.0 / 16.0                       # E2M1 nibble + E4M3 scale per 16
_NVFP4_PASS = 2.0 + 2.0 + 2.0 * _NVFP4_BYTES         # global amax read, read, two copies

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("tensorwise", "fp8", True, 1.0, 5.0, 5.0, 5.0, 0.0, True),
    Recipe("delayed", "fp8", True, 1.0, 3.0, 3.0, 3.0, 0.0, False),
    Recipe("rowwise", "fp8", True, 1.0, 3.0, 3.0, 3.0 + 5.0 + 5.0, 5.0, False),
    Recipe("rowwise-gw-hp", "fp8", False, 1.0, 3.0, 3.0, 3.0, 5.0, False),
    Recipe("blockwise", "fp8", True, 1.0 + 4.0 / 128.0, _BLOCK_PASS, _WEIGHT_BLOCK_PASS,
           _BLOCK_PASS, 0.0, False),
    Recipe("mxfp8", "mxfp8", True, 1.0 + 1.0 / 32.0, _MX_PASS, _MX_PASS, _MX_PASS, 0.0, False),
    Recipe("nvfp4", "fp4", True, _NVFP4_BYTES, _NVFP4_PASS, _NVFP4_PASS, _NVFP4_PASS, 0.0,
           False),
)}
NAMES: tuple[str, ...] = tuple(RECIPES)
# One scale per tensor (TE Float8Tensor): its data read column-wise is the transpose, so a GPU
# whose fp8 GEMMs take any layout needs no transposed copy. Block-scaled recipes scale along
# one axis and quantise each direction on its own.
PER_TENSOR: tuple[str, ...] = ("tensorwise", "delayed")


def recipe_peak(peaks: dict[str, float], recipe: Recipe) -> float | None:
    """The dense peak FLOP/s a recipe's GEMMs run at on a GPU: its own key, block-scaled fp8
    ("mxfp8") falling back to the fp8 peak (Blackwell datacenter parts run MXFP8 at the fp8
    rate); None where the GPU lists no rate for it."""
    if recipe.rate_key in peaks:
        return peaks[recipe.rate_key]
    return peaks.get("fp8") if recipe.rate_key == "mxfp8" else None


def fp8_gemm_rate(peak_fp8: Num, fp8_ceiling: Num, sustained: Num, shape_eff: Num) -> Num:
    """Achieved low-precision GEMM FLOP/s: peak × MAMF share × sustained share × shape factor."""
    return out(np.asarray(peak_fp8, dtype=float) * fp8_ceiling * sustained * shape_eff)


def cast_time(activation_elems: Num, weight_elems: Num, hbm_bytes_per_s: Num,
              recipe: Recipe = RECIPES["tensorwise"]) -> tuple[Num, Num]:
    """(forward, backward) seconds of one layer's quantisation casts, HBM-bound: forward casts
    the linears' input activations and weights, backward the output gradients (the same
    element count as the inputs) and what the recipe re-casts; bytes per element as the
    recipe states them (tensorwise: 5 B for x and w forward, 5 B for dy backward)."""
    a = np.asarray(activation_elems, dtype=float)
    w = np.asarray(weight_elems, dtype=float)
    fwd = (recipe.cast_fwd_act * a + recipe.cast_fwd_weight * w) / hbm_bytes_per_s
    bwd = (recipe.cast_bwd_act * a + recipe.cast_bwd_weight * w) / hbm_bytes_per_s
    return out(fwd), out(bwd)


def linear_time(linear_flops_fwd: Num, bf16_rate: Num, low_rate: Num,
                recipe: Recipe | None) -> tuple[Num, Num]:
    """(forward, backward) seconds of a layer's linear GEMMs: fprop and dgrad at the recipe's
    rate, wgrad at it too or at the bf16 rate where the recipe keeps it in bf16 (each GEMM has
    the forward's FLOPs); all at the bf16 rate without a recipe."""
    f = np.asarray(linear_flops_fwd, dtype=float)
    low = np.asarray(bf16_rate if recipe is None else low_rate, dtype=float)
    wgrad = low if recipe is None or recipe.wgrad_low else np.asarray(bf16_rate, dtype=float)
    return out(f / low), out(f / low + f / wgrad)
