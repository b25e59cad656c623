"""Fine-tuning with a frozen base: LoRA adapters, the base weights' storage format (bf16, LLM.int8,
NF4 with or without double quantisation), QLoRA's dequantised working copy, and what a frozen
linear does not compute or save. Per GPU, bytes / parameters / seconds; floats or arrays.

Sources (read at the versions named):
- LoRA (Hu et al. 2021, arXiv:2106.09685; HF PEFT 0.21.2 tuners/lora/layer.py): an adapted
  linear W: d_in → d_out gains A: r × d_in and B: d_out × r, r·(d_in + d_out) trainable
  parameters; forward y = W x + (α/r)·B A x. Llama-2-7B, r 8 on q and v: 32·2·8·(4096+4096) =
  4,194,304 (litgpt's resource table prints the same trainable count).
- bitsandbytes 0.50.2 functional.py `quantize_4bit`: NF4 packs two 4-bit codes per byte with one
  fp32 absmax per block of 64; double quantisation (`compress_statistics`) stores the absmaxes
  as 8-bit codes with one fp32 absmax per 256 of them (QLoRA, Dettmers et al. 2023,
  arXiv:2305.14314 Sec. 3: "32/64 = 0.5 bits … to 8/64 + 32/(64·256) = 0.127 bits").
- bitsandbytes `Int8Params`: int8 weight (1 B) + one fp32 scale per output row (`SCB`).
- bitsandbytes backends/cuda/ops.py `_dequant_linear_fallback`: for a training matmul (more than
  1536 rows) the 4-bit weight is dequantised into a fresh compute-dtype tensor of the full
  d_out × d_in shape, used by one `F.linear` and freed; `MatMul4Bit` saves no input activation
  and dequantises the weight again in backward for the input gradient.
- PyTorch autograd (tools/autograd/gen_variable_type.py, `should_compute_output` guards): a
  matmul whose weight does not require grad neither saves its input for a weight gradient nor
  runs the weight-gradient GEMM; the input-gradient GEMM still runs to reach earlier layers.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

NF4_BLOCK = 64            # bitsandbytes quantize_4bit default blocksize
NF4_DQ_BLOCK = 256        # second-level block of the double-quantised absmaxes
FP32_BYTES = 4.0

# Bytes per parameter of a frozen linear's weight in each storage format (d_in: its input
# width, which sets LLM.int8's per-row scale share). "bf16": the checkpoint's 16-bit weights.
BASE_FORMATS = ("bf16", "int8", "nf4", "nf4-dq")


def base_weight_bytes_per_param(fmt: str, d_in: Num = 4096.0) -> Num:
    """Bytes per parameter of a frozen linear weight stored as `fmt`:
    bf16 2; int8 1 + 4/d_in (fp32 scale per output row); nf4 0.5 + 4/64 = 0.5625;
    nf4-dq 0.5 + 1/64 + 4/(64·256) = 0.515869 (bitsandbytes quantize_4bit)."""
    if fmt == "bf16":
        return 2.0
    if fmt == "int8":
        return out(1.0 + FP32_BYTES / np.asarray(d_in, dtype=float))
    if fmt == "nf4":
        return 0.5 + FP32_BYTES / NF4_BLOCK
    if fmt == "nf4-dq":
        return 0.5 + 1.0 / NF4_BLOCK + FP32_BYTES / (NF4_BLOCK * NF4_DQ_BLOCK)
    raise ValueError(f"base format must be one of {', '.join(BASE_FORMATS)}, not {fmt!r}")


def lora_params(pairs: list[tuple[float, float]], rank: Num) -> Num:
    """Trainable parameters of LoRA adapters on linears of shapes (d_in, d_out): Σ r·(d_in + d_out)
    (A: r × d_in, B: d_out × r; no bias, PEFT's default `bias="none"`)."""
    return out(np.asarray(rank, dtype=float) * sum(d_in + d_out for d_in, d_out in pairs))


def adapter_activation_bytes(tokens: Num, adapted: Num, rank: Num, width: Num = 2.0) -> Num:
    """What the adapters add to a layer's saved activations: each B keeps its input, A's rank-r
    output, tokens·r·width per adapted linear (A's own input is the base linear's, counted where
    the base keeps it; with lora_dropout 0 PEFT's dropout is nn.Identity and copies nothing)."""
    return out(np.asarray(tokens, dtype=float) * adapted * rank * width)


def dropout_copy_bytes(tokens: Num, input_width: Num, width: Num = 2.0) -> Num:
    """LoRA dropout (p > 0) per layer: each adapted linear's input copied by nn.Dropout (width
    bytes) and its bool mask (1 byte; torch native_dropout), tokens·Σd_in·(width + 1)
    (PEFT tuners/lora/layer.py; recipes.md §1.4)."""
    return out(np.asarray(tokens, dtype=float) * input_width * (np.asarray(width) + 1.0))


def dequant_working_bytes(largest_linear_params: Num, compute_bytes: Num = 2.0) -> Num:
    """QLoRA's transient peak: one quantised linear dequantised to the compute dtype for the
    duration of its matmul (bitsandbytes `_dequant_linear_fallback`): ψ_linear × 2 bytes (bf16);
    × 4 where the weight was quantised from fp16 and the bf16 input makes MatMul4Bit cast the
    fp16 dequantised copy (bitsandbytes 0.41-0.42 `dequantize_4bit(B, state).to(A.dtype)`)."""
    return out(np.asarray(largest_linear_params, dtype=float) * compute_bytes)


def previous_graph_bytes(layers: Num, held_per_layer: Num, tokens: Num, vocab_local: Num,
                         width: Num = 2.0) -> Num:
    """What a loop that keeps the last micro-batch's logits (and through them its graph) holds
    while the next forward runs: each layer's tensors kept outside autograd's saved variables
    (MatMul4Bit's ctx inputs before bitsandbytes 0.43.2), layers · held, plus those logits,
    tokens · V/t · width (bf16)."""
    return out(np.asarray(layers, dtype=float) * held_per_layer
               + np.asarray(tokens, dtype=float) * vocab_local * width)


def dequant_seconds(params: Num, stored_bytes: Num, hbm_bytes_per_s: Num,
                    compute_bytes: Num = 2.0) -> Num:
    """One dequantisation pass over `params` quantised weights, HBM-bound: read the packed
    weight and its scales, write the compute-dtype copy, ψ·(stored + 2) / HBM bandwidth
    (the GEMM's own read of the copy is in the GEMM's time)."""
    moved = np.asarray(params, dtype=float) * (np.asarray(stored_bytes, dtype=float)
                                               + compute_bytes)
    return out(moved / np.asarray(hbm_bytes_per_s, dtype=float))


def backward_gemm_factor(weight_trainable: Num) -> Num:
    """Backward GEMM time of a linear in units of its forward: the input gradient (1×) plus the
    weight gradient (1×) when the weight trains — 2 for full fine-tuning, 1 for a frozen base
    (a third of the training GEMM FLOPs saved: 4ψ instead of 6ψ per token)."""
    return out(1.0 + np.asarray(weight_trainable, dtype=float))
