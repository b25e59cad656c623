"""The step's terms per micro-batch: compute (GEMMs, attention, memory-bound work, MoE, fp8)
and each axis's communication with what the framework's implementation hides. Every formula is
in engine/ (compute, attention, fp8, moe, overlap, nccl via topology, step_time); this module
gathers the model's, the hardware's, the framework profile's and the layout's numbers. The
framework profile (specs/framework.py) decides: gradient-reduction and gather dtypes,
per-layer vs bucketed sharding, re-gathers in backward, prefetch depth, overlap (TP comm
overlap too), PP scatter/gather, what "selective" recompute redoes, the kernel, attention and
the CP ring's implementation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from planner.evaluation.candidates import (AXIS_COLUMNS, COMPUTE_DTYPE, STATE_COLUMNS, Candidates, Problem,
                         Shape, full_recomputed, shape)
from planner.evaluation import paired_overlap as paired, tp_overlap as tpo, tuning as tun
from planner.evaluation.distinct import on_distinct
from planner.evaluation.stage_balance import stage_edges
from planner.engine import activations as act, attention as attn, compute as cmp, fp8 as f8
from planner.engine import moe, overlap as ov, step_time as st
from planner.engine.arrays import array
from planner.engine.params import attention_score_forward_flops, mlp_params
from planner.engine.topology import fabric

# Memory-bound (elementwise) HBM traffic per kernel class, relative to fused kernels (the A100
# fit of memory_passes was made on Megatron's fused Transformer Engine / apex kernels):
# torch.compile fuses most elementwise chains (norm, SwiGLU, residual, RoPE) but not into the
# GEMMs; eager PyTorch launches each op alone, reading and writing its tensors every time.
# Fitted on the one published same-job pair: torchtitan Llama 3.1 8B on 8 H100, FSDP eager 5,762
# vs compile 6,667 tokens/s/GPU (calibration_modern.json), with fused = 1 held.
KERNEL_MEMORY_FACTOR = {"fused": 1.0, "compiled": 1.0, "eager": 2.5}


@dataclass(frozen=True, kw_only=True)
class Compute:
    """Compute of one micro-batch on the fullest stage, and the pieces the other terms reuse."""

    per_micro_batch: np.ndarray    # forward + backward + recompute of the fullest stage's layers
    recompute: np.ndarray
    head: np.ndarray               # the last stage's edge: output layer + loss, MTP's projection
    embed: np.ndarray              # the first stage's edge: the embedding lookup and its gradient
    layer_fwd: np.ndarray          # one layer's forward seconds
    layer_bwd: np.ndarray          # one layer's backward seconds (with its share of recompute)
    layer_flops: np.ndarray        # one layer's forward FLOPs (per GPU)
    attn_flops: np.ndarray         # its s×s part
    attn_fwd: np.ndarray           # seconds of the s×s part forward
    layer_linear: np.ndarray       # one layer's linear GEMM seconds, forward + backward
    rate: np.ndarray
    peak_flops: float
    offload: np.ndarray            # CPU activation offload's exposed PCIe time (in per_micro_batch)
    heaviest: np.ndarray | None = None   # the most compute of any stage (timing._paced)


def _rates(p: Problem, x: Shape, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(bf16 GEMM rate, linear-layer rate — the low-precision recipe's where there is one —, MFU
    peak: the recipe's peak under a recipe). A recipe runs at its peak (engine.fp8.recipe_peak) × its measured ceiling (the
    profile's recipe_ceiling_fractions, else the fp8 MAMF share)."""
    hw, eff, h = p.hardware, p.hardware.efficiency, p.model.hidden
    peak = hw.gpu.peak_flops.get(COMPUTE_DTYPE[p.precision], hw.gpu.peak_flops["bf16"])
    bf16 = hw.gpu.peak_flops["bf16"]
    shape = cmp.shape_efficiency(h / x.tp, eff.matmul_half_hidden) * cmp.shape_efficiency(
        tokens, eff.matmul_half_tokens)
    rate = bf16 * hw.gpu.matmul_ceiling_fraction * eff.sustained_matmul_fraction * shape
    recipe = p.recipe
    low_peak = None if recipe is None else f8.recipe_peak(hw.gpu.peak_flops, recipe)
    if recipe is None or low_peak is None:
        return array(rate), array(rate), peak
    ceil8 = eff.recipe_ceiling_fractions.get(recipe.name, eff.fp8_matmul_ceiling_fraction
                                             or hw.gpu.matmul_ceiling_fraction)
    return array(rate), array(f8.fp8_gemm_rate(low_peak, ceil8, eff.sustained_matmul_fraction,
                                               shape)), low_peak


def compute(p: Problem, c: Candidates, x: Shape, a: dict[int, np.ndarray],
            n_layers: np.ndarray, k_full: np.ndarray) -> Compute:
    """Linear GEMMs at their (bf16 or fp8) rate, MoE experts as grouped GEMMs plus the router
    and permutation, flash attention by kernel / sequence / head dim, the memory-bound passes
    scaled by kernel class, fp8 casts; backward 2× forward (attention 2.5×); recompute as the
    framework defines it."""
    mod, hw, eff, fw = p.model, p.hardware, p.hardware.efficiency, p.fw.time
    h, s, hbm = mod.hidden, p.seq_len, hw.gpu.hbm_bytes_per_s
    tokens = x.mb * s / x.cp
    rate, lin_rate, peak = _rates(p, x, tokens)
    bf16 = hw.gpu.peak_flops["bf16"]
    moe_share = mod.moe_layers / mod.layers if mod.is_moe else 0.0
    expert_w = mlp_params(h, mod.expert_width, mod.gated, mod.linear_bias) if mod.is_moe else 0.0
    layer_matmul = (mod.matmul_params_per_token() - mod.vocab * h) / mod.layers
    expert_active = moe_share * max(mod.experts_per_token, 1) * expert_w
    dense_matmul = layer_matmul - expert_active
    f_lin = 2.0 * tokens * dense_matmul / x.tp
    causal = p.flash   # flash kernels skip masked tiles: a query's keys stay in its document
    span = p.attention_span if causal else s
    score_dim = mod.score_dim(span, causal)   # a·d scaled by the layers' windows
    f_attn = array(attention_score_forward_flops(tokens, span, score_dim / x.tp, causal))
    if p.flash:
        frac = attn.kernel_fraction(fw.attention_kernel, eff.flash_attention_fraction,
                                    eff.fa3_attention_fraction)
        t_attn, t_attn_b = map(array, attn.attention_time(
            tokens, span, score_dim / x.tp, mod.head_dim, True, bf16, frac, eff.attention_half_seq))
    else:  # unfused QKᵀ and scores×V: batched GEMMs whose short side is the head dim
        r_u = cmp.matmul_rate(peak, hw.gpu.matmul_ceiling_fraction * eff.sustained_matmul_fraction,
                              mod.head_dim, tokens, eff.matmul_half_hidden, eff.matmul_half_tokens)
        t_attn, t_attn_b = f_attn / r_u, 2.0 * f_attn / r_u
    t_exp_f, t_exp_b = np.zeros_like(x.tp), np.zeros_like(x.tp)
    if mod.is_moe:
        k, n_half = max(mod.experts_per_token, 1), (eff.matmul_half_hidden, eff.matmul_half_tokens)
        grouped = eff.grouped_gemm_fraction * moe.expert_shape_share(
            tokens, k, x.ep, mod.experts, mod.expert_width / x.etp, h / x.tp, *n_half)
        e_f, e_b = map(array, moe.moe_layer_time(tokens / x.tp, h, mod.experts, k, expert_w,
                                                 lin_rate, grouped, hbm, x.act_bytes,
                                                 p.moe_load(x.ep)))
        t_exp_f, t_exp_b = moe_share * e_f, moe_share * e_b
    cast_f, cast_b = np.zeros_like(x.tp), np.zeros_like(x.tp)
    if p.recipe is not None:
        act_elems = tokens * (2.0 * h + mod.attn_dim + mod.ffn) / x.tp
        cast_f, cast_b = map(array, f8.cast_time(act_elems, dense_matmul / x.tp, hbm, p.recipe))
    a_none, a_sel = a[act.RECOMPUTE_NONE], a[act.RECOMPUTE_SELECTIVE]
    passes = eff.memory_passes * KERNEL_MEMORY_FACTOR[fw.kernel_class]
    mem_fwd = cmp.memory_bound_time(passes * a_none, hbm)
    mem_attn = cmp.memory_bound_time(passes * (a_none - a_sel), hbm)
    t_lin = f_lin / lin_rate
    # a frozen base runs no weight-gradient GEMM; adapters and QLoRA's dequantisation add theirs
    bwd_gemm, t_adapt, t_dq = tun.compute_terms(p, tokens, x.tp, t_lin, lambda r: cmp.matmul_rate(
        bf16, hw.gpu.matmul_ceiling_fraction * eff.sustained_matmul_fraction, r, tokens,
        eff.matmul_half_hidden, eff.matmul_half_tokens))
    t_fwd = t_lin + t_attn + t_exp_f + mem_fwd + cast_f + t_adapt + t_dq
    # the weight gradient at the recipe's rate, or at bf16 where the recipe keeps it there
    t_wgrad = t_lin if p.recipe is None or p.recipe.wgrad_low else f_lin / rate
    t_bwd = t_lin + (bwd_gemm - 1.0) * t_wgrad + t_attn_b + t_exp_b + 2.0 * mem_fwd + cast_b + 2.0 * t_adapt + t_dq
    if fw.selective_recompute == "op-save-list":   # torchtitan: every second matmul + elementwise
        sel = fw.selective_matmul_share * (t_lin + t_exp_f) + mem_fwd + cast_f
    else:                                            # Megatron's core attention
        sel = t_attn + mem_attn
    per_layer_re = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, sel,
                            np.where(c.recompute == act.RECOMPUTE_FULL,
                                     t_fwd * k_full / np.maximum(n_layers, 1), 0.0))
    recompute_t = n_layers * per_layer_re
    offload = tun.activation_offload(p, c, a, n_layers, k_full, t_fwd, t_bwd + per_layer_re)
    head, embed = stage_edges(p, x, tokens, rate, lin_rate)
    return Compute(per_micro_batch=n_layers * (t_fwd + t_bwd) + recompute_t + offload,
                   recompute=recompute_t, offload=offload, head=head, embed=embed, layer_fwd=t_fwd,
                   layer_bwd=t_bwd + per_layer_re,
                   layer_flops=2.0 * tokens * layer_matmul / x.tp + f_attn, attn_flops=f_attn,
                   attn_fwd=t_attn, rate=rate, peak_flops=peak,
                   layer_linear=2.0 * t_lin + (bwd_gemm - 1.0) * t_wgrad)


class StageParams(Protocol):
    """What the time model reads of a stage's memory (evaluate.StageMemory; evaluate imports
    this module, so the time model names the fields it reads instead of the class)."""
    @property
    def params(self) -> np.ndarray: ...


class StageStates(StageParams, Protocol):
    """... and of the first stage's: its states too."""
    @property
    def weights(self) -> np.ndarray: ...
    @property
    def gradients(self) -> np.ndarray: ...
    @property
    def optimizer(self) -> np.ndarray: ...


class MemoryStages(Protocol):
    """What the time model reads of evaluate.Memory: its first and last stage."""

    @property
    def first(self) -> StageStates: ...
    @property
    def last(self) -> StageParams: ...


@dataclass(frozen=True, kw_only=True)
class Comm:
    """Each axis's communication per micro-batch (before overlap, and exposed) and per step."""

    tp: np.ndarray
    tp_exposed: np.ndarray
    cp: np.ndarray
    cp_exposed: np.ndarray
    ep: np.ndarray
    ep_exposed: np.ndarray
    pp: np.ndarray
    pp_exposed: np.ndarray
    zero3: np.ndarray
    zero3_exposed: np.ndarray
    dp: np.ndarray
    dp_exposed: np.ndarray


def _layer_units(p: Problem, x: Shape, stage_params: np.ndarray, n_layers: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(parameters of one layer, of the embedding and output layer) on the fullest stage."""
    edge = np.where(x.pp > 1, 1.0, 2.0) * x.vocab_padded * p.model.hidden / x.tp
    return np.maximum(stage_params - edge, 0.0) / np.maximum(n_layers, 1), edge


def _state_collectives(p: Problem, x: Shape, zero: np.ndarray, stage_params: np.ndarray
                       ) -> dict[str, np.ndarray]:
    """ZeRO-3's per-layer collectives (all-gather g, reduce-scatter r of one layer, g_e and r_e
    of the edge layers, over the shard group; r, r_e with HSDP's all-reduce across replicas), the
    DP reduction (red, ZeRO ≥ 1's gather over DP·CP) and its buckets: STATE_COLUMNS' part."""
    fw, hw = p.fw.time, p.hardware
    gpn, fab = hw.scale_up.gpus_per_domain, fabric(hw, p.gpus)
    layer_params, edge_params = _layer_units(p, x, stage_params, x.layers[1])
    # a fine-tune reduces (and re-gathers after the update) its adapters' gradients alone, and
    # gathers its frozen base in the base's format
    trained, gather_b, reduce_b = stage_params, p.gather_bytes, fw.reduce_bytes
    if p.tuning.frozen:
        trained = x.layers[1] * tun.adapter_params_per_layer(p) / x.tp
        gather_b, reduce_b = tun.base_bytes(p), reduce_b * trained / np.maximum(stage_params, 1.0)
    out: dict[str, np.ndarray] = {}
    out["g"], out["r"] = map(array, st.zero3_unit_times(
        layer_params, gather_b, reduce_b, x.shard, x.tp * x.cp, gpn, fab))
    out["g_e"], out["r_e"] = map(array, st.zero3_unit_times(
        edge_params, gather_b, reduce_b, x.shard, x.tp * x.cp, gpn, fab))
    n = x.dp * x.cp
    # hybrid sharding: each reduce-scatter is followed by the replicas' all-reduce of the shard
    out["r"] = out["r"] + array(st.hsdp_replica_time(layer_params, fw.reduce_bytes, x.shard,
                                                     n, x.tp * x.cp, gpn, fab))
    out["r_e"] = out["r_e"] + array(st.hsdp_replica_time(edge_params, fw.reduce_bytes, x.shard,
                                                         n, x.tp * x.cp, gpn, fab))
    # dense gradients over DP·CP (ranks TP apart); expert gradients over the expert-data-
    # parallel group, expert-DP = TP·CP·DP / (ETP·EP) ranks ETP·EP apart (Megatron-Core's expert
    # DDP buckets on its expert_data_parallel_group, expert rank order tp-ep-dp,
    # parallel_state.py:745-760), one after the other (EP 1 and ETP = TP: the same group)
    separate = (x.ep > 1) | (x.etp != x.tp)
    expert = np.where(separate, np.minimum(_expert_stage_params(p, x), trained), 0.0)
    dense = trained - expert
    red, gather = st.dp_reduction_times(dp_gradient_bytes(p, dense), dense * p.gather_bytes,
                                        zero >= 1, n, x.tp, gpn, fab)
    red_e, gather_e = st.dp_reduction_times(dp_gradient_bytes(p, expert),
                                            expert * p.gather_bytes, zero >= 1, x.expert_dp,
                                            x.etp * x.ep, gpn, fab)
    moe = expert > 0
    out["red"] = array(red) + np.where(moe, red_e, 0.0)
    out["gather"] = array(gather) + np.where(moe, gather_e, 0.0)
    bucket = np.maximum(fw.bucket_params, fw.bucket_params_per_dp_rank * n)
    emb = x.vocab_padded * p.model.hidden / x.tp     # one parameter: it closes the last bucket
    out["buckets"], out["last"] = (np.where(bucket > 0, ov.bucket_count(stage_params, bucket, big),
                                            x.layers[1]) for big in (0.0, emb))
    return out


def _expert_stage_params(p: Problem, x: Shape) -> np.ndarray:
    """Expert weights one GPU of the fullest stage holds: its layers' share of MoE layers × E
    experts' MLPs / (EP·ETP) (engine.budget.stage_params)."""
    mod = p.model
    if not mod.is_moe:
        return np.zeros_like(x.tp, dtype=float)
    per_layer = (mod.moe_layers / mod.layers * mod.experts
                 * float(mlp_params(mod.hidden, mod.expert_width, mod.gated, mod.linear_bias)))
    return array(x.layers[1] * per_layer / (x.ep * x.etp))


class _Zero3Rows(NamedTuple):
    """What _sharded reads of each row: candidate, shape, compute and collective columns."""

    recompute: np.ndarray
    zero: np.ndarray
    pp: np.ndarray
    micro_batches: np.ndarray
    layer_fwd: np.ndarray
    layer_bwd: np.ndarray
    g: np.ndarray
    r: np.ndarray
    g_e: np.ndarray
    r_e: np.ndarray
    n_layers: np.ndarray


def _sharded(p: Problem, z: _Zero3Rows) -> tuple[np.ndarray, np.ndarray]:
    """ZeRO-3 / FSDP per micro-batch: (communication, exposed), engine.step_time.
    zero3_time_per_micro_batch under the framework's profile (gather and reduce dtypes,
    re-gathers in backward and under recompute, prefetch depth). Where the framework keeps a
    stage gathered and its gradients unsharded to the last micro-batch (FrameworkProfile.
    shards_once_per_step_under_pp: torchtitan's FSDP2 under pipelining), the gathers and
    reduce-scatters run once per step, as 1/m of a step per micro-batch (the idle slots then
    carry (p−1)/(v·m) of it too, an over-count). 0 below ZeRO-3."""
    fw, eff = p.fw.time, p.hardware.efficiency
    regather = np.where(z.pp > 1, float(fw.regathers_in_backward(2)),
                        float(fw.regathers_in_backward(1)))
    again = np.where((z.recompute == act.RECOMPUTE_FULL) & fw.regather_under_recompute, 1.0, 0.0)
    once = (z.pp > 1) & p.fw.shards_once_per_step_under_pp()
    total, exposed = st.zero3_time_per_micro_batch(
        z.g, z.r, z.g_e, z.r_e, z.layer_fwd, z.layer_bwd, z.n_layers, regather + again, once,
        z.micro_batches, fw.prefetch_depth, eff.overlap_slowdown)
    on = z.zero >= 3
    return np.where(on, total, 0.0), np.where(on, exposed, 0.0)


def _sharded_rows(p: Problem, c: Candidates, x: Shape, comp: Compute,
                  coll: dict[str, np.ndarray], n_layers: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """_sharded computed on the ZeRO-3 rows alone (the rest are 0, as _sharded gives them):
    the same arithmetic row by row on what those rows read."""
    z = _Zero3Rows(c.recompute, c.zero, x.pp, x.micro_batches, comp.layer_fwd, comp.layer_bwd,
                   coll["g"], coll["r"], coll["g_e"], coll["r_e"], n_layers)
    on = c.zero >= 3
    if on.all():
        return _sharded(p, z)
    idx = np.flatnonzero(on)
    t, e = _sharded(p, _Zero3Rows(*(column.take(idx) for column in z)))
    total, exposed = np.zeros(len(on)), np.zeros(len(on))
    total[idx], exposed[idx] = t, e
    return total, exposed


def dp_gradient_bytes(p: Problem, stage_params: np.ndarray) -> np.ndarray:
    """Gradient bytes into the DP reduction: parameters × the framework's reduce bytes."""
    return np.asarray(stage_params, dtype=float) * p.fw.time.reduce_bytes


def _reduction(p: Problem, c: Candidates, x: Shape, comp: Compute, coll: dict[str, np.ndarray],
               n_layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step, ZeRO ≤ 2: (communication, exposed), engine.step_time.dp_time_per_step under
    the framework's profile: overlapped with the last micro-batch's backward (and the gather
    with the next forward) where it overlaps, and every micro-batch under ZeRO-2, which keeps
    only its gradient shard (DeepSpeed stage 2 reduces each micro-step; FSDP2 with gradient
    sync on), unless the framework accumulates unsharded gradients under PP (torchtitan's
    pipelining reduces once). 0 without a DP·CP group, and under ZeRO-3 (in its own term)."""
    fw, eff = p.fw.time, p.hardware.efficiency
    n = x.dp * x.cp
    mem = p.fw.memory
    unsharded = (x.pp > 1) & (mem.state_layout == "fsdp2") & mem.accumulate_unsharded_grads_under_pp
    times = np.where((c.zero == 2) & ~unsharded, x.micro_batches, 1.0)
    overlap = np.where(c.zero >= 3, fw.overlaps_grad_reduce(3), fw.overlaps_grad_reduce(1))
    total, exposed = st.dp_time_per_step(coll["red"], coll["gather"], coll["buckets"], times,
                                         overlap, n_layers * comp.layer_bwd, n_layers *
                                         comp.layer_fwd, eff.overlap_slowdown, coll["last"])
    on = ((n > 1) | ((x.expert_dp > 1) & p.model.is_moe)) & (c.zero < 3)
    return np.where(on, total, 0.0), np.where(on, exposed, 0.0)


def _axis_times(p: Problem, c: Candidates, x: Shape) -> dict[str, np.ndarray]:
    """Per micro-batch on the fullest stage, TP, CP, EP and PP time on the links their groups
    cross (engine.step_time, topology): the AXIS_COLUMNS part."""
    mod, hw, fw, mem = p.model, p.hardware, p.fw.time, p.fw.memory
    h, gpn, fab, act_b = mod.hidden, hw.scale_up.gpus_per_domain, fabric(hw, p.gpus), x.act_bytes
    tp, pp, dp, cp, ep = x.tp, x.pp, x.dp, x.cp, x.ep
    n_layers = x.layers[1]
    k_full = full_recomputed(c, n_layers)
    tokens = x.mb * p.seq_len / cp
    tp_passes = 4.0 + np.where(c.recompute == act.RECOMPUTE_FULL,
                               2.0 * k_full / np.maximum(n_layers, 1), 0.0)
    pp_tp = tp if fw.pp_scatter_gather else np.ones_like(tp)
    return {
        "tp": n_layers * st.tp_time_per_layer(tokens, h, tp, gpn, fab, act_b,
                                              passes=tp_passes / 2),
        "cp": n_layers * st.cp_time_per_layer(  # the ring as the framework runs it
            tokens, mod.kv_heads * mod.head_dim, cp, tp, gpn, fab, act_b, rotate=mem.cp_rotate,
            q_dim=mod.heads * mod.head_dim, accum_bytes=mem.cp_accum_bytes),
        "ep": n_layers * (mod.moe_layers / mod.layers) * p.moe_load(ep) * st.ep_time_per_layer(
            tokens / np.where(c.sp > 0, tp, 1.0), h, max(mod.experts_per_token, 1), ep,
            x.etp, gpn, fab, act_b, tp_passes / 2, p.ep_route),   # EP ranks ETP apart (tp-ep-dp)
        "pp": array(st.pp_time_per_micro_batch(tokens, h, pp_tp, pp, tp * cp * dp, gpn, fab,
                                               x.v, act_b))}


class Groups(NamedTuple):
    """Rows grouped alike in some columns, where the caller knows it already (each as (each
    row's group, the group count), or None): STATE_COLUMNS, AXIS_COLUMNS, ACTIVATION_COLUMNS."""

    state: tuple[np.ndarray, int] | None = None
    axis: tuple[np.ndarray, int] | None = None
    act: tuple[np.ndarray, int] | None = None


def communication(p: Problem, c: Candidates, x: Shape, mem: MemoryStages, comp: Compute,
                  n_layers: np.ndarray, groups: Groups = Groups()) -> Comm:
    """Each axis's NCCL time on the link its group crosses (engine.step_time, topology) and the
    part left exposed behind the compute that can hide it; the axis times once per AXIS_COLUMNS
    tuple, the ZeRO / DP collectives once per STATE_COLUMNS tuple (`groups` where known)."""
    ax = axis_terms(p, c, x, comp, n_layers, groups)
    stage_params = np.maximum(mem.first.params, mem.last.params)
    coll = on_distinct(c, STATE_COLUMNS, lambda u, rows: _state_collectives(
        p, shape(p, u), u.zero, stage_params[rows]), rows=True, groups=groups.state)
    z3, z3_exp = _sharded_rows(p, c, x, comp, coll, n_layers)
    dp_comm, dp_exp = _reduction(p, c, x, comp, coll, n_layers)
    return Comm(**ax, zero3=z3, zero3_exposed=z3_exp, dp=dp_comm, dp_exposed=dp_exp)


def axis_terms(p: Problem, c: Candidates, x: Shape, comp: Compute, n_layers: np.ndarray,
               groups: Groups = Groups()) -> dict[str, np.ndarray]:
    """Per micro-batch, the TP, CP, EP and PP terms (each before and after overlap; EP and PP
    under paired chunks, paired_overlap): what needs neither the states nor ZeRO / DP."""
    eff = p.hardware.efficiency
    axes = on_distinct(c, AXIS_COLUMNS, lambda u: _axis_times(p, u, shape(p, u)),
                       groups=groups.axis)
    ep_exp, pp_exp = paired.exposed_ep_pp(p, c, x, comp.per_micro_batch, axes["ep"], axes["pp"])
    return dict(tp=axes["tp"], tp_exposed=tpo.tp_exposed(p, c.sp, x.tp, comp.layer_linear,
                                                         axes["tp"], n_layers), cp=axes["cp"],
                cp_exposed=array(ov.beside(axes["cp"], n_layers * 3.0 * comp.attn_fwd,
                                           eff.overlap_slowdown)),
                ep=axes["ep"], ep_exposed=ep_exp, pp=axes["pp"], pp_exposed=pp_exp)
