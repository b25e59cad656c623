"""One layout, or a whole array of candidate layouts, to memory per stage and step time.

`evaluate` is the single code path: `estimate` calls it with one candidate, the search with
every candidate at once (numpy arrays, no per-candidate Python loop). The arithmetic lives in
engine/; this module only gathers the model's, the hardware's and the layout's numbers.
"""


from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .engine import activations as act
from .engine import budget as bud
from .engine import compute as cmp
from .engine import step_time as st
from .engine.params import mlp_params
from . import validate
from .engine.memory import optimizer_bytes_per_param
from .engine.pipeline import micro_batches_in_flight
from .engine.allocator import FRAGMENTATION_SHARE
from .engine.ranks import inside_domain
from .engine.topology import fabric
from .hardware import HardwareProfile
from .layout import Layout, Rule
from .model import ModelSpec

SCHEDULE_CODES = {"1f1b": 0, "gpipe": 1, "interleaved": 2}
RECOMPUTE_CODES = {"none": act.RECOMPUTE_NONE, "selective": act.RECOMPUTE_SELECTIVE,
                   "full": act.RECOMPUTE_FULL}
OFFLOAD_CODES = {"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU, "nvme": bud.OFFLOAD_NVME}
# Precision recipe → (compute dtype for peak FLOP/s, activation bytes per element).
COMPUTE_DTYPE = {"mixed": "bf16", "mixed-fp32-grads": "bf16", "fp8": "fp8", "fp32": "tf32",
                 "bf16-pure": "bf16"}


class MemoryBudget(BaseModel):
    """What the GPU holds besides tensors, each a named, documented default the user can change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_bytes: float = Field(1.0e9, ge=0, description="CUDA context and cuBLAS/cuDNN "
                                 "workspaces outside PyTorch's allocator: ~0.5-1 GB on Hopper")
    comm_buffer_bytes: float = Field(1.0e9, ge=0, description="NCCL's channel buffers, outside "
                                     "PyTorch's allocator (framework buckets are counted inside)")
    fragmentation_fraction: float = Field(FRAGMENTATION_SHARE, ge=0, le=1, description=
                                          "caching-allocator fragmentation, as a share of the "
                                          "bytes allocated and freed within a step (fitted)")
    margin_fraction: float = Field(0.05, ge=0, lt=1, description="safety margin held back from "
                                   "capacity for spikes the model does not see")


@dataclass
class Candidates:
    """Candidate layouts as parallel numpy arrays (one entry per candidate)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    zero: np.ndarray
    shard: np.ndarray        # ZeRO sharding group; 0 = the whole data-parallel (× CP) group
    mb: np.ndarray
    chunks: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray  # -1 = all layers of the stage
    schedule: np.ndarray
    offload_opt: np.ndarray
    offload_par: np.ndarray

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> "Candidates":
        def col(f):
            return np.array([f(x) for x in layouts], dtype=np.int64)
        return cls(tp=col(lambda x: x.tp), pp=col(lambda x: x.pp), dp=col(lambda x: x.dp),
                   cp=col(lambda x: x.cp), ep=col(lambda x: x.ep), zero=col(lambda x: x.zero),
                   shard=col(lambda x: x.shard_group or 0), mb=col(lambda x: x.micro_batch),
                   chunks=col(lambda x: x.chunks), sp=col(lambda x: int(x.sequence_parallel)),
                   recompute=col(lambda x: RECOMPUTE_CODES[x.recompute]),
                   recompute_layers=col(lambda x: -1 if x.recompute_layers is None
                                        else x.recompute_layers),
                   schedule=col(lambda x: SCHEDULE_CODES[x.schedule]),
                   offload_opt=col(lambda x: OFFLOAD_CODES[x.offload_optimizer]),
                   offload_par=col(lambda x: OFFLOAD_CODES[x.offload_params]))

    def take(self, idx) -> "Candidates":
        return Candidates(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def layout(self, i: int, precision: str, optimizer: str) -> Layout:
        inv = {v: k for k, v in SCHEDULE_CODES.items()}
        rec = {v: k for k, v in RECOMPUTE_CODES.items()}
        off = {v: k for k, v in OFFLOAD_CODES.items()}
        rl = int(self.recompute_layers[i])
        return Layout(tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]),
                      cp=int(self.cp[i]), ep=int(self.ep[i]), zero=int(self.zero[i]),
                      shard_group=int(self.shard[i]) or None, micro_batch=int(self.mb[i]),
                      schedule=inv[int(self.schedule[i])], chunks=int(self.chunks[i]),
                      sp=bool(self.sp[i]), recompute=rec[int(self.recompute[i])],
                      recompute_layers=None if rl < 0 else rl,
                      offload_optimizer=off[int(self.offload_opt[i])],
                      offload_params=off[int(self.offload_par[i])],
                      precision=precision, optimizer=optimizer)


@dataclass(frozen=True)
class Problem:
    """The fixed part of a question: what is trained, on what, with which batch."""

    model: ModelSpec
    hardware: HardwareProfile
    gpus: int
    seq_len: int
    global_batch: int
    precision: str = "mixed"
    optimizer: str = "adam"
    budget: MemoryBudget = MemoryBudget()
    flash_attention: bool | None = None  # None: on unless the model is a dropout GPT (papers)
    framework: Any = None  # specs.framework.FrameworkProfile; None: the default profile

    @property
    def flash(self) -> bool:
        return (not self.model.dropout) if self.flash_attention is None else self.flash_attention


# Rules checked on every candidate, in the order a rejection is attributed.
RULE_NAMES = ("world-size", "tp-in-nvlink-domain", "heads-divisible-by-tp",
              "kv-heads-compatible-with-tp", "layers-divisible-by-pp", "interleaving-valid",
              "batch-divisible", "sequence-divisible", "experts-divisible-by-ep",
              "sharding-valid", "offload-valid", "fits-in-memory")


def _rules(p: Problem, c: Candidates, m: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised rule predicates (True = passes). m = micro-batches per step (may be fractional
    where the batch does not divide; that candidate fails batch-divisible)."""
    mod, hw = p.model, p.hardware
    g = hw.scale_up.gpus_per_domain
    inner = c.tp * c.cp
    per_stage = c.pp * c.chunks
    dpcp = c.dp * c.cp
    shard = np.where(c.shard > 0, c.shard, dpcp)
    return {
        "world-size": c.dp * c.tp * c.pp * c.cp == p.gpus,
        "tp-in-nvlink-domain": inside_domain(inner, g),
        "heads-divisible-by-tp": mod.heads % c.tp == 0,
        "kv-heads-compatible-with-tp": (mod.kv_heads % c.tp == 0) | (c.tp % mod.kv_heads == 0),
        "layers-divisible-by-pp": (per_stage * np.ceil(mod.layers / per_stage) - mod.layers <= 2)
        & (per_stage <= mod.layers),
        "interleaving-valid": np.where(c.schedule == SCHEDULE_CODES["interleaved"],
                                       (c.pp > 1) & (c.chunks >= 2) & (np.round(m) % c.pp == 0),
                                       c.chunks == 1),
        "batch-divisible": (p.global_batch % (c.mb * c.dp) == 0) & (p.global_batch >= c.mb * c.dp),
        "sequence-divisible": np.where(c.cp > 1, p.seq_len % (2 * c.cp) == 0, True)
        & np.where(c.sp > 0, (p.seq_len // c.cp) % c.tp == 0, True),
        "experts-divisible-by-ep": np.where(c.ep > 1, (mod.experts > 0) & (mod.experts % np.maximum(c.ep, 1) == 0)
                                            & (dpcp % c.ep == 0), True),
        "sharding-valid": (dpcp % shard == 0) & np.where(c.shard > 0, c.zero >= 1, True),
        "offload-valid": np.where(c.offload_par > 0, c.zero >= 3, True)
        & np.where(c.offload_opt > 0, c.zero >= 1, True),
    }


def evaluate(p: Problem, c: Candidates) -> dict[str, np.ndarray]:
    """Memory per stage (first, middle, last), step-time breakdown and rule predicates for every
    candidate. All values in bytes, seconds, FLOPs; arrays of len(c)."""
    mod, hw, eff = p.model, p.hardware, p.hardware.efficiency
    f64 = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep = (f64(x) for x in (c.tp, c.pp, c.dp, c.cp, c.ep))
    mb, v, sp = f64(c.mb), f64(c.chunks), c.sp > 0
    s, h = p.seq_len, mod.hidden
    w_b, g_b, k_b = optimizer_bytes_per_param(p.precision, p.optimizer)
    act_b = 4.0 if p.precision == "fp32" else 2.0
    gpn = hw.scale_up.gpus_per_domain
    fab = fabric(hw, p.gpus)
    r: dict[str, np.ndarray] = {}

    # ---- batch ---------------------------------------------------------------------------
    m = p.global_batch / (mb * dp)               # micro-batches per step (accumulation)
    r["micro_batches"] = m
    rules = _rules(p, c, m)

    # ---- parameters per GPU, per stage -----------------------------------------------------
    # Full stages hold ceil(L/(p·v))·v layers; when that overshoots L by 1 or 2 the first and
    # last (virtual) stages hold one fewer each: Llama 3's 126 layers on 16 stages (Dubey et al.
    # 2024, Sec. 3.3.2); Megatron's --decoder-first/last-pipeline-num-layers.
    n_full = np.ceil(mod.layers / (pp * v)) * v
    deficit = pp * n_full - mod.layers
    n_stage = {"first": np.where(pp > 1, n_full - np.ceil(deficit / 2), mod.layers),
               "middle": n_full,
               "last": np.where(pp > 1, n_full - np.floor(deficit / 2), mod.layers)}
    r["uneven_stages"] = deficit > 0
    moe_share = mod.moe_layers / mod.layers
    # Expert weights proper are all experts' MLPs; the rest of an MoE layer is dense.
    experts_w = (mod.experts * mlp_params(h, mod.expert_width, mod.gated, mod.linear_bias)
                 if mod.is_moe else 0.0)
    moe_dense = mod.moe_layer_params() - experts_w if mod.is_moe else 0.0
    dense_per_layer = (1 - moe_share) * mod.layer_params() + moe_share * moe_dense
    expert_per_layer = moe_share * experts_w
    vpad = bud.padded_vocab(mod.vocab, tp)
    single = pp == 1
    none_ = np.zeros_like(tp, dtype=bool)
    # stage → (runs the embedding, runs the output layer and loss, stage index); p = 1: both
    stage_defs = {"first": (~none_, single, 0.0), "middle": (none_, none_, 1.0),
                  "last": (single, ~none_, pp - 1.0)}
    shard = np.where(c.shard > 0, f64(c.shard), dp * cp)
    expert_shard = np.maximum(np.minimum(shard, dp * cp / ep), 1.0)
    largest_layer = np.maximum(mod.layer_params(), moe_dense + experts_w / ep) if mod.is_moe \
        else float(mod.layer_params())

    # ---- activations per layer (one micro-batch) --------------------------------------------
    ffn_act = mod.experts_per_token * mod.expert_width if mod.is_moe else mod.ffn
    common = dict(mlp=mod.mlp, dropout=mod.dropout, flash=p.flash, tp=tp, sp=c.sp, cp=cp,
                  bytes_per_elem=act_b)
    shape = (s, mb, h, mod.heads, mod.kv_heads, mod.head_dim, ffn_act)
    a_none = act.layer_activation_bytes(*shape, recompute=act.RECOMPUTE_NONE, **common)
    a_sel = act.layer_activation_bytes(*shape, recompute=act.RECOMPUTE_SELECTIVE, **common)
    a_full = act.layer_activation_bytes(*shape, recompute=act.RECOMPUTE_FULL, **common)
    base = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, a_sel, a_none)

    def full_recomputed(n_layers):
        return np.where(c.recompute == act.RECOMPUTE_FULL,
                        np.where(c.recompute_layers < 0, n_layers,
                                 np.minimum(c.recompute_layers, n_layers)), 0.0)
    sched_names = {code: name for name, code in SCHEDULE_CODES.items()}

    def in_flight(stage_index):
        return np.select([c.schedule == code for code in sched_names],
                         [f64(micro_batches_in_flight(name, pp, m, stage_index, v))
                          for code, name in sched_names.items()])

    # ---- memory per stage: framework_profile × engine (memory_model.stage_memory) -----------
    from .memory_model import Stage, replicated_layer_params, stage_memory
    from .specs.framework import load_framework
    fw = p.framework or load_framework(None)
    budget = p.budget
    capacity = hw.gpu.memory_bytes
    usable = capacity * (1.0 - budget.margin_fraction)
    # norms and row-parallel biases (and the MoE router) stay whole on every TP rank
    repl = replicated_layer_params(mod) + (moe_share * h * mod.experts if mod.is_moe else 0.0)
    positions = mod.embedding_params() - mod.vocab * h
    vocab_w = vpad * h
    head_w = np.where(mod.tied_embeddings & (pp == 1), 0.0, vocab_w)
    layer_gpu = (largest_layer - repl) / tp + repl
    for stage, (has_emb, has_head, index) in stage_defs.items():
        n_layers = n_stage[stage]
        emb_gpu = np.where(has_emb, vocab_w / tp + positions, 0.0)
        head_gpu = np.where(has_head, head_w / tp + mod.final_norm_params(), 0.0)
        dense_p, expert_p = bud.stage_params(n_layers, dense_per_layer - repl, expert_per_layer,
                                             tp, ep)
        dense_p = dense_p + n_layers * repl + emb_gpu + head_gpu
        st_ = Stage(layers=n_layers, dense_params=dense_p, expert_params=expert_p,
                    layer_params=layer_gpu, root_params=emb_gpu + head_gpu, head_params=head_gpu,
                    in_flight=in_flight(index), has_embedding=has_emb, has_head=has_head)
        mem = stage_memory(p, c, fw, st_, m)
        items = dict(mem["items"])
        items.update(comm_buffers=np.full_like(tp, budget.comm_buffer_bytes),
                     cuda_context=np.full_like(tp, budget.context_bytes),
                     fragmentation=mem["fragmentation"])
        for k_, val in items.items():
            r[f"mem.{stage}.{k_}"] = f64(val) + 0.0 * tp
        r[f"mem.{stage}.total"] = f64(mem["device_total"]) + 0.0 * tp
        r[f"mem.{stage}.allocated"] = f64(mem["allocated"]) + 0.0 * tp
        r[f"mem.{stage}.reserved"] = f64(mem["reserved"]) + 0.0 * tp
        r[f"mem.{stage}.moment"] = f64(mem["moment"]) + 0.0 * tp
        r[f"mem.{stage}.in_flight"] = f64(mem["in_flight_at_peak"]) + 0.0 * tp
        r[f"params.{stage}"] = dense_p + expert_p
    has_middle = pp > 2
    r["has_middle"] = has_middle
    middle = np.where(has_middle, r["mem.middle.total"], 0.0)
    peak = np.maximum(np.maximum(r["mem.first.total"], r["mem.last.total"]), middle)
    r["peak_memory"] = peak
    r["peak_stage"] = np.select([peak == r["mem.first.total"], peak == middle], [0, 1], 2)
    r["usable_memory"] = np.full_like(tp, usable)
    r["capacity"] = np.full_like(tp, capacity)
    rules["fits-in-memory"] = peak <= usable
    r["headroom"] = usable - peak

    # The time model paces the pipeline by its fullest stage.
    n_layers, k_full = n_full, full_recomputed(n_full)

    # ---- compute per micro-batch on one GPU ------------------------------------------------
    dtype = COMPUTE_DTYPE[p.precision]
    peak_flops = hw.gpu.peak_flops.get(dtype, hw.gpu.peak_flops["bf16"])
    tokens = mb * s / cp
    attn_factor = 0.5 if p.flash else 1.0
    matmul_active = mod.matmul_params_per_token() - mod.vocab * h      # per token, all layers
    layer_matmul = matmul_active / mod.layers
    f_layer = cmp.layer_forward_flops(tokens, s, layer_matmul / tp, mod.attn_dim / tp, attn_factor)
    f_attn = cmp.attention_core_forward_flops(tokens, s, mod.attn_dim / tp, attn_factor)
    f_head = 2.0 * vpad * h * tokens / tp
    ceiling = hw.gpu.matmul_ceiling_fraction * eff.sustained_matmul_fraction
    rate = cmp.matmul_rate(peak_flops, ceiling, h / tp, tokens,
                           eff.matmul_half_hidden, eff.matmul_half_tokens)
    # Unfused attention (QKᵀ, scores×V) are batched GEMMs whose short side is the head dim;
    # a fused flash kernel runs at its own measured share of peak (Efficiency.flash_attention_fraction).
    rate_attn = peak_flops * eff.flash_attention_fraction if p.flash else cmp.matmul_rate(
        peak_flops, ceiling, mod.head_dim, tokens,
        eff.matmul_half_hidden, eff.matmul_half_tokens)
    # a fused kernel's backward recomputes QKᵀ: 5 s×s matmuls against the forward's 2
    attn_bwd = cmp.FLASH_BACKWARD_FACTOR if p.flash else 2.0
    mem_fwd = cmp.memory_bound_time(eff.memory_passes * a_none, hw.gpu.hbm_bytes_per_s)
    # softmax / dropout over the s×s scores: the memory-bound part selective recompute redoes
    mem_attn = cmp.memory_bound_time(eff.memory_passes * (a_none - a_sel), hw.gpu.hbm_bytes_per_s)
    t_attn_core = f_attn / rate_attn + mem_attn
    t_layer_fwd = (f_layer - f_attn) / rate + f_attn / rate_attn + mem_fwd
    t_layer_bwd = 2.0 * (f_layer - f_attn) / rate + attn_bwd * f_attn / rate_attn + 2.0 * mem_fwd
    recompute_t = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, n_layers * t_attn_core,
                           k_full * t_layer_fwd)
    t_head = 3.0 * f_head / rate
    # the slowest stage paces the pipeline: the one carrying the output layer (the last, or the only)
    t_compute = n_layers * (t_layer_fwd + t_layer_bwd) + recompute_t
    compute_mb = t_compute + t_head

    # ---- communication per micro-batch ---------------------------------------------------------
    tp_passes = 4.0 + np.where(c.recompute == act.RECOMPUTE_FULL, 2.0 * k_full / np.maximum(n_layers, 1), 0.0)
    tp_comm = n_layers * st.tp_time_per_layer(tokens, h, tp, gpn, fab, act_b, passes=tp_passes / 2.0)
    tp_exposed = eff.tp_exposed_fraction * tp_comm
    cp_comm = n_layers * st.cp_time_per_layer(tokens, mod.kv_heads * mod.head_dim, cp, tp, gpn,
                                              fab, act_b)
    hide = eff.overlap_efficiency
    cp_exposed = st.exposed(cp_comm, hide * n_layers * 3.0 * f_attn / rate)
    ep_comm = n_layers * moe_share * st.ep_time_per_layer(
        tokens / np.where(sp, tp, 1.0), h, max(mod.experts_per_token, 1), ep, tp * cp, gpn, fab, act_b)
    pp_comm = st.pp_time_per_micro_batch(tokens, h, tp, pp, tp * cp * dp, gpn, fab, v, act_b)
    stage_params_max = np.maximum(r["params.first"], r["params.last"])
    z3_comm = np.where(c.zero >= 3, st.zero3_time_per_micro_batch(
        stage_params_max * w_b, shard, tp, gpn, fab), 0.0)
    z3_exposed = st.exposed(z3_comm, hide * compute_mb, 0.05)
    t_mb = compute_mb + tp_exposed + cp_exposed + ep_comm + pp_comm + z3_exposed
    busy, bubble = st.pipeline_step_time(t_mb, m, pp, v)

    # ---- once per step: gradient reduction, optimizer -----------------------------------------
    grad_reduce_bytes = np.where(c.zero >= 3, 0.0, stage_params_max * np.where(c.zero >= 1, w_b, g_b))
    dp_comm = np.where(dp * cp > 1, st.dp_time_per_step(grad_reduce_bytes, dp * cp, tp, gpn, fab), 0.0)
    # overlapped with the last micro-batch's backward, except the last bucket (~5 %)
    dp_exposed = st.exposed(dp_comm, hide * 2.0 / 3.0 * compute_mb, 0.05)
    local_state = r["mem.first.weights"] + r["mem.first.gradients"] + r["mem.first.optimizer"]
    t_opt = cmp.memory_bound_time(2.0 * local_state, hw.gpu.hbm_bytes_per_s)
    # Offloaded optimizer: gradients down and weights up over PCIe, update at host speed.
    off_bytes = stage_params_max / shard * (g_b + w_b)
    t_offload = np.where(c.offload_opt > 0, off_bytes / hw.host.pcie_bytes_per_s
                         + stage_params_max / shard * (k_b + w_b + g_b) * 2.0 / 50e9, 0.0)
    step = busy + bubble + dp_exposed + t_opt + t_offload

    # ---- throughput, FLOPs, utilisation ------------------------------------------------------
    tokens_step = p.global_batch * s
    model_flops = mod.training_flops_per_token(s) * tokens_step
    extra = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, mod.layers * f_attn * tp * cp,
                     np.where(c.recompute == act.RECOMPUTE_FULL,
                              k_full / np.maximum(n_layers, 1) * mod.layers * f_layer * tp * cp, 0.0))
    hw_flops = model_flops + extra * m * dp
    r.update({
        "t.compute": m * (compute_mb - recompute_t), "t.recompute": m * recompute_t,
        "t.tp_exposed": m * tp_exposed, "t.cp_exposed": m * cp_exposed, "t.ep": m * ep_comm,
        "t.pp": m * pp_comm, "t.zero3_exposed": m * z3_exposed, "t.bubble": bubble,
        "t.dp_exposed": dp_exposed, "t.optimizer": t_opt, "t.offload": t_offload,
        "t.tp_total": m * tp_comm, "t.dp_total": dp_comm, "t.cp_total": m * cp_comm,
        "t.zero3_total": m * z3_comm,
        "step_time": step, "tokens_per_step": np.full_like(tp, tokens_step),
        "tokens_per_s": tokens_step / step, "tokens_per_s_per_gpu": tokens_step / step / p.gpus,
        "model_flops": np.full_like(tp, model_flops), "hardware_flops": hw_flops,
        "mfu": model_flops / (step * p.gpus * peak_flops),
        "hfu": hw_flops / (step * p.gpus * peak_flops),
        "bubble_fraction": bubble / step,
        "collective_fraction": (m * (tp_exposed + cp_exposed + ep_comm + pp_comm + z3_exposed)
                                + dp_exposed) / step,
        "energy_j": step * p.gpus * hw.gpu.power_w,
        "peak_flops": np.full_like(tp, peak_flops),
    })
    valid = np.ones(len(c), dtype=bool)
    for name in RULE_NAMES:
        r[f"rule.{name}"] = np.asarray(rules[name], dtype=bool) & np.ones(len(c), dtype=bool)
        valid &= r[f"rule.{name}"]
    r["valid"] = valid
    return r


# ---------------------------------------------------------------------------------------------
# One layout: a pydantic Estimate with every item explained.


class StageMemory(BaseModel):
    """One stage's items at its peak and the three views (total_bytes = device total)."""

    name: str
    items: dict[str, float]
    total_bytes: float
    allocated_bytes: float = 0.0
    reserved_bytes: float = 0.0
    moment: str = ""


def peak_moment(stage: str, phase: int, in_flight: float, micro_batches: float) -> str:
    """"first stage, backward of micro-batch 1, 16 forwards in flight" for a printout."""
    from .engine.peak import PHASES
    what = {0: f"forward of micro-batch {in_flight:g}", 1: "loss and its gradient",
            2: "backward of micro-batch 1", 3: "backward of micro-batch 2 (gradients accumulated)",
            4: "optimizer step"}[phase]
    where = "the single stage" if stage == "single stage" else f"{stage} stage"
    plural = "" if in_flight == 1 else "s"
    held = f", {in_flight:g} forward{plural} in flight" if phase < 4 and micro_batches > 1 else ""
    return f"{where}, {what}{held} ({PHASES[phase]})"


class Estimate(BaseModel):
    """Everything dtplan knows about one layout. Bytes, seconds, FLOPs."""

    model: str
    model_inferred: bool
    hardware: str
    gpus: int
    layout: Layout
    seq_len: int
    global_batch: int
    accumulation: float
    tokens_per_step: float
    fits: bool
    capacity_bytes: float
    usable_memory_bytes: float
    peak_memory_bytes: float
    headroom_bytes: float
    peak_stage: str
    stages: list[StageMemory]
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    collective_fraction: float
    energy_per_step_j: float
    breakdown: dict[str, float]
    communication_s: dict[str, float]
    links: dict[str, str]
    rules: list[Rule]
    budget: MemoryBudget
    notes: list[str]


def _links(p: Problem, lay: Layout) -> dict[str, str]:
    from .layout import rank_groups
    groups, _ = rank_groups(lay, p.hardware.scale_up.gpus_per_domain)
    return {g.axis: g.link for g in groups}


RULE_TEXT = {
    "world-size": "DP × TP × PP × CP must equal the GPU count",
    "tp-in-nvlink-domain": "TP × CP must fit (and tile) one NVLink domain",
    "heads-divisible-by-tp": "attention heads must divide evenly across TP ranks",
    "kv-heads-compatible-with-tp": "KV heads must be a multiple or a divisor of TP",
    "layers-divisible-by-pp": "layers must divide across PP stages × chunks (first and last stage "
                              "may hold one layer fewer)",
    "interleaving-valid": "interleaving needs PP > 1, v ≥ 2 and micro-batches a multiple of PP",
    "batch-divisible": "global batch must be a multiple of micro-batch × DP",
    "sequence-divisible": "sequence must divide by 2·CP (and by TP under sequence parallel)",
    "experts-divisible-by-ep": "experts must divide by EP, and EP must divide DP × CP",
    "sharding-valid": "the ZeRO shard group must divide DP × CP (hybrid sharding needs ZeRO ≥ 1)",
    "offload-valid": "parameter offload needs ZeRO-3; optimizer offload needs ZeRO ≥ 1",
    "fits-in-memory": "per-GPU peak must fit in usable memory (capacity minus margin)",
}


def _measured(rule: str, p: Problem, lay: Layout, r: dict[str, float]) -> tuple[str, str]:
    mod = p.model
    g = p.hardware.scale_up.gpus_per_domain
    return {
        "world-size": (f"{lay.dp}×{lay.tp}×{lay.pp}×{lay.cp} = {lay.world}", f"= {p.gpus}"),
        "tp-in-nvlink-domain": (f"TP×CP = {lay.tp * lay.cp}", f"divides {g}"),
        "heads-divisible-by-tp": (f"{mod.heads} heads / TP {lay.tp}", "whole number"),
        "kv-heads-compatible-with-tp": (f"{mod.kv_heads} KV heads, TP {lay.tp}", "multiple or divisor"),
        "layers-divisible-by-pp": (f"{mod.layers} layers / (PP {lay.pp} × v {lay.chunks})", "whole number"),
        "interleaving-valid": (f"{lay.schedule}, v = {lay.chunks}, m = {r['micro_batches']:g}",
                               "PP > 1, v ≥ 2, m % PP = 0" if lay.schedule == "interleaved" else "v = 1"),
        "batch-divisible": (f"{p.global_batch} / ({lay.micro_batch} × {lay.dp})", "whole number ≥ 1"),
        "sequence-divisible": (f"seq {p.seq_len}, CP {lay.cp}, TP {lay.tp}", "divisible"),
        "experts-divisible-by-ep": (f"{mod.experts} experts, EP {lay.ep}", "divisible"),
        "sharding-valid": (f"shard group {lay.shard_degree if lay.shard_group else lay.dp * lay.cp}",
                           f"divides {lay.dp * lay.cp}"),
        "offload-valid": (f"ZeRO {lay.zero}, offload opt={lay.offload_optimizer} "
                          f"params={lay.offload_params}", "see rule"),
        "fits-in-memory": (f"{r['peak_memory'] / 1e9:.2f} GB", f"≤ {r['usable_memory'] / 1e9:.2f} GB"),
    }[rule]


def rules_for(p: Problem, lay: Layout, r: dict[str, Any]) -> list[Rule]:
    out_ = []
    for name in RULE_NAMES:
        ok = bool(r[f"rule.{name}"])
        status = "pass" if ok else "fail"
        measured, limit = _measured(name, p, lay, r)
        if name == "kv-heads-compatible-with-tp" and ok and lay.tp > p.model.kv_heads:
            status = "warn"  # allowed by recent Megatron, but KV heads are replicated
            measured += " (KV heads replicated)"
        out_.append(Rule(name=name, status=status, measured=measured, limit=limit,
                         message=RULE_TEXT[name]))
    return out_


def estimate_problem(p: Problem, lay: Layout) -> Estimate:
    """Evaluate one layout through the same vectorised path the search uses."""
    if lay.precision != p.precision or lay.optimizer != p.optimizer:
        p = Problem(**{**p.__dict__, "precision": lay.precision, "optimizer": lay.optimizer})
    r_arr = evaluate(p, Candidates.from_layouts([lay]))
    r = {k: (v[0].item() if isinstance(v, np.ndarray) else v) for k, v in r_arr.items()}
    stage_names = ["first"] + (["middle"] if r["has_middle"] else []) + (["last"] if lay.pp > 1 else [])
    from .memory_model import ITEMS
    item_keys = list(ITEMS) + ["fragmentation", "cuda_context", "comm_buffers"]
    stages = [StageMemory(name=n if lay.pp > 1 else "single stage",
                          items={k: r[f"mem.{n}.{k}"] for k in item_keys},
                          total_bytes=r[f"mem.{n}.total"],
                          allocated_bytes=r[f"mem.{n}.allocated"],
                          reserved_bytes=r[f"mem.{n}.reserved"],
                          moment=peak_moment(n if lay.pp > 1 else "single stage",
                                             int(r[f"mem.{n}.moment"]), r[f"mem.{n}.in_flight"],
                                             r["micro_batches"]))
              for n in stage_names]
    breakdown = {k[2:]: r[k] for k in ("t.compute", "t.recompute", "t.tp_exposed", "t.cp_exposed",
                                       "t.ep", "t.pp", "t.zero3_exposed", "t.bubble",
                                       "t.dp_exposed", "t.optimizer", "t.offload")}
    comm = {"tp": r["t.tp_total"], "cp": r["t.cp_total"], "ep": r["t.ep"], "pp": r["t.pp"],
            "dp": r["t.dp_total"], "zero3": r["t.zero3_total"]}
    notes = [p.model.describe(),
             f"Precision {p.precision}, optimizer {p.optimizer}; "
             f"{'flash (causal) attention' if p.flash else 'full s×s attention scores stored'}",
             f"Budget: CUDA/NCCL context {p.budget.context_bytes / 1e9:g} GB, comm buffers "
             f"{p.budget.comm_buffer_bytes / 1e9:g} GB, fragmentation "
             f"{p.budget.fragmentation_fraction:.0%} of tensors, margin {p.budget.margin_fraction:.0%}"
             " of capacity. An estimate, not a promise: measure the first steps."]
    tflops = 1e12 * p.gpus * r["step_time"]
    return Estimate(
        model=p.model.name or "model", model_inferred=p.model.inferred, hardware=p.hardware.name,
        gpus=p.gpus, layout=lay, seq_len=p.seq_len, global_batch=p.global_batch,
        accumulation=r["micro_batches"], tokens_per_step=r["tokens_per_step"],
        fits=bool(r["rule.fits-in-memory"]), capacity_bytes=r["capacity"],
        usable_memory_bytes=r["usable_memory"], peak_memory_bytes=r["peak_memory"],
        headroom_bytes=r["headroom"],
        peak_stage=("first", "middle", "last")[int(r["peak_stage"])] if lay.pp > 1 else "single stage",
        stages=stages, step_time_s=r["step_time"], tokens_per_s=r["tokens_per_s"],
        tokens_per_s_per_gpu=r["tokens_per_s_per_gpu"], model_flops_per_step=r["model_flops"],
        hardware_flops_per_step=r["hardware_flops"],
        model_tflops_per_gpu=r["model_flops"] / tflops,
        hardware_tflops_per_gpu=r["hardware_flops"] / tflops, mfu=r["mfu"], hfu=r["hfu"],
        bubble_fraction=r["bubble_fraction"], collective_fraction=r["collective_fraction"],
        energy_per_step_j=r["energy_j"], breakdown=breakdown, communication_s=comm,
        links=_links(p, lay), rules=rules_for(p, lay, r), budget=p.budget, notes=notes)


def estimate(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
             seq_len: int, global_batch: int, budget: MemoryBudget | None = None,
             flash_attention: bool | None = None, framework: Any = None) -> Estimate:
    """Memory per stage, step time and rules for one layout (framework: a FrameworkProfile)."""
    validate.recipe(layout.precision, layout.optimizer)
    p = Problem(model=model, hardware=hardware, gpus=gpus, seq_len=seq_len,
                global_batch=global_batch, precision=layout.precision, optimizer=layout.optimizer,
                budget=budget or MemoryBudget(), flash_attention=flash_attention,
                framework=framework)
    return estimate_problem(p, layout)


def layout_rules(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
                 seq_len: int, global_batch: int, budget: MemoryBudget | None = None) -> list[Rule]:
    """Every rule with its status, measured value and limit (the gate's and the search's rules)."""
    return estimate(model, hardware, gpus, layout, seq_len=seq_len, global_batch=global_batch,
                    budget=budget).rules

