"""One layout: an Estimate (a record) with every item explained, through the
same vectorised `evaluate` the search runs on every candidate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from planner.engine.fp8 import recipe_peak
from planner.evaluation import tuning as tun
from planner.evaluation import host
from planner.evaluation.memory import fp8_copies, has_fp8_params
from planner.io import validate
from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.error_band import band_for, shown_band
from planner.evaluation.evaluate import STAGES, Evaluation, evaluate
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.specs.layout import Rule
from planner.specs.model import ModelSpec
from planner.evaluation.rules import Figures, rules_for
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import Tuning


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """One stage's items at its peak and the three views (total_bytes = device total)."""

    name: str
    items: dict[str, float]
    total_bytes: float
    allocated_bytes: float = 0.0
    reserved_bytes: float = 0.0
    moment: str = ""


def peak_moment(stage: str, phase: int, in_flight: float, micro_batches: float) -> str:
    """"first stage, backward of micro-batch 1, 16 forwards in flight" for a printout."""
    from planner.engine.peak import PHASES
    what = {0: f"forward of micro-batch {in_flight:g}", 1: "loss and its gradient",
            2: "backward of micro-batch 1", 3: "backward of micro-batch 2 (gradients accumulated)",
            4: "optimizer step"}[phase]
    where = "the single stage" if stage == "single stage" else f"{stage} stage"
    plural = "" if in_flight == 1 else "s"
    held = f", {in_flight:g} forward{plural} in flight" if phase < 4 and micro_batches > 1 else ""
    return f"{where}, {what}{held} ({PHASES[phase]})"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Everything dtplan knows about one layout. Bytes, seconds, FLOPs."""

    model: str
    model_inferred: bool
    hardware: str
    params: int          # the language model's exact parameter count (transformers' count)
    active_params: int   # parameters one token passes through (top-k experts of each MoE layer)
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
    framework: str = "megatron"
    # ± per cent on step time, tokens/s and MFU: the regime's calibrated band, else the
    # profile's wide band for regimes without runs (error_band.shown_band); never absent
    error_band_pct: Optional[float] = None
    # whether error_band_pct comes from calibration runs of this regime
    error_band_calibrated: bool = False

    def share_of_step(self, seconds: float) -> float:
        """A part of the step as a fraction of the whole step time."""
        return seconds / self.step_time_s

    def past_device_bytes(self) -> float:
        """How far the device total passes the GPU's capacity itself (0 when within it): the
        allocator's demand is not capped, so past the device it would run out of memory."""
        return max(0.0, self.peak_memory_bytes - self.capacity_bytes)


def _links(p: Problem, lay: Layout) -> dict[str, str]:
    """The link each axis's traffic crosses: TP/CP/DP/PP from the rank grid; the ZeRO shard
    group (DP × CP, or the hybrid shard group) and EP (inside DP × CP) from how many of their
    members share an NVLink domain."""
    from planner.engine.topology import LINK_NAMES, link_kind, members_per_domain
    from planner.specs.layout import rank_groups
    g = p.hardware.scale_up.gpus_per_domain
    groups, _ = rank_groups(lay, g)
    out: dict[str, str] = {x.axis: x.link for x in groups}
    for axis, n, on in (("zero3", lay.shard_group or lay.dp * lay.cp, lay.zero >= 1),
                        ("ep", lay.ep, lay.ep > 1)):
        k = members_per_domain(n, lay.tp, g)
        out[axis] = LINK_NAMES[int(link_kind(n, k))] if on and n > 1 else "none"
    return out


def _notes(p: Problem, lay: Layout) -> list[str]:
    from planner.evaluation.error_band import band_note
    from planner.specs.constants import constants_note
    from planner.specs.framework_text import capabilities, describe
    return [p.model.describe(), describe(p.fw), capabilities(p.fw),
            band_note(p.hardware, p.fw.name, lay, p.model.is_moe),
            constants_note(p.hardware, p.fw),
            f"Precision {p.precision}, optimizer {p.optimizer}; "
            f"{'flash (causal) attention' if p.flash else 'full s×s attention scores stored'}",
            _framework_memory_note(p), budget_note(p.budget)] + [
                n for n in [tun.note(p), recipe_note(p), offload_note(p, lay), ep_note(p, lay),
                            packing_note(p)]
                if n]


def ep_note(p: Problem, lay: Layout) -> str:
    """How the EP all-to-all is priced (engine.step_time.ep_time_per_layer): the dispatcher,
    the copies of a token that cross the NIC, the routing limit, the bytes and the count."""
    from planner.engine import step_time as st
    from planner.engine.topology import members_per_domain
    m, r = p.model, p.ep_route
    if not m.is_moe or lay.ep <= 1:
        return ""
    k = float(members_per_domain(lay.ep, lay.etp or 1, p.hardware.scale_up.gpus_per_domain))
    n_dom, top = -(-lay.ep // int(k)), m.experts_per_token
    per_expert = top * (lay.ep - k) / lay.ep   # nccl.all_to_all_time's off-domain share
    nic = (float(st.ep_reach(top, r, lay.ep, k)[0]) * (n_dom - 1) / n_dom if r.dedup
           else lay.ep - k if r.gather else per_expert)   # gather: to every off-domain rank
    how = ("DeepEP-style, once per rank and per remote domain" if r.dedup
           else "all-gather of every rank's tokens, reduce-scatter back" if r.gather
           else "NCCL all-to-all, once per routed expert")
    limit = (f", routing limited to {m.route_group_topk} of {m.route_groups} expert groups"
             if m.route_groups else "")
    again = " (+2 per layer full recompute re-runs)" if lay.recompute == "full" else ""
    dtype = "fp8 + 1/128 scales" if r.dispatch_bytes else (
        "fp32" if p.precision == "fp32" else "16-bit")
    load = float(p.moe_load(lay.ep))
    busiest = "" if load == 1.0 else (
        f"; the busiest rank takes {load:g}x the mean routed tokens, in its all-to-alls, expert "
        "GEMMs, permutation and permuted activations (the framework profile's " + (
            "moe_capacity_factor)" if p.fw.time.moe_capacity_factor else "ep_load_imbalance)"))
    return (f"EP {lay.ep} over {n_dom} NVLink domain(s): {how}{limit}; {nic:.2f} NIC copies of "
            f"a token per all-to-all (per-expert sending: {per_expert:.2f}); dispatch in "
            f"{dtype}, 4 {'collectives' if r.gather else 'all-to-alls'} per MoE layer"
            f"{again}{busiest}.")


def packing_note(p: Problem) -> str:
    """How packed documents are priced ("" for one document a sequence)."""
    d = p.attention_span
    if d == p.seq_len:
        return ""
    if not p.flash:
        return (f"Packed documents of {d:,} tokens: unfused attention computes each sequence's "
                "whole s×s scores before the mask, so the documents save no attention time "
                "(MFU counts the attention they need).")
    return (f"Packed documents of {d:,} tokens in each {p.seq_len:,}-token sequence: attention "
            "stays within each (variable-length flash attention), so its FLOPs and its kernel's "
            f"length are a document's ({d / p.seq_len:.0%} of a sequence's keys); MFU counts the "
            "attention the documents need (Megatron's and torchtitan's logged FLOPs count the "
            "whole sequence's, higher).")


def offload_note(p: Problem, lay: Layout) -> str:
    """The host memory CPU activation offload takes ("" without it): the busiest GPU's and a
    node's (host.parts_per_node), which the fits-in-host-memory rule counts."""
    if not p.tuning.activation_offload:
        return ""
    c = Candidates.from_layouts([lay])
    gpu = float(host.activation_bytes_per_gpu(p, c)[0])
    node = float(host.parts_per_node(p, c)["offloaded activations"][0])
    return (f"Activation offload: {gpu / 1e9:,.1f} GB of pinned host memory per GPU "
            f"({node / 1e9:,.1f} GB a node of {p.hardware.host.host_memory_bytes / 1e9:,.0f} GB), "
            "counted by the fits-in-host-memory rule beside any offloaded optimizer states.")


def recipe_note(p: Problem) -> str:
    """The low-precision recipe as the model prices it, in one line ("" for bf16 GEMMs)."""
    r = p.recipe
    if r is None:
        return ""
    hw, eff, m = p.hardware, p.hardware.efficiency, p.fw.memory
    ceil = eff.recipe_ceiling_fractions.get(r.name, eff.fp8_matmul_ceiling_fraction
                                            or hw.gpu.matmul_ceiling_fraction)
    gemms = "fprop, dgrad and wgrad" if r.wgrad_low else "fprop and dgrad (wgrad in bf16)"
    return (f"Low precision {r.name}: the blocks' linear {gemms} at "
            f"{(recipe_peak(hw.gpu.peak_flops, r) or 0) / 1e12:,.0f} TFLOP/s peak × {ceil:.3g} "
            f"ceiling; {r.element_bytes:.4g} B per stored element (scales included); casts "
            f"{r.cast_fwd_act:.3g} / {r.cast_fwd_weight:.3g} B per activation / weight element "
            f"forward, {r.cast_bwd_act:.3g} / {r.cast_bwd_weight:.3g} backward; "
            f"{fp8_copies(p, p.fw):g} cached weight copies"
            + (" (the weights are fp8 parameters)" if has_fp8_params(p, p.fw) or tun.fp8_base(p)
               else "")
            + "; saved GEMM inputs " + ("quantised" if m.fp8_saved_activations else "kept in bf16")
            + ("; the MLP activation's input saved in fp8" if m.fp8_activation_input else "")
            + ("; attention in fp8, its q, k, v saved in fp8" if m.fp8_attention_saved else "")
            + ("; sharded DP all-gathers the weights in fp8"
               if p.gather_bytes < p.fw.time.gather_bytes else "") + ".")


def budget_note(b: MemoryBudget, gib: bool = False) -> str:
    """The memory budget's reserves as one note (in GiB with ``gib``, as `--gib` prints)."""
    unit, scale, fmt = ("GiB", 2**30, ".3g") if gib else ("GB", 1e9, "g")
    return (f"Budget: CUDA context {b.context_bytes / scale:{fmt}} {unit} and NCCL buffers "
            f"{b.comm_buffer_bytes / scale:{fmt}} {unit} outside the allocator, fragmentation "
            f"{b.fragmentation_fraction:.0%} of the bytes freed within a step (caching "
            f"allocator, fitted), margin {b.margin_fraction:.0%} of capacity; the verdict "
            "compares device total. An estimate, not a promise: measure the first steps.")


def _framework_memory_note(p: Problem) -> str:
    """The framework profile's memory behaviour, as the memory model uses it."""
    fw, m = p.fw, p.fw.memory
    under_pp = ("stage kept gathered, gradients accumulated unsharded in the reduce dtype"
                if m.accumulate_unsharded_grads_under_pp else "as without PP")
    return (f"Framework {fw.name} memory: {m.state_layout} states, gradients "
            f"{m.grad_bytes:g} B/param under 16-bit mixed precision, loss "
            f"{m.loss_backward_bytes:g} B per logit"
            + (" (fused linear cross-entropy: never whole)" if m.loss_fused_linear else
               f" in {m.loss_chunks} chunks ({m.loss_whole_bytes:g} B kept whole)"
               if m.loss_chunks > 1 else "")
            + (f" ({m.loss_backward_bytes_tp:g} with the vocabulary over TP)"
               if m.loss_backward_bytes_tp is not None else "")
            + f", sharded DP under PP: {under_pp}; fp8 weight copies {m.fp8_weight_copies:g}; "
            f"caching allocator: 512 B blocks, 2 / 20 MiB segments, expandable segments "
            f"{'on' if m.expandable_segments else 'off'}.")


def _one(detail: np.ndarray | None) -> float:
    """The one layout's value of a stage's detail field (evaluate computes them for an
    estimate; they are None only where the search asked for no detail)."""
    if detail is None:
        raise ValueError("stage memory evaluated without its detail")
    return float(detail[0])


def _fragmentation_note(p: Problem, ev: Evaluation) -> list[str]:
    """When the tensors fit and only the allocator's fragmentation term tips the verdict, say
    which assumption rejects the layout and by how much."""
    mem = ev.memory
    sm = mem.stage(STAGES[int(mem.peak_stage[0])])
    outside = p.budget.context_bytes + p.budget.comm_buffer_bytes
    tensors = _one(sm.allocated) + outside
    usable, total = float(mem.usable[0]), float(mem.peak[0])
    if total <= usable or tensors > usable:
        return []
    return [f"Rejected by the allocator's fragmentation alone: max allocated + context + NCCL = "
            f"{tensors / 1e9:.2f} GB fits in {usable / 1e9:.2f} GB; fragmentation "
            f"({_one(sm.fragmentation) / 1e9:.2f} GB, {p.budget.fragmentation_fraction:.0%} "
            f"of the bytes freed within a step) puts it {(total - usable) / 1e9:.2f} GB over. "
            "Expandable segments (a framework profile's expandable_segments = true) or "
            "--fragmentation 0 would admit it."]


def _stages(ev: Evaluation, lay: Layout) -> list[StageMemory]:
    mem = ev.memory
    names = ["first"] + (["middle"] if bool(mem.has_middle[0]) else []) \
        + (["last"] if lay.pp > 1 else [])
    out = []
    for n in names:
        sm = mem.stage(n)
        name = n if lay.pp > 1 else "single stage"
        out.append(StageMemory(name=name, items={k: float(v[0]) for k, v in sm.items().items()},
                               total_bytes=float(sm.total[0]),
                               allocated_bytes=_one(sm.allocated),
                               reserved_bytes=float(sm.reserved[0]),
                               moment=peak_moment(name, int(_one(sm.moment)), _one(sm.in_flight),
                                                  float(ev.micro_batches[0]))))
    return out


def estimate_problem(p: Problem, lay: Layout) -> Estimate:
    """Evaluate one layout through the same vectorised path the search uses."""
    p = p.resolved()
    if lay.precision != p.precision or lay.optimizer != p.optimizer:
        p = replace(p, precision=lay.precision, optimizer=lay.optimizer)
    if Tuning.of(lay) != p.tuning:  # the layout states what trains, as it states the precision
        p = replace(p, tuning=Tuning.of(lay))
    ev = evaluate(p, Candidates.from_layouts([lay]))
    mem, t, thr = ev.memory, ev.time, ev.throughput
    one = lambda a: float(a[0])  # noqa: E731
    tflops = 1e12 * p.gpus * one(t.step)
    figures = Figures(micro_batches=one(ev.micro_batches), peak_memory=one(mem.peak),
                      usable_memory=one(mem.usable))
    return Estimate(
        model=p.model.name or "model", model_inferred=p.model.inferred,
        params=p.model.param_count(), active_params=p.model.active_param_count(), hardware=p.hardware.name,
        gpus=p.gpus, layout=lay, seq_len=p.seq_len, global_batch=p.global_batch,
        accumulation=one(ev.micro_batches), tokens_per_step=one(thr.tokens_per_step),
        fits=bool(ev.rules.passes["fits-in-memory"][0]), capacity_bytes=one(mem.capacity),
        usable_memory_bytes=one(mem.usable), peak_memory_bytes=one(mem.peak),
        headroom_bytes=one(mem.headroom),
        peak_stage=STAGES[int(mem.peak_stage[0])] if lay.pp > 1 else "single stage",
        stages=_stages(ev, lay), step_time_s=one(t.step), tokens_per_s=one(thr.tokens_per_s),
        tokens_per_s_per_gpu=one(thr.tokens_per_s_per_gpu),
        model_flops_per_step=one(thr.model_flops), hardware_flops_per_step=one(thr.hardware_flops),
        model_tflops_per_gpu=one(thr.model_flops) / tflops,
        hardware_tflops_per_gpu=one(thr.hardware_flops) / tflops, mfu=one(thr.mfu),
        hfu=one(thr.hfu), bubble_fraction=one(thr.bubble_fraction),
        collective_fraction=one(thr.collective_fraction), energy_per_step_j=one(thr.energy_j),
        breakdown={k: float(v[0]) for k, v in t.breakdown().items()},
        communication_s={k: float(v[0]) for k, v in t.communication().items()},
        links=_links(p, lay),
        rules=rules_for(p, lay, {k: bool(v[0]) for k, v in ev.rules.passes.items()}, figures),
        budget=p.budget, notes=_notes(p, lay) + _fragmentation_note(p, ev), framework=p.fw.name,
        error_band_pct=shown_band(p.hardware, p.fw.name, lay, p.model.is_moe),
        error_band_calibrated=band_for(p.hardware, p.fw.name, lay, p.model.is_moe) is not None)


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
