"""A recipe's share of the memory and time model (engine/finetune.py's formulas on a Problem):
which parameters train (the LoRA adapters) and which are frozen (the base, in its storage
format), what the frozen linears do not save for backward, QLoRA's dequantised working copy and
dequantisation passes; last, CPU activation offload's exposed PCIe time. Full fine-tuning
without offload passes through every function unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.engine import activations as act
from planner.engine import budget as bud
from planner.engine.arrays import Num
from planner.evaluation.candidates import full_recomputed
from planner.engine import finetune as ft
from planner.engine import memory as mem
from planner.engine import step_time as st
from planner.engine import optimizer as opt
from planner.specs.finetune import (adapted_count, adapter_pairs, dropout_input_width,
                                    largest_linear, layer_linears)

# The saved tensors that exist only as the input of one linear's weight gradient (engine.
# activations' names) and the linears that need them: when none of those trains the tensor is
# not saved (PyTorch saves a matmul input only for the weight's gradient). proj_in is also
# flash attention's output, which its backward keeps whatever trains.
WGRAD_ONLY_INPUTS: dict[str, tuple[str, ...]] = {
    "qkv_in": ("q", "k", "v"), "fc1_in": ("gate", "up"), "swiglu_product": ("down",),
    "gelu_out": ("down",), "proj_in": ("o",)}


def fused_qkv(p: Any) -> bool:
    """Whether a LoRA on q, k, v is one adapter on a fused QKV linear (the framework profile's
    memory.lora_fused_qkv; specs.finetune.adapted_linears)."""
    return bool(p.fw.memory.lora_fused_qkv)


def qkv_fused(p: Any) -> bool:
    """Whether this LoRA's q, k, v adapters are one (fused_qkv and all three targeted)."""
    return fused_qkv(p) and {"q", "k", "v"} <= set(p.tuning.targets)


def adapter_params_per_layer(p: Any) -> float:
    """LoRA parameters of one (average) layer, before any split: Σ r·(d_in + d_out)."""
    return float(ft.lora_params(adapter_pairs(p.model, p.tuning, fused_qkv(p)),
                                p.tuning.rank))


def fp8_base(p: Any) -> bool:
    """Whether a frozen 16-bit base's linears are fp8 parameters: the profile's (or run's)
    memory.fp8_params under an fp8 recipe. Transformer Engine modules built under
    fp8_model_init "hold only FP8 copies of its parameters" (TransformerEngine
    pytorch/fp8.py, fp8_model_init docstring); the MLPerf v5.1 Llama-2-70B LoRA runs build
    the model so (mlcommons/training_results_v5.1@441d65f4 NVIDIA/benchmarks/llama2_70b_lora/
    implementations/nemo/custom_llama.py:99; AMD's yaml fp8_params: FP8)."""
    return bool(p.tuning.frozen and p.tuning.base_format == "bf16" and p.recipe is not None
                and p.fw.memory.fp8_params)


def base_bytes(p: Any) -> float:
    """Bytes per parameter of the frozen linears in the base's format (LLM.int8's row scales at
    the layer's hidden width); an fp8-parameter base (fp8_base) the recipe's element bytes,
    scales included, with no 16-bit copy."""
    if fp8_base(p):
        return float(p.recipe.element_bytes)
    return float(ft.base_weight_bytes_per_param(p.tuning.base_format, p.model.hidden))


def root_bytes(p: Any) -> float:
    """Bytes per parameter of the unquantised embedding and output layer: 2 (bf16), or 4 under
    a quantised base where the framework's recipe calls HF PEFT's prepare_model_for_kbit_training,
    which casts every fp16/bf16 parameter that is not a Params4bit to fp32 (peft v0.20.0
    src/peft/utils/other.py:197-202; its profile's memory.quantised_base_rest_fp32)."""
    return 4.0 if p.tuning.quantised and p.fw.memory.quantised_base_rest_fp32 else 2.0


def split_stage(p: Any, tp: np.ndarray, st: Any, sharding: np.ndarray, shard: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(trainable adapter parameters on this GPU, frozen base bytes on this GPU).

    Adapters: layers·ψ_lora/t (split over TP with the linears they adapt). Frozen: the stage's
    linears in the base format and the embedding / output layer in 16 bits (bitsandbytes and HF
    keep lm_head and embeddings unquantised), or in fp32 under a quantised base where the
    framework's recipe casts them (root_bytes), sharded over the ZeRO group from stage 3 (FSDP
    and ZeRO-3 shard frozen parameters as they shard trained ones).
    """
    stage = np.asarray(st.dense_params, dtype=float) + np.asarray(st.expert_params, dtype=float)
    root = np.asarray(st.root_params, dtype=float) - quantised_head_params(p, st.has_head, tp)
    frozen = (stage - root) * base_bytes(p) + root * root_bytes(p)
    frozen = frozen / np.where(np.asarray(sharding) >= 3, shard, 1.0)
    adapters = np.asarray(st.layers, dtype=float) * adapter_params_per_layer(p) / tp
    return adapters, frozen


def trained_param_count(p: Any) -> float:
    """Parameters that train in the whole model: all of them, or the LoRA adapters."""
    if not p.tuning.frozen:
        return float(p.model.param_count())
    return p.model.layers * adapter_params_per_layer(p)


def paged_fraction(p: Any) -> float:
    """The share of the trained parameters whose moments a paged optimizer pages: those in
    tensors of at least PAGED_MIN_ELEMENTS elements (every weight matrix of a full fine-tune; of
    LoRA's A (r × d_in) and B (d_out × r), those r·d reaches: none at r 16 on a 4096-wide
    model)."""
    if not p.tuning.frozen:
        return 1.0
    r, big = float(p.tuning.rank), mem.PAGED_MIN_ELEMENTS
    total = paged = 0.0
    for name, (d_in, d_out, n) in layer_linears(p.model).items():
        if name in p.tuning.targets:
            total += n * r * (d_in + d_out)
            paged += n * r * (d_in * (r * d_in >= big) + d_out * (r * d_out >= big))
    return paged / total if total else 0.0


def trainable_fraction(p: Any, stage_params: np.ndarray, adapters: np.ndarray) -> np.ndarray:
    """The share of a stage's parameters that train (1 for full fine-tuning)."""
    if not p.tuning.frozen:
        return np.ones_like(np.asarray(stage_params, dtype=float))
    return np.asarray(adapters, dtype=float) / np.maximum(np.asarray(stage_params, dtype=float), 1.0)


def saved_term_scale(p: Any, name: str) -> float:
    """1 where a saved tensor is kept, 0 where only a frozen linear's weight gradient needed it.
    A 4-bit base under bitsandbytes < 0.43.2 keeps every linear's input all the same: MatMul4Bit
    stored ctx.tensors = (A, B) whenever the input needed a gradient (0.41.0 and 0.43.1
    autograd/_functions.py:522-523 / 515-516); 0.43.2 stores (None, B) (commit 9e75374, #1270
    "delete useless buffered activation"). The framework profile's
    memory.quantised_linear_saves_input."""
    if not p.tuning.frozen or name not in WGRAD_ONLY_INPUTS:
        return 1.0
    if p.tuning.quantised and p.fw.memory.quantised_linear_saves_input:
        return 1.0
    if name == "proj_in" and p.flash:
        return 1.0
    return 1.0 if set(WGRAD_ONLY_INPUTS[name]) & set(p.tuning.targets) else 0.0


def adapter_activations(p: Any, tokens: np.ndarray, width: float) -> np.ndarray:
    """Per layer: the rank-r intermediates each adapted linear's B keeps."""
    if not p.tuning.frozen:
        return 0.0 * tokens
    kept = np.asarray(ft.adapter_activation_bytes(tokens, adapted_count(p.model, p.tuning,
                                                                        fused_qkv(p)),
                                                  p.tuning.rank, width))
    if p.tuning.dropout:
        kept = kept + np.asarray(ft.dropout_copy_bytes(
            tokens, dropout_input_width(p.model, p.tuning, fused_qkv(p)), width))
    return kept


def quantised_head_params(p: Any, has_head: Any, tp: Any) -> np.ndarray:
    """The output layer's weight on this GPU, V·h/t (the padded vocabulary, as the stage's
    parameters count it), where a quantised base quantises it too (the profile's
    memory.quantised_head: Lightning Fabric's BitsandbytesPrecision); 0 otherwise (bitsandbytes
    through HF keeps lm_head in 16 bits) and under tied embeddings (the embedding's weight)."""
    t = np.asarray(tp, dtype=float)
    if not (p.tuning.quantised and p.fw.memory.quantised_head) or p.model.tied_embeddings:
        return 0.0 * t
    mod = p.model
    return np.where(has_head, bud.padded_vocab(mod.vocab, t) * mod.hidden / t, 0.0)


def dequant_working(p: Any, tp: np.ndarray, has_head: Any = False) -> np.ndarray:
    """QLoRA's transient: the largest quantised linear (÷TP; the output layer where it is
    quantised) dequantised, memory.dequant_bytes a parameter; 0 otherwise."""
    if not (p.tuning.frozen and p.tuning.quantised):
        return 0.0 * tp
    largest = np.maximum(largest_linear(p.model) / tp, quantised_head_params(p, has_head, tp))
    return np.asarray(ft.dequant_working_bytes(largest, p.fw.memory.dequant_bytes))


def held_inputs(p: Any, terms: dict[str, Num]) -> np.ndarray:
    """Per layer and micro-batch: the inputs MatMul4Bit keeps on its ctx (bitsandbytes < 0.43.2,
    memory.quantised_linear_saves_input), one tensor each of WGRAD_ONLY_INPUTS (gate and up
    share theirs), where the loop holds the last graph into the next forward
    (memory.previous_graph_held_in_forward); 0 otherwise."""
    m = p.fw.memory
    if not (p.tuning.quantised and m.quantised_linear_saves_input
            and m.previous_graph_held_in_forward):
        return np.asarray(0.0)
    return np.asarray(sum(np.asarray(v, dtype=float) for k, v in terms.items()
                          if k in WGRAD_ONLY_INPUTS))


def previous_step_held(p: Any, c: Any, st: Any, per_layer: Num, tokens: np.ndarray,
                       tp: np.ndarray) -> np.ndarray:
    """What the previous micro-batch leaves allocated through the next forward where the loop
    holds its graph (engine.finetune.previous_graph_bytes): its held inputs in the layers not
    fully recomputed (a checkpointed layer's recomputed graph is gone after its backward) and,
    on the stage with the output layer, its logits; 0 where the loop frees them."""
    if not p.fw.memory.previous_graph_held_in_forward:
        return 0.0 * tokens
    layers = np.asarray(st.layers, dtype=float)
    kept = layers - full_recomputed(c, layers)
    vocab = np.where(st.has_head, p.model.vocab / tp, 0.0)
    return np.asarray(ft.previous_graph_bytes(kept, per_layer, tokens, vocab))


def layer_linear_params(p: Any) -> float:
    """Parameters in one layer's linears (what a quantised base dequantises each pass)."""
    return sum(d_in * d_out * n for d_in, d_out, n in layer_linears(p.model).values())


def compute_terms(p: Any, tokens: np.ndarray, tp: np.ndarray, t_lin: np.ndarray,
                  rate_of: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(backward GEMM factor, adapter seconds forward, dequantisation seconds per pass) of one
    layer. Adapters: 2·tokens·ψ_lora/t FLOPs at the rate of a GEMM whose short side is r
    (`rate_of(r)`), backward 2× forward; dequantisation HBM-bound (engine.finetune)."""
    if not p.tuning.frozen:
        z = 0.0 * tp
        return np.asarray(ft.backward_gemm_factor(1.0)) + z, z, z
    f_adapter = 2.0 * tokens * adapter_params_per_layer(p) / tp
    t_adapter = f_adapter / rate_of(float(p.tuning.rank))
    t_dq = 0.0 * tp
    if p.tuning.quantised:
        t_dq = np.asarray(ft.dequant_seconds(layer_linear_params(p) / tp, base_bytes(p),
                                             p.hardware.gpu.hbm_bytes_per_s))
    return np.asarray(ft.backward_gemm_factor(0.0)) + 0.0 * tp, t_adapter, t_dq


def frozen_flops_per_token_delta(p: Any) -> float:
    """Model FLOPs per token a fine-tune does not run (−2ψ_matmul: no weight-gradient GEMM of the
    base, head included) plus its adapters' 6ψ_lora; 0 for full fine-tuning."""
    if not p.tuning.frozen:
        return 0.0
    mod = p.model
    return -2.0 * mod.matmul_params_per_token() + 6.0 * mod.layers * adapter_params_per_layer(p)


def note(p: Any) -> str:
    """What trains and how the fine-tune is priced, in one line ("" for full fine-tuning)."""
    t = p.tuning
    if not t.frozen:
        return ""
    mod = p.model
    lora = mod.layers * adapter_params_per_layer(p)
    one = np.ones(1)
    head = f", head in {t.base_format}" if quantised_head_params(p, True, one)[0] else ""
    fmt = (f"{base_bytes(p):.4g} B/param as fp8 parameters (no 16-bit copy)" if fp8_base(p)
           else f"{base_bytes(p):.4g} B/param (bitsandbytes: 4-bit codes + "
           + ("8-bit absmax per 64 + fp32 per 64·256" if t.base_format == "nf4-dq"
              else "fp32 absmax per 64") + ")" if t.base_format.startswith("nf4")
           else f"{base_bytes(p):.4g} B/param" + (" (int8 + fp32 scale per row)"
                                                  if t.base_format == "int8" else ""))
    text = (f"Fine-tuning {t.mode}: LoRA r={t.rank} α={t.alpha}"
            f"{' with dropout' if t.dropout else ''} on {','.join(t.targets)} "
            f"{'(q, k, v: one adapter on the fused QKV linear) ' if qkv_fused(p) else ''}"
            f"({lora / 1e6:,.1f}M trainable params, {lora / mod.param_count():.2%} of "
            f"{mod.param_count() / 1e9:.2f}B); frozen base linears in "
            f"{'fp8' if fp8_base(p) else t.base_format}, {fmt}, "
            f"embeddings{' and head' if not head else ''} in "
            f"{'fp32' if root_bytes(p) == 4.0 else 'bf16'}{head}, no gradients "
            "or optimizer state; backward runs no "
            "weight-gradient GEMM for the base (4ψ instead of 6ψ FLOPs per token), and the "
            "inputs only a frozen linear's weight gradient needed are not saved")
    if t.quantised:
        text += (f"; each matmul dequantises its weight to bf16 (peak working copy "
                 f"{float(dequant_working(p, one, np.array([True]))[0]) / 1e9:.2f} GB, "
                 f"{p.fw.memory.dequant_bytes:g} B/param, HBM-bound, twice per layer per "
                 "micro-batch)")
        if float(np.sum(held_inputs(p, {k: 1.0 for k in WGRAD_ONLY_INPUTS}))):
            text += ("; the previous micro-batch's 4-bit linear inputs and logits stay "
                     "allocated through the next forward (bitsandbytes < 0.43.2 keeps them on "
                     "ctx; the loop holds the last graph)")
    if p.fw.memory.norm_saved_bytes is not None:
        text += f"; each norm saves its input at {p.fw.memory.norm_saved_bytes:g} B/element"
    return text


def muon_flops_per_layer(p: Any) -> float:
    """Newton–Schulz FLOPs of one layer's trained matrices under Muon (engine/optimizer.py):
    the base linears, or under a frozen base the adapters' A (r × d_in) and B (d_out × r)."""
    if p.tuning.frozen:
        r = float(p.tuning.rank)
        return float(sum(opt.newton_schulz_flops(r, d_in) + opt.newton_schulz_flops(d_out, r)
                         for d_in, d_out in adapter_pairs(p.model, p.tuning, fused_qkv(p))))
    return float(sum(n * opt.newton_schulz_flops(d_in, d_out)
                     for d_in, d_out, n in layer_linears(p.model).values()))


def activation_offload(p: Any, c: Any, a: dict[int, np.ndarray], n_layers: np.ndarray,
                       k_full: np.ndarray, t_fwd: np.ndarray, t_bwd: np.ndarray) -> np.ndarray:
    """The stage's exposed activation-offload PCIe seconds per micro-batch: each layer's saved
    bytes under its recompute policy (engine.step_time.activation_offload_exposed); 0 off."""
    if not p.tuning.activation_offload:
        return 0.0 * t_fwd
    base = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, a[act.RECOMPUTE_SELECTIVE],
                    a[act.RECOMPUTE_NONE])
    pcie = p.hardware.host.pcie_bytes_per_s
    kept = (n_layers - k_full) * np.asarray(st.activation_offload_exposed(base, pcie, t_fwd, t_bwd))
    return kept + k_full * np.asarray(st.activation_offload_exposed(a[act.RECOMPUTE_FULL], pcie,
                                                                    t_fwd, t_bwd))


def offload_resident(base: Num, full: Num, k_full: Num, layers: Num) -> np.ndarray:
    """Saved bytes of one micro-batch left on the GPU under CPU activation offload: one layer's
    (the largest kept, its copy in flight on the side stream; torchtune OffloadActivations
    holds at most max_fwd_stash_size = 5 of its tensors until their copy completes). The
    output layer is never offloaded (torchtune's NoOpManager on model.output) and is added by
    the caller."""
    whole = np.asarray(layers, dtype=float) > np.asarray(k_full, dtype=float)
    return np.where(whole, np.asarray(base, dtype=float), np.asarray(full, dtype=float))


def offloaded_activation_bytes(p: Any, c: Any, views: dict[str, Num],
                               layers: np.ndarray) -> np.ndarray:
    """Host bytes one GPU's offloaded activations take: a micro-batch's saved layers (the
    recompute policy's) but the resident one, times the micro-batches a 1F1B stage keeps in
    flight (min(PP, m)); 0 without activation offload."""
    if not p.tuning.activation_offload:
        return 0.0 * np.asarray(c.tp, dtype=float)
    base = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, views["selective"], views["none"])
    k_full = full_recomputed(c, layers)
    per_mb = (layers - k_full) * base + k_full * views["full"]
    resident = offload_resident(base, views["full"], k_full, layers)
    m = p.global_batch / (np.asarray(c.mb, dtype=float) * np.asarray(c.dp, dtype=float))
    return np.maximum(per_mb - resident, 0.0) * np.minimum(np.asarray(c.pp, dtype=float), m)
