"""`fit`: the search's answer as a result people read: the ranked layouts, the winner's
estimate, the rejections by rule, and what would fit when nothing does; and an estimate whose
micro-batch (or interleaving) the search picks.

    import planner
    model, hw = planner.get_preset("llama3-70b"), planner.load_profile("h100")
    best = planner.fit(model, hw, 256, seq_len=8192, global_batch=512).layouts[0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Optional

import numpy as np
from pydantic import Field, PlainValidator
from pydantic.json_schema import SkipJsonSchema

from planner.evaluation.candidates import Problem
from planner.evaluation.error_band import band_for, ranking_band
from planner.evaluation.estimate import Estimate, estimate_problem
from planner.evaluation.rules import RULE_NAMES, RULE_TEXT, RULES, Figures
from planner.evaluation.train import problem, resilience_plan
from planner.io import validate as v
from planner.search.blocks import MAX_PRICED, Budget
from planner.search.fast import OBJECTIVES, SearchResult, SearchSpace, search
from planner.search.ranking import short_of_headroom
from planner.search.would_fit import what_would_fit
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import FULL, Tuning
from planner.specs.framework import FrameworkProfile
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec
from planner.specs.records import INTERNAL


def estimate_with_auto(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
                       seq_len: int, global_batch: int, budget: MemoryBudget | None = None,
                       auto_micro_batch: bool = False, auto_chunks: bool = False,
                       framework: FrameworkProfile | None = None) -> tuple[Estimate, str]:
    """estimate(); with auto micro-batch (and/or chunks) the fastest setting that fits this
    layout, found by the search with every other knob fixed."""
    v.recipe(layout.precision, layout.optimizer)
    p = problem(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
                precision=layout.precision, optimizer=layout.optimizer, budget=budget,
                tuning=Tuning.of(layout), framework=framework)
    v.framework_recompute("recompute", layout.recompute, p.fw)
    note = ""
    if auto_micro_batch or auto_chunks:
        space = SearchSpace(tp=layout.tp, pp=layout.pp, cp=layout.cp, ep=layout.ep, zero=layout.zero,
                            micro_batch=None if auto_micro_batch else layout.micro_batch,
                            recompute=layout.recompute,
                            schedule=None if auto_chunks else layout.schedule,
                            chunks=None if auto_chunks else layout.chunks,
                            allow_offload=False)
        res = search(p, space)
        if len(res.order):
            best = res.candidates.layout(int(res.order[0]), layout.precision, layout.optimizer,
                                         p.tuning)
            layout = replace(layout, micro_batch=best.micro_batch, schedule=best.schedule,
                             chunks=best.chunks)
            note = (f"auto: micro-batch {best.micro_batch}"
                    + (f", {best.schedule} v={best.chunks}" if auto_chunks else "")
                    + f" is the fastest of {res.enumerated} settings tried that fits"
                    + (" (none leaves the headroom rule free)" if short_of_headroom(
                        p, res.results.memory.headroom[res.order[:1]],
                        res.results.memory.peak[res.order[:1]])[0] else
                       " with the headroom rule's room"))
        else:
            note = "auto: no micro-batch setting fits this layout; showing micro-batch 1"
            layout = replace(layout, micro_batch=1)
    return estimate_problem(p, layout), note


@dataclass(frozen=True, kw_only=True)
class RankedLayout:
    rank: int
    layout: Layout
    peak_memory_bytes: float
    headroom_bytes: float
    step_time_s: float
    tokens_per_s: float
    mfu: float
    bubble_fraction: float
    collective_fraction: float
    accumulation: float
    checkpoint_interval_s: Optional[float] = None
    goodput: Optional[float] = None
    # ± on step time / tokens/s / MFU: the regime's calibrated band, else the profile's wide
    # band for regimes without runs (error_band.shown_band)
    error_band_pct: Optional[float] = None
    error_band_calibrated: bool = False     # error_band_pct comes from this regime's runs
    # the headroom rule (MemoryBudget.required_headroom) for this row, and whether it falls short
    required_headroom_bytes: float = 0.0
    short_of_headroom: bool = False


@dataclass(frozen=True, kw_only=True)
class Rejection:
    rule: str
    message: str
    count: int
    closest: Optional[str] = None
    measured: Optional[str] = None   # the example's value the rule reads (estimate's "measured")
    limit: Optional[str] = None      # what the rule allows


@dataclass(frozen=True, kw_only=True)
class FitResult:
    model: str
    model_description: str
    model_inferred: bool
    params: int          # the language model's exact parameter count (transformers' count)
    active_params: int   # parameters one token passes through (top-k experts of each MoE layer)
    hardware: str
    gpus: int
    seq_len: int
    global_batch: int
    objective: str
    enumerated: int
    valid: int
    # layouts with full recompute of part of each stage, solved for their layer count (not
    # enumerated: one per layout whose none and full rows bracket the memory), that fit
    solved: int = 0
    layouts: list[RankedLayout]
    best: Optional[Estimate] = None
    rejections: list[Rejection]
    # the schema states the default ([]), as a literal default would
    suggestions: Annotated[list[str], Field(json_schema_extra={"default": []})] = \
        field(default_factory=list)
    offload_searched: bool = False   # --allow-offload: CPU offload was part of the space
    # the headroom rule the ranking applied (MemoryBudget: share of each row's peak, and GB floor)
    min_headroom_fraction: float = 0.0
    min_headroom_bytes: float = 0.0
    # valid layouts on the front short of the headroom rule (flagged, ranked after the rest)
    short_of_headroom: int = 0
    # the tolerance (per cent) within which the rows after #1 are ordered by headroom: the
    # profile's in-sample RMS of #1's regime (error_band.ranking_band), 0 when none
    near_tie_pct: float = 0.0
    empty_space: str = ""            # why nothing was enumerated, when nothing was
    # Its search, for the review's charts and the sweep's count: internal, never output (not
    # dumped, and not in the schema, which has no place for its arrays: taken as given)
    search_result: Annotated[Optional[SearchResult], PlainValidator(lambda x: x),
                             SkipJsonSchema()] = field(default=None, repr=False, compare=False,
                                                       metadata=INTERNAL)

    @property
    def fits(self) -> bool:
        return self.valid > 0

    @property
    def rejected(self) -> int:
        """Layouts that failed a rule (each counted under the first it failed)."""
        return sum(j.count for j in self.rejections)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def per_gpu(self, tokens_per_s: float) -> float:
        """A throughput of the whole job divided over its GPUs."""
        return tokens_per_s / self.gpus


def _ranked(res: SearchResult, top: int) -> list[RankedLayout]:
    r, p, out = res.results, res.problem, []
    # the regime's derived band: framework / generation (a MoE its own, without runs)
    band = band_for(p.hardware, p.fw.name, moe=p.model.is_moe)
    need = p.budget.required_headroom(r.memory.peak)
    for rank, i in enumerate(res.order[:top], 1):
        i = int(i)
        out.append(RankedLayout(
            rank=rank, layout=res.candidates.layout(i, p.precision, p.optimizer, p.tuning),
            peak_memory_bytes=float(r.memory.peak[i]), headroom_bytes=float(r.memory.headroom[i]),
            step_time_s=float(r.time.step[i]), tokens_per_s=float(r.throughput.tokens_per_s[i]),
            mfu=float(r.throughput.mfu[i]), bubble_fraction=float(r.throughput.bubble_fraction[i]),
            collective_fraction=float(r.throughput.collective_fraction[i]),
            accumulation=float(r.micro_batches[i]),
            error_band_pct=p.hardware.efficiency.uncalibrated_band if band is None else band,
            error_band_calibrated=band is not None,
            required_headroom_bytes=float(need[i]),
            short_of_headroom=bool(r.memory.headroom[i] < need[i])))
    return out


def _short(res: SearchResult) -> int:
    """How many ranked rows leave less than the headroom rule."""
    r, p = res.results, res.problem
    idx = np.asarray(res.order, dtype=np.int64)
    return int(short_of_headroom(p, r.memory.headroom[idx], r.memory.peak[idx]).sum())


def _rejections(res: SearchResult) -> list[Rejection]:
    """How many candidates each rule rejected first, and the closest miss for each rule."""
    out = []
    r, c, p = res.results, res.candidates, res.problem
    for k, name in enumerate(RULE_NAMES):
        idx = np.flatnonzero(res.first_failure == k)  # the example row the search kept
        if not res.rejected[k] or not len(idx):
            continue
        if name == "fits-in-memory":
            j = int(idx[np.argmax(r.memory.headroom[idx])])
            over = -r.memory.headroom[j] / 1e9
            closest = (f"{short_label(c.layout(j, p.precision, p.optimizer, p.tuning))} needs "
                       f"{r.memory.peak[j] / 1e9:.1f} GB, {over:.1f} GB over")
        else:
            j = int(idx[0])
            closest = f"e.g. {short_label(c.layout(j, p.precision, p.optimizer, p.tuning))}"
        # the example's value against the rule's limit, as estimate's rule table states them
        measured, limit = RULES[k].measure(p, c.layout(j, p.precision, p.optimizer, p.tuning), Figures(
            micro_batches=float(r.micro_batches[j]), peak_memory=float(r.memory.peak[j]),
            usable_memory=float(r.memory.usable[j])))
        out.append(Rejection(rule=name, message=RULE_TEXT[name], count=int(res.rejected[k]),
                             closest=closest, measured=measured, limit=limit))
    return out


def short_label(lay: Layout) -> str:
    s = f"TP{lay.tp} PP{lay.pp} DP{lay.dp}"
    s += f" CP{lay.cp}" if lay.cp > 1 else ""
    s += f" EP{lay.ep}" if lay.ep > 1 else ""
    s += f" ZeRO-{lay.zero}" + ("h" if lay.shard_group else "") + f" mb{lay.micro_batch}"
    s += f" v{lay.chunks}" if lay.chunks > 1 else ""
    s += f" rc={lay.recompute}"
    s += " offload" if lay.offload_optimizer != "none" else ""
    return s


def fit_problem(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
                global_batch: int, precision: str = "mixed", optimizer: str = "adam",
                budget: MemoryBudget | None = None, space: SearchSpace = SearchSpace(),
                tuning: Tuning = FULL, objective: str = "time",
                framework: FrameworkProfile | None = None) -> Problem:
    """fit's question at `gpus` GPUs, its objective, recipe and fixed recompute checked (what
    fit searches, and what a sweep counts before it searches any count)."""
    v.choice("objective", objective, OBJECTIVES)
    v.recipe(precision, optimizer)
    p = problem(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
                precision=precision, optimizer=optimizer, budget=budget, tuning=tuning,
                framework=framework)
    v.framework_recompute("recompute", space.recompute or "none", p.fw)
    return p


def fit(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
        global_batch: int, precision: str = "mixed", optimizer: str = "adam",
        budget: MemoryBudget | None = None, space: SearchSpace = SearchSpace(),
        tuning: Tuning = FULL,
        objective: str = "time", top: int = 10, suggest: bool = True, dominated: bool = False,
        explain: bool = True, limit: int | None = None,
        framework: FrameworkProfile | None = None) -> FitResult:
    """Search every layout (refused over `limit` structurally valid ones, None: the bound of
    blocks.price_limit); return the best `top`, the winner's full estimate (unless not
    `explain`: a sweep shows one row per count) and the rejections; when nothing fits and
    `suggest`, what would (more GPUs, offload, a shorter sequence, a bigger GPU), its searches
    pricing what this one left of blocks.MAX_PRICED. It keeps its search (``search_result``,
    not in JSON)."""
    p = fit_problem(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
                    precision=precision, optimizer=optimizer, budget=budget, space=space,
                    tuning=tuning, objective=objective, framework=framework)
    res = search(p, space, objective, dominated=dominated, limit=limit)
    ranked = _ranked(res, top)
    plans: dict[tuple, Any] = {}  # the plan depends on these knobs only: once per distinct set
    for i, x in enumerate(ranked):  # checkpoint interval and goodput at the default failure rate
        lay = x.layout
        key = (lay.tp, lay.pp, lay.zero, lay.precision, lay.shard_group, lay.ep, lay.optimizer)
        if key not in plans:
            plans[key] = resilience_plan(model, hardware, gpus, lay)
        plan = plans[key]
        ranked[i] = replace(x, checkpoint_interval_s=plan.optimum.interval_s,
                            goodput=plan.optimum.goodput_fraction)
    best = estimate_problem(p, ranked[0].layout) if ranked and explain else None
    # no split at all: no other GPU count, batch or GPU can be ranked
    empty = "" if res.enumerated else _empty_space(p, space)
    suggestions = what_would_fit(p, space, Budget(max(0, MAX_PRICED - res.priced))) if (
        res.enumerated and not ranked and suggest) else []
    return FitResult(model=model.name or "model", model_description=model.describe(),
                     params=model.param_count(), active_params=model.active_param_count(),
                     model_inferred=model.inferred, hardware=hardware.name, gpus=gpus,
                     seq_len=seq_len, global_batch=global_batch, objective=objective,
                     enumerated=res.enumerated, valid=res.valid, solved=res.solved,
                     layouts=ranked, best=best,
                     rejections=_rejections(res), suggestions=suggestions, empty_space=empty,
                     offload_searched=space.allow_offload,
                     min_headroom_fraction=p.budget.min_headroom_fraction,
                     min_headroom_bytes=p.budget.min_headroom_bytes,
                     short_of_headroom=_short(res), search_result=res,
                     near_tie_pct=(ranking_band(p.hardware, p.fw.name, ranked[0].layout) or 0.0)
                     if ranked else 0.0)


def _empty_space(p: Problem, space: SearchSpace) -> str:
    """Why no candidate was enumerated: TP·CP·PP·DP = GPUs, so the fixed degrees' product must
    divide the GPU count (unfixed degrees always include 1)."""
    fixed = [(k, x) for k, x in (("TP", space.tp), ("CP", space.cp), ("PP", space.pp)) if x]
    prod = math.prod(x for _, x in fixed)
    if fixed and p.gpus % prod:
        named = " × ".join(f"{k} {x}" for k, x in fixed) + (f" = {prod}" if len(fixed) > 1 else "")
        return (f"Nothing enumerated: {named} does not "
                f"divide {p.gpus} GPUs (TP × CP × PP × DP must equal the GPU count)")
    return (f"Nothing enumerated: no TP × CP × PP × DP split of {p.gpus} GPUs is within the "
            "search's bounds")
