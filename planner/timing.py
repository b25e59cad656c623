"""Step time as a visible list of per-axis terms, and the throughput that follows.

Per micro-batch on the slowest stage (the one with the most layers): compute, then each
parallel axis's communication left exposed (TP, CP, EP, PP, ZeRO-3); the pipeline runs m of
them plus (p−1)/v idle slots; once per step the exposed gradient reduction, the optimizer and
any offload traffic (engine.step_time.compose_step). Every formula is in engine/.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .candidates import COMPUTE_DTYPE, Candidates, Problem, Shape, full_recomputed
from .engine import activations as act
from .engine import compute as cmp
from .engine import step_time as st
from .engine.topology import fabric

# Modelling constants (printed with the assumptions, see ASSUMPTIONS):
# ZeRO-3 parameter gathers and the DP gradient reduction overlap compute except their last
# bucket: at least this share stays exposed. An assumption, neither measured nor fitted here.
EXPOSED_FLOOR = 0.05
# Share of a micro-batch's compute that is backward, which the DP reduction overlaps: backward
# costs 2× the forward's FLOPs (the 6N-per-token rule, Kaplan et al. 2020 Sec. 2.1) → 2/3.
BACKWARD_SHARE = 2.0 / 3.0
# Host-side optimizer update speed with an offloaded optimizer, bytes touched per second (a CPU
# Adam step streaming the fp32 states). An assumption, neither measured nor fitted here.
HOST_UPDATE_BYTES_PER_S = 50e9

ASSUMPTIONS: tuple[tuple[str, float, str], ...] = (
    ("exposed_floor", EXPOSED_FLOOR, "share of DP-reduction / ZeRO-3 gather time never hidden "
     "(the last bucket; assumed)"),
    ("backward_share", BACKWARD_SHARE, "share of compute that is backward, which the DP "
     "reduction overlaps (backward = 2× forward)"),
    ("host_update_bytes_per_s", HOST_UPDATE_BYTES_PER_S, "offloaded optimizer: host update "
     "speed, bytes/s (assumed)"),
    ("flash_backward_factor", cmp.FLASH_BACKWARD_FACTOR, "fused attention backward / forward "
     "FLOPs (recomputes QKᵀ; FlashAttention-2)"),
)


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step: each term as it lands on the critical path (the breakdown)
    and each axis's communication before overlap (the *_total fields)."""

    compute: np.ndarray
    recompute: np.ndarray
    tp_exposed: np.ndarray
    cp_exposed: np.ndarray
    ep: np.ndarray
    pp: np.ndarray
    zero3_exposed: np.ndarray
    bubble: np.ndarray
    dp_exposed: np.ndarray
    optimizer: np.ndarray
    offload: np.ndarray
    tp_total: np.ndarray
    cp_total: np.ndarray
    dp_total: np.ndarray
    zero3_total: np.ndarray
    step: np.ndarray

    BREAKDOWN = ("compute", "recompute", "tp_exposed", "cp_exposed", "ep", "pp", "zero3_exposed",
                 "bubble", "dp_exposed", "optimizer", "offload")

    def breakdown(self) -> dict[str, np.ndarray]:
        """The terms that sum to the step, by name."""
        return {k: getattr(self, k) for k in self.BREAKDOWN}

    def communication(self) -> dict[str, np.ndarray]:
        """Each axis's communication per step before overlap."""
        return {"tp": self.tp_total, "cp": self.cp_total, "ep": self.ep, "pp": self.pp,
                "dp": self.dp_total, "zero3": self.zero3_total}


@dataclass(frozen=True)
class Throughput:
    """Tokens, FLOPs and utilisation per step (arrays of len(c))."""

    tokens_per_step: np.ndarray
    tokens_per_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    model_flops: np.ndarray
    hardware_flops: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    bubble_fraction: np.ndarray
    collective_fraction: np.ndarray
    energy_j: np.ndarray
    peak_flops: np.ndarray


@dataclass(frozen=True)
class _Compute:
    """Compute of one micro-batch on the fullest stage, and the FLOPs the other terms reuse."""

    per_micro_batch: np.ndarray    # forward + backward + recompute + output layer
    recompute: np.ndarray
    layer_flops: np.ndarray
    attn_flops: np.ndarray
    rate: np.ndarray
    peak_flops: float


def _compute(p: Problem, c: Candidates, x: Shape, a: dict[int, np.ndarray],
             n_layers: np.ndarray, k_full: np.ndarray) -> _Compute:
    """GEMMs at a shape-dependent share of peak, attention at its own (flash) share, plus the
    memory-bound passes over the activations; backward = 2× forward (flash: 2.5×)."""
    mod, hw, eff = p.model, p.hardware, p.hardware.efficiency
    h, s = mod.hidden, p.seq_len
    peak_flops = hw.gpu.peak_flops.get(COMPUTE_DTYPE[p.precision], hw.gpu.peak_flops["bf16"])
    tokens = x.mb * s / x.cp
    attn_factor = 0.5 if p.flash else 1.0
    layer_matmul = (mod.matmul_params_per_token() - mod.vocab * h) / mod.layers
    f_layer = cmp.layer_forward_flops(tokens, s, layer_matmul / x.tp, mod.attn_dim / x.tp,
                                      attn_factor)
    f_attn = cmp.attention_core_forward_flops(tokens, s, mod.attn_dim / x.tp, attn_factor)
    f_head = 2.0 * x.vocab_padded * h * tokens / x.tp
    ceiling = hw.gpu.matmul_ceiling_fraction * eff.sustained_matmul_fraction
    rate = cmp.matmul_rate(peak_flops, ceiling, h / x.tp, tokens,
                           eff.matmul_half_hidden, eff.matmul_half_tokens)
    # Unfused attention (QKᵀ, scores×V) are batched GEMMs whose short side is the head dim;
    # a fused flash kernel runs at its own measured share of peak (flash_attention_fraction).
    rate_attn = peak_flops * eff.flash_attention_fraction if p.flash else cmp.matmul_rate(
        peak_flops, ceiling, mod.head_dim, tokens, eff.matmul_half_hidden, eff.matmul_half_tokens)
    # a fused kernel's backward recomputes QKᵀ: 5 s×s matmuls against the forward's 2
    attn_bwd = cmp.FLASH_BACKWARD_FACTOR if p.flash else 2.0
    a_none, a_sel = a[act.RECOMPUTE_NONE], a[act.RECOMPUTE_SELECTIVE]
    mem_fwd = cmp.memory_bound_time(eff.memory_passes * a_none, hw.gpu.hbm_bytes_per_s)
    # softmax / dropout over the s×s scores: the memory-bound part selective recompute redoes
    mem_attn = cmp.memory_bound_time(eff.memory_passes * (a_none - a_sel), hw.gpu.hbm_bytes_per_s)
    t_attn_core = f_attn / rate_attn + mem_attn
    t_fwd = (f_layer - f_attn) / rate + f_attn / rate_attn + mem_fwd
    t_bwd = 2.0 * (f_layer - f_attn) / rate + attn_bwd * f_attn / rate_attn + 2.0 * mem_fwd
    recompute_t = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, n_layers * t_attn_core,
                           k_full * t_fwd)
    t_compute = n_layers * (t_fwd + t_bwd) + recompute_t
    return _Compute(per_micro_batch=t_compute + 3.0 * f_head / rate, recompute=recompute_t,
                    layer_flops=f_layer, attn_flops=f_attn, rate=rate, peak_flops=peak_flops)


@dataclass(frozen=True)
class _Comm:
    """Each axis's communication per micro-batch (before overlap and exposed) and per step."""

    tp: np.ndarray
    tp_exposed: np.ndarray
    cp: np.ndarray
    cp_exposed: np.ndarray
    ep: np.ndarray
    pp: np.ndarray
    zero3: np.ndarray
    zero3_exposed: np.ndarray
    dp: np.ndarray
    dp_exposed: np.ndarray


def _comm(p: Problem, c: Candidates, x: Shape, mem, comp: _Compute, n_layers: np.ndarray,
          k_full: np.ndarray) -> _Comm:
    """The α-β time of each axis's collectives on the link its group crosses (engine.step_time)
    and the share left exposed behind the compute that hides it."""
    mod, hw, eff = p.model, p.hardware, p.hardware.efficiency
    h, gpn, fab, act_b = mod.hidden, hw.scale_up.gpus_per_domain, fabric(hw, p.gpus), x.act_bytes
    tp, pp, dp, cp, ep = x.tp, x.pp, x.dp, x.cp, x.ep
    w_b, g_b, _ = x.state_bytes
    tokens = x.mb * p.seq_len / cp
    hide, compute_mb = eff.overlap_efficiency, comp.per_micro_batch
    tp_passes = 4.0 + np.where(c.recompute == act.RECOMPUTE_FULL,
                               2.0 * k_full / np.maximum(n_layers, 1), 0.0)
    tp_comm = n_layers * st.tp_time_per_layer(tokens, h, tp, gpn, fab, act_b,
                                              passes=tp_passes / 2.0)
    cp_comm = n_layers * st.cp_time_per_layer(tokens, mod.kv_heads * mod.head_dim, cp, tp, gpn,
                                              fab, act_b)
    ep_comm = n_layers * (mod.moe_layers / mod.layers) * st.ep_time_per_layer(
        tokens / np.where(c.sp > 0, tp, 1.0), h, max(mod.experts_per_token, 1), ep, tp * cp, gpn,
        fab, act_b)
    pp_comm = st.pp_time_per_micro_batch(tokens, h, tp, pp, tp * cp * dp, gpn, fab, x.v, act_b)
    stage_params_max = np.maximum(mem.first.params, mem.last.params)
    z3_comm = np.where(c.zero >= 3, st.zero3_time_per_micro_batch(
        stage_params_max * w_b, x.shard, tp, gpn, fab), 0.0)
    grad_bytes = np.where(c.zero >= 3, 0.0, stage_params_max * np.where(c.zero >= 1, w_b, g_b))
    dp_comm = np.where(dp * cp > 1, st.dp_time_per_step(grad_bytes, dp * cp, tp, gpn, fab), 0.0)
    return _Comm(tp=tp_comm, tp_exposed=eff.tp_exposed_fraction * tp_comm,
                 cp=cp_comm, cp_exposed=st.exposed(cp_comm, hide * n_layers * 3.0
                                                   * comp.attn_flops / comp.rate),
                 ep=ep_comm, pp=pp_comm, zero3=z3_comm,
                 zero3_exposed=st.exposed(z3_comm, hide * compute_mb, EXPOSED_FLOOR),
                 dp=dp_comm,
                 # overlapped with the last micro-batch's backward, except the last bucket
                 dp_exposed=st.exposed(dp_comm, hide * BACKWARD_SHARE * compute_mb,
                                       EXPOSED_FLOOR))


def _optimizer(p: Problem, c: Candidates, x: Shape, mem) -> tuple[np.ndarray, np.ndarray]:
    """(optimizer step, offload traffic) per step: the update reads and writes the local states
    at HBM speed; an offloaded one moves gradients down and weights up over PCIe and updates
    at host speed."""
    w_b, g_b, k_b = x.state_bytes
    local_state = mem.first.weights + mem.first.gradients + mem.first.optimizer
    t_opt = cmp.memory_bound_time(2.0 * local_state, p.hardware.gpu.hbm_bytes_per_s)
    stage_params_max = np.maximum(mem.first.params, mem.last.params)
    off_bytes = stage_params_max / x.shard * (g_b + w_b)
    t_offload = np.where(c.offload_opt > 0, off_bytes / p.hardware.host.pcie_bytes_per_s
                         + stage_params_max / x.shard * (k_b + w_b + g_b) * 2.0
                         / HOST_UPDATE_BYTES_PER_S, 0.0)
    return t_opt, t_offload


def step_time(p: Problem, c: Candidates, x: Shape, mem, a: dict[int, np.ndarray]
              ) -> tuple[StepTime, Throughput]:
    """The step, composed as a list of per-axis terms; the pipeline is paced by its fullest
    stage (ceil(L/(p·v))·v layers)."""
    n_layers = x.layers[1]
    k_full = full_recomputed(c, n_layers)
    comp = _compute(p, c, x, a, n_layers, k_full)
    cm = _comm(p, c, x, mem, comp, n_layers, k_full)
    t_opt, t_offload = _optimizer(p, c, x, mem)
    m = x.micro_batches
    per_micro_batch = [comp.per_micro_batch, cm.tp_exposed, cm.cp_exposed, cm.ep, cm.pp,
                       cm.zero3_exposed]
    per_step = [cm.dp_exposed, t_opt, t_offload]
    step, bubble = st.compose_step(per_micro_batch, m, x.pp, x.v, per_step)
    t = StepTime(compute=m * (comp.per_micro_batch - comp.recompute), recompute=m * comp.recompute,
                 tp_exposed=m * cm.tp_exposed, cp_exposed=m * cm.cp_exposed, ep=m * cm.ep,
                 pp=m * cm.pp, zero3_exposed=m * cm.zero3_exposed, bubble=bubble,
                 dp_exposed=cm.dp_exposed, optimizer=t_opt, offload=t_offload,
                 tp_total=m * cm.tp, cp_total=m * cm.cp, dp_total=cm.dp, zero3_total=m * cm.zero3,
                 step=step)
    return t, _throughput(p, c, x, comp, cm, t, n_layers, k_full)


def _throughput(p: Problem, c: Candidates, x: Shape, comp: _Compute, cm: _Comm, t: StepTime,
                n_layers: np.ndarray, k_full: np.ndarray) -> Throughput:
    """Tokens/s, model FLOPs (6N + attention, the paper's count) vs hardware FLOPs (+ what
    recomputation redoes), MFU and HFU against peak, bubble and collective shares, energy."""
    mod, m, step, peak = p.model, x.micro_batches, t.step, comp.peak_flops
    tokens_step = p.global_batch * p.seq_len
    model_flops = mod.training_flops_per_token(p.seq_len) * tokens_step
    extra = np.where(c.recompute == act.RECOMPUTE_SELECTIVE,
                     mod.layers * comp.attn_flops * x.tp * x.cp,
                     np.where(c.recompute == act.RECOMPUTE_FULL,
                              k_full / np.maximum(n_layers, 1) * mod.layers * comp.layer_flops
                              * x.tp * x.cp, 0.0))
    hw_flops = model_flops + extra * m * x.dp
    return Throughput(
        tokens_per_step=np.full_like(x.tp, tokens_step), tokens_per_s=tokens_step / step,
        tokens_per_s_per_gpu=tokens_step / step / p.gpus,
        model_flops=np.full_like(x.tp, model_flops), hardware_flops=hw_flops,
        mfu=model_flops / (step * p.gpus * peak), hfu=hw_flops / (step * p.gpus * peak),
        bubble_fraction=t.bubble / step,
        collective_fraction=(m * (cm.tp_exposed + cm.cp_exposed + cm.ep + cm.pp
                                  + cm.zero3_exposed) + cm.dp_exposed) / step,
        energy_j=step * p.gpus * p.hardware.gpu.power_w, peak_flops=np.full_like(x.tp, peak))
