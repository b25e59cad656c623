"""Per-GPU memory of one pipeline stage under a framework profile: the three views and the peak.

Gathers the model's, the layout's and the framework's numbers and composes the engine:
states (engine/memory.py, budget.py), activations per recompute policy (activations.py,
recompute.py), framework buffers (framework_memory.py), the moment of the peak (peak.py) and the
caching allocator (allocator.py). Vectorised over candidate layouts like evaluate.py; `p` is an
evaluate.Problem and `c` its Candidates (duck-typed here to keep the import one-way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.evaluation import tuning as tun
from planner.evaluation.candidates import full_recomputed
from planner.engine import activations as act
from planner.engine import allocator as alc
from planner.engine import budget as bud
from planner.engine import framework_memory as fwm
from planner.engine import loss as lossm
from planner.engine import peak as pk
from planner.engine import recompute as rc
from planner.engine import ring_attention as ring
from planner.engine.memory import (MUON_ADAMW_EXTRA, PAGED_STATES, PRECISION_RECIPES,
                                   expert_shard_degree, optimizer_bytes_per_param,
                                   paged_moment_bytes)
from planner.engine.arrays import FloatArray, Num
from planner.engine.fp8 import PER_TENSOR, fp8_saved_terms
from planner.engine.params import norm_params

# Column-parallel matmul inputs: the all-gathered sequence under SP (framework-dependent).
SP_GATHERED_TERMS = ("qkv_in", "fc1_in")
# Items in the order a printout lists them.
ITEMS = ("weights", "gradients", "optimizer", "fp8_weight_cache", "frozen_weights", "gathered_params",
         "grad_buffers", "activations", "working", "loss", "optimizer_temp")


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage's share of the model on one GPU (arrays over candidates)."""

    layers: Any            # transformer layers on the stage
    dense_params: Any      # parameters on this GPU outside the experts (TP-split + replicated)
    expert_params: Any     # expert parameters on this GPU
    layer_params: Any      # the largest layer's parameters on this GPU
    root_params: Any       # embedding + output layer on this GPU (an FSDP root unit)
    head_params: Any       # output layer on this GPU
    has_embedding: Any     # bool: the stage runs the embedding
    has_head: Any          # bool: the stage runs the output layer and the loss


def replicated_layer_params(mod: Any) -> float:
    """Per-layer parameters every TP rank keeps whole: the two norms and the row-parallel biases
    (attention output and MLP down projection; Megatron's RowParallelLinear adds its bias after
    the reduction, so it is not split)."""
    norms = mod.layer_norms * norm_params(mod.hidden, mod.norm_bias)
    return float(norms + (2.0 * mod.hidden if mod.linear_bias else 0.0))


def _recipe(p: Any, fw: Any, zero: np.ndarray
            ) -> tuple[tuple[FloatArray, FloatArray, FloatArray], np.ndarray]:
    """(weight, gradient, optimizer) bytes per parameter before sharding, and whether the FSDP2
    layout applies. FSDP2 from ZeRO 2 keeps the fp32 master as the sharded parameter, so its
    weights are the master bytes and its optimizer the moments alone."""
    w_b, g_b, k_b = optimizer_bytes_per_param(p.precision, p.optimizer)
    master = PRECISION_RECIPES[p.precision][2]
    if p.precision in ("mixed", "fp8"):
        g_b = fw.memory.grad_bytes
    fsdp = (fw.memory.state_layout == "fsdp2") & (zero >= 2) & (master > 0)
    return (np.where(fsdp, master, w_b), np.full_like(zero, g_b, dtype=float),
            np.where(fsdp, k_b - master, k_b)), fsdp


def _activation_inputs(p: Any, c: Any) -> tuple[tuple, dict]:
    """The shape and keyword arguments of engine.activations.layer_activation_terms."""
    mod = p.model
    tp, cp = np.asarray(c.tp, dtype=float), np.asarray(c.cp, dtype=float)
    width = 4.0 if p.precision == "fp32" else 2.0
    shape = (p.seq_len, np.asarray(c.mb, dtype=float), mod.hidden, mod.heads, mod.kv_heads,
             mod.head_dim, mod.activation_ffn(p.moe_load(c.ep)))
    latent = (mod.q_lora_rank or 0) + mod.kv_lora_rank if mod.is_mla else 0.0
    return shape, dict(mlp=mod.mlp, dropout=mod.dropout, flash=p.flash, tp=tp, sp=c.sp, cp=cp,
                       bytes_per_elem=width, v_head_dim=mod.value_dim, latent=latent,
                       fused_swiglu=p.fw.time.kernel_class != "eager",
                       norm_bytes=p.fw.memory.norm_saved_bytes)


def activation_terms(p: Any, c: Any) -> dict[int, dict[str, Num]]:
    """engine.activations.layer_activation_terms per recompute mode (none, selective, full)."""
    shape, common = _activation_inputs(p, c)
    return {mode: act.layer_activation_terms(*shape, recompute=mode, **common)
            for mode in (act.RECOMPUTE_NONE, act.RECOMPUTE_SELECTIVE, act.RECOMPUTE_FULL)}


def layer_activation_views(p: Any, c: Any, fw: Any,
                           terms: dict[int, dict[str, Num]] | None = None
                           ) -> dict[str, Num]:
    """Per-layer, per-micro-batch bytes: kept under each recompute mode and with none (`terms`
    is activation_terms(p, c) where the caller has it)."""
    mod = p.model
    terms = terms or activation_terms(p, c)
    shape, common = _activation_inputs(p, c)
    tp, cp, width, ffn = common["tp"], common["cp"], common["bytes_per_elem"], shape[-1]
    # Transformer Engine saves GEMM inputs quantised: the recipe's bytes (scales included), not 2
    fp8_share = p.recipe.element_bytes / 2.0 if p.recipe is not None \
        and fw.memory.fp8_saved_activations else 1.0
    seq_div = np.where(np.asarray(c.sp) != 0, tp, 1.0)
    gathered = fw.memory.sp_saves_gathered_input
    tokens = p.seq_len / cp * np.asarray(c.mb, dtype=float)
    adapters = tun.adapter_activations(p, tokens, width)  # LoRA's rank-r intermediates
    fp8_terms = fp8_saved_terms(fw.memory.fp8_activation_input, fw.memory.fp8_attention_saved)

    def stored(recompute: int) -> list[np.ndarray]:  # each kept tensor's bytes
        return [np.asarray(v) * (fp8_share if k in fp8_terms else 1.0)
                * (seq_div if gathered and k in SP_GATHERED_TERMS else 1.0)
                * tun.saved_term_scale(p, k) for k, v in terms[recompute].items()]

    def total(recompute: int) -> np.ndarray:
        kept = sum(stored(recompute))
        return np.asarray(kept + (adapters if recompute != act.RECOMPUTE_FULL else 0.0))
    none, full = total(act.RECOMPUTE_NONE), total(act.RECOMPUTE_FULL)
    # MoE: the experts' first grouped GEMM saves its input, the tokens permuted to their top-k
    # experts (k·h per token, on the rank's sequence shard), beside the router's input
    moe_in = (mod.moe_layers / mod.layers) * tokens * mod.experts_per_token * mod.hidden \
        * width / seq_div if mod.is_moe else 0.0 * tokens
    none = none + moe_in
    gaps = {m: alc.tensors_gap(stored(m)) for m in (act.RECOMPUTE_NONE, act.RECOMPUTE_SELECTIVE,
                                                   act.RECOMPUTE_FULL)}
    if fw.time.selective_recompute == "op-save-list":
        sac = rc.op_sac_terms(*shape, mlp=mod.mlp, tp=tp, sp=c.sp, cp=cp, bytes_per_elem=width,
                              mm_is_saved=p.precision != "fp8")
        selective = np.asarray(rc.op_sac_layer_bytes(sac), dtype=float)
        gaps[act.RECOMPUTE_SELECTIVE] = alc.tensors_gap(list(sac.values()))
    else:
        selective = total(act.RECOMPUTE_SELECTIVE) + moe_in
    if p.tuning.frozen:  # the op save list never keeps more than the frozen layer needs
        selective = np.minimum(selective, none)
    ring_f, ring_b = ring.ring_attention_working(  # CP as torch's ring attention, per layer
        tokens, mod.heads / tp, mod.head_dim, cp, rotate=fw.memory.cp_rotate, width=width,
        accum_bytes=fw.memory.cp_accum_bytes)
    return {"none": none, "selective": selective, "full": full,
            "gap_none": gaps[act.RECOMPUTE_NONE] + alc.tensors_gap([moe_in]),
            "gap_selective": gaps[act.RECOMPUTE_SELECTIVE], "gap_full": gaps[act.RECOMPUTE_FULL],
            "held_inputs": tun.held_inputs(p, terms[act.RECOMPUTE_NONE]),  # QLoRA, old bnb
            # autograd holds the incoming gradient of a block and those of its widest op
            "grad_working": tokens * width * (mod.hidden / seq_div + 2.0 * ffn / tp) + ring_b,
            "fwd_working": tokens * width * ffn / tp + ring_f}


def _stage_activations(p: Any, c: Any, st: Any, a: dict[str, np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(saved activations of one micro-batch on the stage, the recompute transient in backward,
    the allocator's rounding of the micro-batch's saved tensors and of the transient's: each
    tensor's own gap)."""
    mod = p.model
    tp, cp = np.asarray(c.tp, dtype=float), np.asarray(c.cp, dtype=float)
    width = 4.0 if p.precision == "fp32" else 2.0
    base = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, a["selective"], a["none"])
    k_full = full_recomputed(c, np.asarray(st.layers, dtype=float))
    per_mb = np.asarray(act.stage_activation_bytes(base, st.layers, 1.0,
                                                   full_recompute_layers=k_full,
                                                   full_recompute_layer_bytes=a["full"]))
    base_gap = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, a["gap_selective"], a["gap_none"])
    gap = np.asarray(act.stage_activation_bytes(base_gap, st.layers, 1.0,
                                                full_recompute_layers=k_full,
                                                full_recompute_layer_bytes=a["gap_full"]))
    mb = np.asarray(c.mb, dtype=float)
    per_mb = per_mb + np.where(st.has_embedding, act.embedding_activation_bytes(
        p.seq_len, mb, mod.hidden, dropout=mod.dropout, tp=tp, sp=c.sp, cp=cp), 0.0)
    head = np.where(st.has_head, act.output_layer_bytes(
        p.seq_len, mb, mod.hidden, tp=tp, sp=c.sp, cp=cp, bytes_per_elem=width), 0.0)
    if p.tuning.activation_offload:  # on the GPU: the layer whose copy is in flight, the head
        per_mb = np.minimum(per_mb, tun.offload_resident(base, a["full"], k_full, st.layers))
        gap = np.minimum(gap, tun.offload_resident(base_gap, a["gap_full"], k_full, st.layers))
    per_mb = per_mb + head
    # the layer being recomputed in backward rebuilds what its policy dropped
    transient = np.where(k_full > 0, a["none"] - a["full"],
                         np.where(c.recompute == act.RECOMPUTE_SELECTIVE,
                                  a["none"] - a["selective"], 0.0))
    # ... each of its tensors rounded on its own while it runs
    rebuilt = np.where(k_full > 0, a["gap_none"] - a["gap_full"],
                       np.where(c.recompute == act.RECOMPUTE_SELECTIVE,
                                a["gap_none"] - a["gap_selective"], 0.0))
    return per_mb, transient, gap, np.maximum(rebuilt, 0.0)


def paged_bytes(p: Any) -> float | None:
    """Bytes per trained parameter a paged optimizer pages: its moments, over the tensors it
    pages (tuning.paged_fraction); None for any other optimizer."""
    if p.optimizer not in PAGED_STATES:
        return None
    return paged_moment_bytes(p.precision, p.optimizer) * tun.paged_fraction(p)


def has_fp8_params(p: Any, fw: Any) -> bool:
    """Whether the linears' weights are fp8 parameters: the profile says so and they train in fp8."""
    return bool(fw.memory.fp8_params and p.recipe is not None and not p.tuning.frozen)


def fp8_copies(p: Any, fw: Any) -> float:
    """Quantised copies of each linear weight cached between micro-batches (framework_memory.
    fp8_cached_copies): the transpose where the GPU needs it, the row-wise one unless fp8 params."""
    transpose = not (p.recipe is not None and p.recipe.name in PER_TENSOR
                     and p.hardware.gpu.fp8_any_layout)
    return fwm.fp8_cached_copies(fw.memory.fp8_weight_copies, transpose_needed=transpose,
                                 weight_is_fp8=has_fp8_params(p, fw) or tun.fp8_base(p))


def _states(p: Any, c: Any, fw: Any, st: Stage) -> dict[str, np.ndarray]:
    """Weights, gradients, optimizer state (after ZeRO/FSDP sharding and offload), fp8 cache."""
    zero = np.asarray(c.zero)
    dpcp = np.asarray(c.dp, dtype=float) * np.asarray(c.cp, dtype=float)
    shard = np.where(c.shard > 0, np.asarray(c.shard, dtype=float), dpcp)
    # experts' states shard over expert-DP = TP·CP·DP / (ETP·EP) (Megatron-Core's expert data
    # parallel group, parallel_state.py:748), ETP = TP where not given, in the shard group's share
    tp = np.asarray(c.tp, dtype=float)
    etp = np.where(np.asarray(c.etp) > 0, np.asarray(c.etp, dtype=float), tp)
    expert_dp = tp * dpcp / (etp * np.asarray(c.ep, dtype=float))
    expert_shard = expert_shard_degree(shard, dpcp, expert_dp)
    (w_b, g_b, k_b), fsdp = _recipe(p, fw, zero)
    sharding = np.where(fsdp, 3, zero)
    trained, trained_experts, frozen = st.dense_params, st.expert_params, 0.0 * zero
    if p.tuning.frozen:  # only the adapters train; the base is frozen weights alone
        trained, frozen = tun.split_stage(p, np.asarray(c.tp, dtype=float), st, sharding, shard)
        trained_experts = 0.0 * trained
    local = np.asarray(st.dense_params) + np.asarray(st.expert_params)
    # the TE linears: all but the embedding and output layer (Megatron runs those in bf16)
    linear = np.maximum(local - np.asarray(st.root_params, dtype=float), 0.0)
    e_b = 0.0 if p.recipe is None else p.recipe.element_bytes
    if has_fp8_params(p, fw):
        w_b = np.where(fsdp, w_b, fwm.fp8_param_weight_bytes(local, linear, weight_bytes=w_b,
                                                              element_bytes=e_b))
    weights, grads, optim = bud.sharded_states(trained, trained_experts, sharding,
                                               shard, expert_shard, w_b, g_b, k_b)
    if p.optimizer == "muon" and not p.tuning.frozen:  # embeddings and head run AdamW
        extra = MUON_ADAMW_EXTRA * (0.5 if p.precision == "bf16-pure" else 1.0)
        optim = optim + bud.sharded_states(st.root_params, 0.0 * shard, sharding, shard,
                                           expert_shard, 0.0, 0.0, extra)[2]
    paged = paged_bytes(p)
    if paged is None:
        weights, optim = bud.offloaded(weights, optim, c.offload_opt, c.offload_par, c.zero)
    else:  # a paged optimizer's moments paged to the host; master and gradients stay
        kept = 1.0 - paged / np.maximum(np.asarray(k_b, dtype=float), 1e-9)
        optim = np.where(np.asarray(c.offload_opt) > 0, np.asarray(optim) * kept, optim)
    # where the framework moves the gradient partitions with the optimizer (its profile),
    # only its reduce buckets (framework buffers) stay on the GPU
    grads = np.where((np.asarray(c.offload_opt) > 0) & fw.memory.offload_moves_gradients
                     & (paged is None), 0.0, grads)
    # optimizer in backward: each gradient freed once applied, the step run parameter by
    # parameter: one layer's gradients and step temporaries live, not the model's
    layer_share = np.minimum(np.asarray(st.layer_params, dtype=float) / np.maximum(local, 1.0),
                             1.0) if p.tuning.optimizer_in_backward else 1.0
    grads = np.asarray(grads) * layer_share
    cache = fwm.fp8_weight_cache(linear, element_bytes=e_b, cached_copies=fp8_copies(p, fw))
    # temporaries scale with the parameters whose optimizer state is on this GPU: optim / K
    opt_temp = np.where(k_b > 0, np.asarray(optim) / np.maximum(k_b, 1e-9), 0.0) \
        * fw.memory.optimizer_temp_bytes * layer_share
    return {"weights": weights, "gradients": grads, "optimizer": optim,
            "fp8_weight_cache": cache + 0.0 * local, "frozen_weights": frozen + 0.0 * local,
            "optimizer_temp": opt_temp, "fsdp": fsdp,
            "trained_share": tun.trainable_fraction(p, local, np.asarray(trained) + 0.0 * local)}


def _framework_buffers(p: Any, c: Any, fw: Any, st: Stage, fsdp: np.ndarray
                       ) -> dict[str, np.ndarray]:
    """Gathered parameters and gradient buffers at forward, first and later backward."""
    pp = np.asarray(c.pp)
    zero = np.asarray(c.zero)
    gather_b = p.gather_bytes
    pp_keeps_gathered = not fw.time.regathers_in_backward(pp=2)  # the profile's under-PP rule
    keep = fsdp & ((zero == 2) | ((pp > 1) & pp_keeps_gathered))
    gathered = np.where(fsdp, fwm.fsdp_gathered_params(
        np.asarray(st.dense_params) + st.expert_params, st.layer_params, st.root_params,
        keep_gathered=keep, prefetch=fw.time.prefetch_depth, param_bytes=gather_b), 0.0)
    accumulate = keep & (pp > 1) & fw.memory.accumulate_unsharded_grads_under_pp
    stage_p = np.asarray(st.dense_params) + st.expert_params
    per_layer, accumulated = fwm.fsdp_unsharded_grads(
        stage_p, st.layer_params, st.head_params, accumulate=accumulate, grad_bytes=gather_b,
        reduce_bytes=fw.time.reduce_bytes, reduce_in_flight=fw.memory.reduce_in_flight)
    bucket, live = fwm.deepspeed_buffers(
        zero, stage_p, st.layer_params, reduce_bucket=fw.time.bucket_params or stage_p,
        prefetch_bucket=fw.time.prefetch_bucket_params or st.layer_params,
        max_live=fw.memory.max_live_params, grad_bytes=fw.memory.grad_bytes
        if p.precision in ("mixed", "fp8") else 2.0, param_bytes=gather_b)
    zero_layout = ~fsdp
    # Megatron's buckets are views of its main_grad buffer: reduce_in_flight = 0 there; an
    # FSDP framework below ZeRO 2 runs plain DDP, whose gradients are views of its buckets
    bucket = np.asarray(bucket) * fw.memory.reduce_in_flight \
        * float(fw.memory.state_layout == "zero")
    # when the loss runs the root unit has resharded (no PP) and the last block, which
    # torchtitan never reshards after forward, is still gathered
    at_loss = np.where(keep, gathered, np.asarray(st.layer_params) * gather_b)
    return {"gathered": np.where(zero_layout, live, gathered),
            "gathered_at_loss": np.where(zero_layout, live, np.where(fsdp, at_loss, 0.0)),
            "grads_first": np.where(zero_layout, bucket, per_layer),
            "grads_accumulated": np.where(zero_layout, 0.0, accumulated)}


def stage_states(p: Any, c: Any, fw: Any, st: Stage) -> dict[str, np.ndarray]:
    """What a stage holds whatever the micro-batch, schedule and recompute: the states after
    sharding and offload, the framework's gathered parameters and gradient buffers, the
    persistent sum (weights + gradients + optimizer + fp8 cache) and the parameters held."""
    states = _states(p, c, fw, st)
    buf = _framework_buffers(p, c, fw, st, states.pop("fsdp"))
    share = states.pop("trained_share")
    if p.tuning.frozen:  # gradient buffers hold the adapters' gradients alone; a sharded frozen
        # base is gathered in its storage format (FSDP all-gathers the quantised storage)
        fmt = tun.base_bytes(p) / fw.time.gather_bytes
        buf = {**buf, "grads_first": np.asarray(buf["grads_first"]) * share,
               "grads_accumulated": np.asarray(buf["grads_accumulated"]) * share,
               "gathered": np.asarray(buf["gathered"]) * fmt,
               "gathered_at_loss": np.asarray(buf["gathered_at_loss"]) * fmt}
    persistent = sum(np.asarray(states[k]) for k in
                     ("weights", "gradients", "optimizer", "fp8_weight_cache", "frozen_weights"))
    return {**states, **buf, "persistent": persistent,
            "params": st.dense_params + st.expert_params}


def stage_activations(p: Any, c: Any, fw: Any, st: Any, a: dict[str, np.ndarray]
                      ) -> dict[str, np.ndarray]:
    """What one micro-batch brings to a stage (st needs layers, has_embedding, has_head; a is
    layer_activation_views): saved activations, the forward and backward working sets, the loss
    transient, and the allocator's rounding of its saved tensors and of the transient's
    (allocator.tensors_gap)."""
    mod = p.model
    tp, cp = np.asarray(c.tp, dtype=float), np.asarray(c.cp, dtype=float)
    per_mb, recompute_transient, gap, gap_rebuilt = _stage_activations(p, c, st, a)
    head = np.asarray(st.has_head, dtype=float)
    fm = fw.memory
    loss_fwd = np.where(tp > 1, fm.loss_forward_bytes if fm.loss_forward_bytes_tp is None
                        else fm.loss_forward_bytes_tp, fm.loss_forward_bytes)
    loss_bwd = np.where(tp > 1, fm.loss_backward_bytes if fm.loss_backward_bytes_tp is None
                        else fm.loss_backward_bytes_tp, fm.loss_backward_bytes)
    tokens = p.seq_len / cp * np.asarray(c.mb, dtype=float)
    loss = head * lossm.loss_peak_bytes(
        tokens, bud.padded_vocab(mod.vocab, tp) / tp, mod.hidden, np.maximum(loss_fwd, loss_bwd),
        chunks=fm.loss_chunks, whole_bytes=fm.loss_whole_bytes,
        accumulator_bytes=fm.loss_accumulator_bytes, fused=fm.loss_fused_linear)
    dequant = tun.dequant_working(p, tp, st.has_head)  # QLoRA: a linear dequantised
    return {"per_mb": per_mb, "forward_working": a["fwd_working"] + dequant
            + tun.previous_step_held(p, c, st, a["held_inputs"], tokens, tp),
            "backward_working": recompute_transient + a["grad_working"] + dequant, "loss": loss,
            "has_loss": head, "rounding": gap, "rounding_transient": gap_rebuilt}


def phase_inputs(s: Any, a: Any) -> dict[str, Any]:
    """engine.peak.phase_items' items besides the states and activations, from a stage's
    stage_states s and stage_activations a (stage_memory's five phases, and the search's
    ceiling on them, search.bound_terms.transient_ceiling, read them from here alone)."""
    return dict(forward_working=a["forward_working"], backward_working=a["backward_working"],
                loss=a["loss"], gathered_forward=s["gathered"],
                gathered_at_loss=s["gathered_at_loss"], gathered_backward=s["gathered"],
                grads_first=s["grads_first"], grads_accumulated=s["grads_accumulated"],
                has_loss=a["has_loss"], optimizer_temp=s["optimizer_temp"])


def stage_memory(p: Any, fw: Any, s: dict[str, Any], a: dict[str, Any],
                 in_flight: Any, micro_batches: Any, detail: bool = True) -> dict[str, Any]:
    """Items at the peak, the three views and the peak's moment for one stage, from its
    stage_states s, its stage_activations a and the micro-batches in flight at its peak
    (`detail` False: reserved and device total only, what the search ranks by).

    allocated = max over peak.PHASES; reserved = the largest allocator.reserved_bytes over them
    (the demand, not capped at the device); device total = reserved + context + NCCL (the verdict
    compares it with capacity minus the margin).
    """
    persistent_states = s["persistent"]
    phases = pk.phase_items(persistent_states, a["per_mb"], in_flight, micro_batches,
                            **phase_inputs(s, a))
    totals = pk.phase_totals(phases)
    # the saved tensors of the micro-batches in flight, each rounded on its own; expandable
    # segments map 2 MiB pages into one segment per stream: blocks split at 512 B there, so
    # no tensor strands the rest of a 2 MiB-rounded segment of its own
    rounding = (np.asarray(a["rounding"]) * np.asarray(in_flight, dtype=float)
                + a["rounding_transient"]) * (not fw.memory.expandable_segments)
    # Max reserved is the largest of the moments' reserved bytes. Only the states survive the
    # step boundary (the in-flight micro-batches but one are recycled whole: steady_bytes);
    # gathered copies and accumulated gradients are freed at the last backward
    # and allocated again among the activations of the next step, so they churn with them.
    steady = alc.steady_bytes(persistent_states, a["per_mb"], in_flight)
    reserved = np.asarray(alc.max_reserved_bytes(
        totals, steady, rounding, [phases[ph]["activations"] for ph in pk.PHASES],
        share=p.budget.fragmentation_fraction, expandable=fw.memory.expandable_segments),
        dtype=float)
    views = {"reserved": reserved, "device_total": alc.device_total_bytes(
        reserved, p.budget.context_bytes, p.budget.comm_buffer_bytes)}
    if not detail:
        return views
    allocated, moment, at_peak = pk.peak_of(phases, totals)
    items = {**{k: s[k] for k in ITEMS[:5]},  # the states, then what is live at the peak
             "gathered_params": at_peak["gathered"], "grad_buffers": at_peak["grads"],
             "activations": at_peak["activations"], "working": at_peak["working"],
             "loss": at_peak["loss"], "optimizer_temp": at_peak["optimizer"]}
    return {**views, "items": items, "allocated": allocated,
            "fragmentation": np.asarray(reserved) - allocated, "moment": moment,
            "in_flight_at_peak": np.where(moment == 3, np.minimum(
                in_flight, np.asarray(micro_batches, dtype=float) - 1.0), in_flight)}
