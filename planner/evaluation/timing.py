"""Step time as a visible list of per-axis terms, and the throughput that follows.

Per micro-batch on the slowest stage (the one with the most layers): compute, then each
parallel axis's communication left exposed (TP, CP, EP, PP, ZeRO-3 layer by layer); the
pipeline runs m of them plus (p−1)/v idle slots; once per step the exposed gradient reduction
(bucketed, in the framework's reduce dtype), the optimizer and any offload traffic
(engine.step_time.compose_step): the list is in _step. Each axis's formula is one function of
engine/step_time.py (its inputs gathered under the framework profile in timing_terms.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.evaluation.candidates import ACTIVATION_COLUMNS, Candidates, Problem, Shape, full_recomputed, shape
from planner.evaluation.distinct import distinct_rows, on_distinct
from planner.engine import activations as act
from planner.engine import compute as cmp
from planner.engine import schedules as sched
from planner.engine import step_time as st
from planner.engine.arrays import array
from planner.evaluation import timing_terms as terms
from planner.evaluation.stage_balance import pace
from planner.evaluation import tuning as tun
from planner.evaluation.host import paged_host_bytes
from planner.engine.memory import PAGED_STATES
from planner.evaluation.candidates import SCHEDULE_CODES

# Host-side optimizer update speed with an offloaded optimizer, bytes touched per second (a CPU
# Adam step streaming the fp32 states). An assumption, neither measured nor fitted here.
HOST_UPDATE_BYTES_PER_S = 50e9

# step_floor's relative margin: a bound's slack for float rounding, not a modelling constant.
STEP_FLOOR_MARGIN = 1e-12

ASSUMPTIONS: tuple[tuple[str, float, str], ...] = (
    ("eager_memory_factor", terms.KERNEL_MEMORY_FACTOR["eager"], "elementwise HBM traffic of "
     "eager PyTorch relative to fused / compiled kernels (fitted, timing_terms.py)"),
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
    ep: np.ndarray                 # EP all-to-all, exposed (less what paired chunks hide)
    pp: np.ndarray                 # PP sends, exposed
    zero3_exposed: np.ndarray
    bubble: np.ndarray
    dp_exposed: np.ndarray
    optimizer: np.ndarray
    offload: np.ndarray
    tp_total: np.ndarray
    cp_total: np.ndarray
    dp_total: np.ndarray
    zero3_total: np.ndarray
    ep_total: np.ndarray
    pp_total: np.ndarray
    step: np.ndarray

    BREAKDOWN = ("compute", "recompute", "tp_exposed", "cp_exposed", "ep", "pp", "zero3_exposed",
                 "bubble", "dp_exposed", "optimizer", "offload")

    def breakdown(self) -> dict[str, np.ndarray]:
        """The terms that sum to the step, by name."""
        return {k: getattr(self, k) for k in self.BREAKDOWN}

    def communication(self) -> dict[str, np.ndarray]:
        """Each axis's communication per step before overlap."""
        return {"tp": self.tp_total, "cp": self.cp_total, "ep": self.ep_total, "pp": self.pp_total,
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


def _optimizer(p: Problem, c: Candidates, x: Shape, mem: terms.MemoryStages
               ) -> tuple[np.ndarray, np.ndarray]:
    """(optimizer step, offload traffic) per step (engine.step_time.optimizer_time and
    offload_time): the first stage's local states, or the framework's host time per step where
    that is longer (engine.step_time.optimizer_phase_time); an offloaded optimizer's traffic
    over the fuller stage's parameters."""
    local_state = mem.first.weights + mem.first.gradients + mem.first.optimizer
    t_opt = array(st.optimizer_time(local_state, p.hardware.gpu.hbm_bytes_per_s))
    if p.optimizer == "muon":  # Newton–Schulz on the fullest stage's matrices, split over TP·DP
        t_opt = t_opt + x.layers[1] * tun.muon_flops_per_layer(p) / (x.tp * x.dp * x.cp) \
            / (p.hardware.gpu.peak_flops["bf16"] * p.hardware.gpu.matmul_ceiling_fraction)
    t_opt = array(st.optimizer_phase_time(t_opt, p.fw.time.step_host_s))
    if p.optimizer in PAGED_STATES:  # paged to the host: the moments cross PCIe twice a step
        return t_opt, array(st.paged_optimizer_time(paged_host_bytes(p, c),
                                                    p.hardware.host.pcie_bytes_per_s))
    # under a frozen base only the adapters' states and gradients are offloaded: the fuller
    # stage's parameters × the model's trained share
    trained = tun.trained_param_count(p) / p.model.param_count()
    t_offload = np.where(c.offload_opt > 0, st.offload_time(
        np.maximum(mem.first.params, mem.last.params) * trained, x.shard, x.state_bytes,
        p.hardware.host.pcie_bytes_per_s, HOST_UPDATE_BYTES_PER_S), 0.0)
    return t_opt, t_offload


def compute_terms(p: Problem, c: Candidates, x: Shape, a: dict[int, np.ndarray],
                  groups: "terms.Groups") -> "terms.Compute":
    """timing_terms.compute of every row, once per ACTIVATION_COLUMNS tuple (all it reads, with
    EP in a MoE model: the experts' GEMM shape and load) where the caller knows the rows' tuples
    (`groups.act`)."""
    if groups.act is None:
        n_layers = x.layers[1]
        return terms.compute(p, c, x, a, n_layers, full_recomputed(c, n_layers))

    def part(u: Candidates, idx: np.ndarray) -> "terms.Compute":
        xu = shape(p, u)
        return terms.compute(p, u, xu, {m: v.take(idx) for m, v in a.items()}, xu.layers[1],
                             full_recomputed(u, xu.layers[1]))
    if not p.model.is_moe:
        return on_distinct(c, ACTIVATION_COLUMNS, part, rows=True, groups=groups.act)
    found = distinct_rows([groups.act[0], c.ep]) if len(c) else None
    by_ep = None if found is None else (found[1], len(found[0]))
    return on_distinct(c, ACTIVATION_COLUMNS + ("ep",), part, rows=True, groups=by_ep)


def _paced(x: Shape, comp: "terms.Compute", cm: "terms.Comm", floor: bool = False,
           mirrored: np.ndarray | None = None) -> tuple["terms.Compute", "terms.Comm"]:
    """comp and cm on the stage that paces the pipeline (stage_balance.pace): the per-micro-batch
    terms that grow with the stage's layers scaled, the edge added to the compute, PP's sends as
    they are.
    `floor`: paced on the compute and the TP, CP and EP terms alone (step_floor). The
    `heaviest` compute of any stage is what ZB-H1's bubble is priced on, the same in the floor
    and the step whatever paces them. `mirrored`: DualPipe's rows (stage_balance.pace)."""
    scale, edge = pace(x, comp.embed, comp.head,
                       [comp.per_micro_batch, cm.tp_exposed, cm.cp_exposed, cm.ep_exposed]
                       + ([] if floor else [cm.zero3_exposed]), mirrored)
    c_scale, c_edge = pace(x, comp.embed, comp.head, [comp.per_micro_batch], mirrored)
    comp = replace(comp, per_micro_batch=comp.per_micro_batch * scale + edge,
                   recompute=comp.recompute * scale, offload=comp.offload * scale,
                   heaviest=comp.per_micro_batch * c_scale + c_edge)
    return comp, replace(cm, **{k: getattr(cm, k) * scale for k in (
        "tp", "tp_exposed", "cp", "cp_exposed", "ep", "ep_exposed", "zero3", "zero3_exposed")})


def _step(p: Problem, c: Candidates, x: Shape, mem: terms.MemoryStages, a: dict[int, np.ndarray],
          groups: "terms.Groups" = terms.Groups(), comp: "terms.Compute | None" = None
          ) -> tuple[terms.Compute, terms.Comm, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(compute, communication, optimizer, offload, step, bubble): the step composed from its
    terms; the pipeline is paced by its fullest stage (ceil(L/(p·v))·v layers). `comp`: the
    rows' compute_terms where the caller has them."""
    n_layers = x.layers[1]
    comp = compute_terms(p, c, x, a, groups) if comp is None else comp
    comp, cm = _paced(x, comp, terms.communication(p, c, x, mem, comp, n_layers, groups),
                      mirrored=c.schedule == SCHEDULE_CODES["dualpipe"])
    t_opt, t_offload = _optimizer(p, c, x, mem)
    per_micro_batch = [comp.per_micro_batch,  # GEMMs, attention, memory-bound work, recompute
                       cm.tp_exposed,         # TP all-reduces (SP: gather + reduce-scatter)
                       cm.cp_exposed,         # CP's K/V ring, less what attention hides
                       cm.ep_exposed,         # EP all-to-alls, less what paired chunks hide
                       cm.pp_exposed,         # PP sends across the stage boundaries, likewise
                       cm.zero3_exposed]      # ZeRO-3 gathers and reduce-scatters, exposed
    per_step = [cm.dp_exposed,                # DP gradient reduction, exposed
                t_opt,                        # optimizer step
                t_offload]                    # offloaded optimizer's PCIe and host update
    step, bubble = _compose(c, x, comp, per_micro_batch, per_step)  # m of them + the bubble
    return comp, cm, t_opt, t_offload, step, bubble


def _compose(c: Candidates, x: Shape, comp: "terms.Compute", per_micro_batch: list,
             per_step: list) -> tuple[np.ndarray, np.ndarray]:
    """(step, bubble) from the per-micro-batch and per-step terms (engine.step_time.
    compose_step; ZB-H1, DualPipe and DualPipeV rows' bubble from the compute of the stage
    with the most)."""
    split = {name: c.schedule == SCHEDULE_CODES[name] for name in sched.SPLIT_BACKWARD}
    step, bubble = st.compose_step(per_micro_batch, x.micro_batches, x.pp, x.v, per_step,
                                   split, comp.per_micro_batch if comp.heaviest is None
                                   else comp.heaviest)
    return array(step), array(bubble)


def step_floor(p: Problem, c: Candidates, x: Shape, a: dict[int, np.ndarray],
               groups: "terms.Groups" = terms.Groups(), axes: bool = True,
               comp: "terms.Compute | None" = None) -> np.ndarray:
    """A lower bound on step_seconds that needs no memory, on layouts that pass the structural
    rules: the step composed (_compose) from the compute and the TP, CP, EP and PP terms only
    (the compute alone without `axes`: looser, and cheaper where the rows share no tuples),
    leaving out ZeRO-3's exposed traffic, the exposed DP reduction, the optimizer and offload
    (each ≥ 0 where every stage holds layers, and the step is non-decreasing in every term),
    times (1 − STEP_FLOOR_MARGIN) for ZB-H1's step − bubble, whose rounding differs from the
    exact step's by a few units in the last place. `comp`: the rows' compute_terms where the
    caller has them."""
    n_layers = x.layers[1]
    comp = compute_terms(p, c, x, a, groups) if comp is None else comp
    zero = np.zeros_like(x.tp)
    ax = terms.axis_terms(p, c, x, comp, n_layers, groups) if axes else \
        dict(tp=zero, tp_exposed=zero, cp=zero, cp_exposed=zero, ep=zero, ep_exposed=zero,
             pp=zero, pp_exposed=zero)
    comp, cm = _paced(x, comp, terms.Comm(**ax, zero3=zero, zero3_exposed=zero, dp=zero,
                                          dp_exposed=zero), floor=True,
                      mirrored=c.schedule == SCHEDULE_CODES["dualpipe"])
    per_mb = [comp.per_micro_batch]
    if axes:
        per_mb += [cm.tp_exposed, cm.cp_exposed, cm.ep_exposed, cm.pp_exposed]
    return _compose(c, x, comp, per_mb, [])[0] * (1.0 - STEP_FLOOR_MARGIN)


def step_seconds(p: Problem, c: Candidates, x: Shape, mem: terms.MemoryStages,
                 a: dict[int, np.ndarray],
                 groups: "terms.Groups" = terms.Groups(),
                 comp: "terms.Compute | None" = None) -> np.ndarray:
    """step_time's step alone (what the search's fronts compare), bit for bit; `groups` the
    rows' tuples where the caller knows them (timing_terms.Groups), `comp` their
    compute_terms where the caller has them."""
    return _step(p, c, x, mem, a, groups, comp)[4]


def step_time(p: Problem, c: Candidates, x: Shape, mem: terms.MemoryStages,
              a: dict[int, np.ndarray]) -> tuple[StepTime, Throughput]:
    """The step, composed as a list of per-axis terms (_step), and its throughput."""
    comp, cm, t_opt, t_offload, step, bubble = _step(p, c, x, mem, a)
    m, n_layers = x.micro_batches, x.layers[1]
    t = StepTime(compute=m * (comp.per_micro_batch - comp.recompute - comp.offload),
                 recompute=m * comp.recompute,
                 tp_exposed=m * cm.tp_exposed, cp_exposed=m * cm.cp_exposed,
                 ep=m * cm.ep_exposed, pp=m * cm.pp_exposed, zero3_exposed=m * cm.zero3_exposed, bubble=bubble,
                 dp_exposed=cm.dp_exposed, optimizer=t_opt, offload=t_offload + m * comp.offload,
                 tp_total=m * cm.tp, cp_total=m * cm.cp, dp_total=cm.dp, zero3_total=m * cm.zero3,
                 ep_total=m * cm.ep, pp_total=m * cm.pp,
                 step=step)
    return t, _throughput(p, c, x, comp, cm, t, n_layers, full_recomputed(c, n_layers))


def _throughput(p: Problem, c: Candidates, x: Shape, comp: "terms.Compute", cm: "terms.Comm",
                t: StepTime,
                n_layers: np.ndarray, k_full: np.ndarray) -> Throughput:
    """Tokens/s, model FLOPs (6N + attention, the paper's count over each packed document) vs
    hardware FLOPs (+ what recomputation redoes), MFU and HFU against peak, bubble and
    collective shares, energy."""
    mod, m, step, peak = p.model, x.micro_batches, t.step, comp.peak_flops
    tokens_step = p.global_batch * p.seq_len
    model_flops = (mod.training_flops_per_token(p.attention_span)
                   + tun.frozen_flops_per_token_delta(p)) * tokens_step
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
        collective_fraction=(m * (cm.tp_exposed + cm.cp_exposed + cm.ep_exposed + cm.pp_exposed
                                  + cm.zero3_exposed) + cm.dp_exposed) / step,
        energy_j=step * p.gpus * p.hardware.gpu.power_w, peak_flops=np.full_like(x.tp, peak))
