"""What each framework holds beyond the ZeRO states: gathered parameters, gradient buffers, buckets.

Per GPU of one pipeline stage, in bytes; ψ_stage = the stage's parameters on this GPU (after TP,
PP, EP), ψ_layer = its largest layer's, ψ_root = the parameters outside the blocks that one FSDP
unit holds (embedding, final norm, output layer). Sources, read at the commits the calibration
rows name:
- PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param*.py, _fsdp_collectives.py):
  an all-gathered unit keeps its parameters unsharded in `param_dtype` until it reshards; a
  gradient is reduce-scattered from a fresh buffer in `reduce_dtype` (fp32 under torchtitan's
  MixedPrecisionPolicy); with gradient sync off, the unsharded gradient is accumulated in
  `reduce_dtype` (`to_accumulated_grad_if_needed`).
- torchtitan apply_fsdp: without PP every block reshards after forward except the last and the
  root; with PP nothing reshards after forward, and torch.distributed.pipelining's stage turns
  `set_requires_gradient_sync(False)` and `set_reshard_after_backward(False)` for every
  micro-batch but the last, so a stage keeps its parameters unsharded and its gradients
  unsharded in fp32 until the last backward.
- DeepSpeed (runtime/zero/config.py defaults): reduce_bucket_size 5e8 and allgather_bucket_size
  5e8 elements, stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9.
- Megatron-LM (docs distrib_optimizer.md; core/distributed/param_and_grad_buffer.py): bf16
  parameters and an fp32 `main_grad` buffer for the whole model chunk (the buckets are views of
  it, so they add nothing), the distributed optimizer shards fp32 master + Adam over DP:
  6 + 12/d bytes per parameter. Transformer Engine's fp8 caches the fp8 weight (row-wise and,
  on Hopper, a column-wise transposed copy) from the first micro-batch to the last.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out


def fsdp_gathered_params(stage_params: Num, layer_params: Num, root_params: Num, *,
                         keep_gathered: Num, prefetch: Num = 1.0, param_bytes: Num = 2.0) -> Num:
    """Unsharded parameters an FSDP2 rank holds at its peak, in `param_dtype`.

    keep_gathered (PP under torchtitan, or reshard_after_forward=False): the whole stage,
    ψ_stage·w. Otherwise the block in use, `prefetch` blocks gathered ahead and the root unit:
    ((1 + prefetch)·ψ_layer + ψ_root)·w. FSDP2 prefetches one block in backward by default.
    """
    keep = np.asarray(keep_gathered) != 0
    per_layer = (1.0 + np.asarray(prefetch, dtype=float)) * np.asarray(layer_params, dtype=float)
    live = np.where(keep, np.asarray(stage_params, dtype=float),
                    per_layer + np.asarray(root_params, dtype=float))
    return out(live * np.asarray(param_bytes, dtype=float))


def fsdp_unsharded_grads(stage_params: Num, layer_params: Num, head_params: Num, *,
                         accumulate: Num, grad_bytes: Num = 2.0, reduce_bytes: Num = 4.0,
                         reduce_in_flight: Num = 1.0) -> tuple[Num, Num]:
    """(one block's gradient buffers, gradients accumulated across micro-batches) on an FSDP2
    rank in backward, bytes.

    A block's backward holds its fresh gradient in `param_dtype`, `reduce_in_flight`
    reduce-scatter inputs copied to `reduce_dtype`, and the output layer's gradient, which the
    root unit keeps until the end of backward: ψ_layer·(g + n·r) + ψ_head·g. With gradient sync
    off between micro-batches (as under PP) the stage's unsharded gradients accumulate in
    `reduce_dtype` instead of being reduce-scattered: ψ_stage·r, and a block's backward holds
    only its fresh gradient.
    """
    acc = np.asarray(accumulate) != 0
    g = np.asarray(grad_bytes, dtype=float)
    r = np.asarray(reduce_bytes, dtype=float)
    layer = np.asarray(layer_params, dtype=float)
    per_layer = np.where(acc, layer * g, layer * (g + np.asarray(reduce_in_flight, dtype=float)
                                                  * r) + np.asarray(head_params, dtype=float) * g)
    return out(per_layer), out(np.where(acc, np.asarray(stage_params, dtype=float) * r, 0.0))


def deepspeed_buffers(zero: Num, stage_params: Num, layer_params: Num, *,
                      reduce_bucket: Num = 5e8, prefetch_bucket: Num = 5e7,
                      max_live: Num = 1e9, grad_bytes: Num = 2.0,
                      param_bytes: Num = 2.0) -> tuple[Num, Num]:
    """(gradient bucket, live gathered parameters) bytes of a DeepSpeed ZeRO rank in backward.

    Stages 1-3 reduce through a contiguous bucket of min(reduce_bucket, ψ_stage) elements in
    the gradient dtype. Stage 3 keeps the block in use plus what it prefetches, capped by
    stage3_max_live_parameters: min(ψ_layer + min(prefetch_bucket, ψ_layer), max_live)·w.
    """
    z = np.asarray(zero)
    stage = np.asarray(stage_params, dtype=float)
    layer = np.asarray(layer_params, dtype=float)
    bucket = np.where(z >= 1, np.minimum(np.asarray(reduce_bucket, dtype=float), stage), 0.0)
    live = np.minimum(layer + np.minimum(np.asarray(prefetch_bucket, dtype=float), layer),
                      np.asarray(max_live, dtype=float))
    return (out(bucket * np.asarray(grad_bytes, dtype=float)),
            out(np.where(z >= 3, live * np.asarray(param_bytes, dtype=float), 0.0)))


def fp8_weight_cache(linear_params: Num, *, cached_copies: Num, element_bytes: Num = 1.0) -> Num:
    """Quantised weight copies a framework keeps between micro-batches: ψ_linear × copies ×
    the recipe's bytes per element (1 for fp8 with per-tensor scales, 1 + 1/32 MXFP8,
    0.5 + 1/16 NVFP4; engine.fp8.RECIPES).

    Transformer Engine: 2 (row-wise and the transposed column-wise copy on Hopper; block-scaled
    recipes quantise both directions on every GPU); torchao's Float8Linear casts at every use
    and caches nothing: 0. Where the weights are fp8 parameters (fp8_param_weight_bytes) the
    row-wise copy is the parameter itself: the caller passes copies − 1.
    """
    return out(np.asarray(linear_params, dtype=float) * np.asarray(cached_copies, dtype=float)
               * np.asarray(element_bytes, dtype=float))


def fp8_cached_copies(copies: float, *, transpose_needed: bool, weight_is_fp8: bool) -> float:
    """Quantised weight copies kept between micro-batches: the profile's (TE: row-wise and
    transposed), less the transpose where the GPU runs per-tensor fp8 GEMMs in any layout, less
    the row-wise copy where the fp8 parameter is that copy."""
    return max(copies - float(not transpose_needed) - float(weight_is_fp8), 0.0)


def fp8_param_weight_bytes(local_params: Num, linear_params: Num, *, weight_bytes: Num,
                           element_bytes: Num) -> Num:
    """Bytes per parameter of a stage whose linears keep their weights in fp8 alone
    (Megatron-Core fp8_param_gather: TE's fp8_model_init builds them as Float8Tensor,
    core/fp8_utils.py:505,538 at core_v0.15.3, and DDP puts their data in a uint8 buffer,
    core/distributed/distributed_data_parallel.py:160-167): ψ_linear × the recipe's bytes +
    the rest (embedding, output layer, norms) × weight_bytes, over ψ_local."""
    local = np.asarray(local_params, dtype=float)
    linear = np.asarray(linear_params, dtype=float)
    return out((linear * np.asarray(element_bytes, dtype=float)
                + (local - linear) * np.asarray(weight_bytes, dtype=float))
               / np.maximum(local, 1.0))

