"""One layout: a pydantic Estimate with every item explained, through the same vectorised
`evaluate` the search runs on every candidate."""

from __future__ import annotations

from pydantic import BaseModel

from . import validate
from .candidates import Candidates, Problem
from .evaluate import STAGES, Evaluation, evaluate
from .specs.hardware import HardwareProfile
from .specs.layout import Layout, Rule
from .specs.model import ModelSpec
from .rules import Figures, rules_for
from .specs.budget import MemoryBudget


class StageMemory(BaseModel):
    name: str
    items: dict[str, float]
    total_bytes: float


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
    from .specs.layout import rank_groups
    groups, _ = rank_groups(lay, p.hardware.scale_up.gpus_per_domain)
    return {g.axis: g.link for g in groups}


def _notes(p: Problem) -> list[str]:
    return [p.model.describe(),
            f"Precision {p.precision}, optimizer {p.optimizer}; "
            f"{'flash (causal) attention' if p.flash else 'full s×s attention scores stored'}",
            f"Budget: CUDA/NCCL context {p.budget.context_bytes / 1e9:g} GB, comm buffers "
            f"{p.budget.comm_buffer_bytes / 1e9:g} GB, fragmentation "
            f"{p.budget.fragmentation_fraction:.0%} of tensors, margin "
            f"{p.budget.margin_fraction:.0%} of capacity. An estimate, not a promise: measure the "
            "first steps."]


def _stages(ev: Evaluation, lay: Layout) -> list[StageMemory]:
    mem = ev.memory
    names = ["first"] + (["middle"] if bool(mem.has_middle[0]) else []) \
        + (["last"] if lay.pp > 1 else [])
    out = []
    for n in names:
        sm = mem.stage(n)
        out.append(StageMemory(name=n if lay.pp > 1 else "single stage",
                               items={k: float(v[0]) for k, v in sm.items().items()},
                               total_bytes=float(sm.total[0])))
    return out


def estimate_problem(p: Problem, lay: Layout) -> Estimate:
    """Evaluate one layout through the same vectorised path the search uses."""
    if lay.precision != p.precision or lay.optimizer != p.optimizer:
        p = Problem(**{**p.__dict__, "precision": lay.precision, "optimizer": lay.optimizer})
    ev = evaluate(p, Candidates.from_layouts([lay]))
    mem, t, thr = ev.memory, ev.time, ev.throughput
    one = lambda a: float(a[0])  # noqa: E731
    tflops = 1e12 * p.gpus * one(t.step)
    figures = Figures(micro_batches=one(ev.micro_batches), peak_memory=one(mem.peak),
                      usable_memory=one(mem.usable))
    return Estimate(
        model=p.model.name or "model", model_inferred=p.model.inferred, hardware=p.hardware.name,
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
        budget=p.budget, notes=_notes(p))


def estimate(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
             seq_len: int, global_batch: int, budget: MemoryBudget | None = None,
             flash_attention: bool | None = None) -> Estimate:
    """Memory per stage, step time and rules for one layout."""
    validate.recipe(layout.precision, layout.optimizer)
    p = Problem(model=model, hardware=hardware, gpus=gpus, seq_len=seq_len,
                global_batch=global_batch, precision=layout.precision, optimizer=layout.optimizer,
                budget=budget or MemoryBudget(), flash_attention=flash_attention)
    return estimate_problem(p, layout)


def layout_rules(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
                 seq_len: int, global_batch: int, budget: MemoryBudget | None = None) -> list[Rule]:
    """Every rule with its status, measured value and limit (the gate's and the search's rules)."""
    return estimate(model, hardware, gpus, layout, seq_len=seq_len, global_batch=global_batch,
                    budget=budget).rules
