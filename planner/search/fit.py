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
from planner.evaluation.estimate import Estimate, estimate_problem
from planner.evaluation.rules import RULE_NAMES, RULE_TEXT, RULES, Figures
from planner.evaluation.train import problem, resilience_plan
from planner.io import validate as v
from planner.search.blocks import MAX_PRICED
from planner.search.fast import (OBJECTIVES, SearchResult, SearchSpace, any_fits, candidate_bands,
                                 search, short_of_headroom)
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import FULL, Tuning
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import list_profiles
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
    bands = candidate_bands(p, res.candidates)
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
            error_band_pct=float(bands[i]) or p.hardware.efficiency.uncalibrated_band,
            error_band_calibrated=bool(bands[i]),
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


# the framework offload is planned on when the question's own cannot offload enough
OFFLOAD_FRAMEWORK = "deepspeed"


def fit(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
        global_batch: int, precision: str = "mixed", optimizer: str = "adam",
        budget: MemoryBudget | None = None, space: SearchSpace = SearchSpace(),
        tuning: Tuning = FULL,
        objective: str = "time", top: int = 10, suggest: bool = True, dominated: bool = False,
        explain: bool = True, limit: int = MAX_PRICED,
        framework: FrameworkProfile | None = None) -> FitResult:
    """Search every layout (refused over `limit` structurally valid ones); return the best
    `top`, the winner's full estimate (unless not `explain`: a sweep shows one row per count)
    and the rejections; when nothing fits and `suggest`, what would (more GPUs, offload, a
    shorter sequence, a bigger GPU). It keeps its search (``search_result``, not in JSON)."""
    v.choice("objective", objective, OBJECTIVES)
    v.recipe(precision, optimizer)
    p = problem(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
                precision=precision, optimizer=optimizer, budget=budget, tuning=tuning,
                framework=framework)
    v.framework_recompute("recompute", space.recompute or "none", p.fw)
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
    suggestions = _what_would_fit(p, space, objective) if (
        res.enumerated and not ranked and suggest) else []
    return FitResult(model=model.name or "model", model_description=model.describe(),
                     params=model.param_count(), active_params=model.active_param_count(),
                     model_inferred=model.inferred, hardware=hardware.name, gpus=gpus,
                     seq_len=seq_len, global_batch=global_batch, objective=objective,
                     enumerated=res.enumerated, valid=res.valid, layouts=ranked, best=best,
                     rejections=_rejections(res), suggestions=suggestions, empty_space=empty,
                     offload_searched=space.allow_offload,
                     min_headroom_fraction=p.budget.min_headroom_fraction,
                     min_headroom_bytes=p.budget.min_headroom_bytes,
                     short_of_headroom=_short(res), search_result=res)


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


def _first_fit(p: Problem, space: SearchSpace) -> bool:
    return any_fits(p, space)


def _batch_fixes(p: Problem, space: SearchSpace, tries: int = 6) -> list[str]:
    """When B = b × a × DP is what fails: the nearest batches (±25 %) and the nearest smaller
    GPU counts (≥ 75 %) that fit, most data-parallel degrees first (the largest gcd with the
    count, as engine.batch.dp_friendly_batch), then the nearest."""
    from planner.engine.divisors import top_by_gcd  # closed form: a batch of 10^9 or 10^7 GPUs
    b0, n0, node = p.global_batch, p.gpus, p.hardware.scale_up.gpus_per_node  # is no scan
    batches = top_by_gcd(n0, max(1, int(b0 * 0.75)), min(int(b0 * 1.25), v.MAX_GLOBAL_BATCH),
                         tries, b0)
    ok_b = sorted([b for b in batches if b != b0
                   and _first_fit(Problem(**{**p.__dict__, "global_batch": b}), space)][:2])
    lo, hi = max(0, int(n0 * 0.75)) + 1, n0 - 1  # whole nodes, or fewer GPUs than one node
    counts = sorted(top_by_gcd(b0, lo, hi, tries // 2, hi, lambda d: math.lcm(d, node))
                    + top_by_gcd(b0, lo, min(hi, node - 1), tries // 2, hi),
                    key=lambda m: (-math.gcd(b0, m), -m))
    ok_n = sorted([m for m in counts[:tries // 2]
                   if _first_fit(Problem(**{**p.__dict__, "gpus": m}), space)][:2], reverse=True)
    out = []
    if ok_b:
        out.append(f"--global-batch {' or '.join(map(str, ok_b))}: the nearest batches that the "
                   f"data-parallel degrees of {n0} GPUs divide fit (batch divisibility is what fails "
                   f"with {b0})")
    if ok_n:
        out.append(f"{' or '.join(map(str, ok_n))} GPUs: the nearest smaller counts whose "
                   f"data-parallel degrees divide the batch of {b0}")
    return out


def _fewer_gpus(p: Problem, space: SearchSpace) -> list[str]:
    """The largest power of two below the count (whole nodes) that fits, when more GPUs never
    do: the batch caps DP (1000 sequences leave 10^7 GPUs idle), so fewer GPUs is the answer."""
    node, n = p.hardware.scale_up.gpus_per_node, 1 << (p.gpus - 1).bit_length()
    while n > 1:
        n //= 2
        m = n // node * node if n >= node else n
        if _first_fit(Problem(**{**p.__dict__, "gpus": m}), space):
            return [f"{m} GPUs: the largest power-of-two count below {p.gpus} with a layout "
                    "that fits"]
    return []


def _offload_fix(p: Problem, space: SearchSpace) -> list[str]:
    """CPU offload where it makes the question fit: on this framework, else on DeepSpeed (the
    home of ZeRO-Offload / ZeRO-Infinity, which moves gradients and parameters too)."""
    if space.allow_offload:
        return []
    wide = replace(space, allow_offload=True)
    if _first_fit(p, wide):
        return ["--allow-offload: ZeRO-Offload of the optimizer (and parameters) to CPU fits"]
    if p.fw.name != OFFLOAD_FRAMEWORK and _first_fit(
            replace(p, framework=load_framework(OFFLOAD_FRAMEWORK)), wide):
        return [f"--allow-offload --framework {OFFLOAD_FRAMEWORK}: ZeRO-Offload / ZeRO-Infinity "
                f"(optimizer, gradients and parameters in host memory) fits; {p.fw.name} "
                "offloads less"]
    return []


def _what_would_fit(p: Problem, space: SearchSpace, objective: str) -> list[str]:
    # offload first: it needs no other GPU, count or batch
    out = _offload_fix(p, space) + _batch_fixes(p, space)
    node = p.hardware.scale_up.gpus_per_node
    n, more = p.gpus, False
    for _ in range(12):  # up to 4096× more GPUs, within the range --gpus allows
        n = max(2 * n, node)
        if n > v.MAX_GPUS:
            break
        q = Problem(**{**p.__dict__, "gpus": n})
        if _first_fit(q, space):
            out.append(f"{n} GPUs: the smallest power-of-two count (from {p.gpus}) with a layout that fits")
            more = True
            break
    if not more:
        out += _fewer_gpus(p, space)
    s = p.seq_len
    while s > 512:
        s //= 2
        q = Problem(**{**p.__dict__, "seq_len": s, "global_batch": max(1, p.global_batch * p.seq_len // s)})
        if _first_fit(q, space):
            out.append(f"--seq-len {s}: a shorter sequence (same tokens per batch) fits")
            break
    for prof in sorted(list_profiles(), key=lambda x: x.gpu.memory_bytes):
        runs = p.tuning.fp8 == "none" or p.tuning.fp8 in prof.gpu.fp8_recipes
        if prof.gpu.memory_bytes > p.hardware.gpu.memory_bytes and runs and \
                _first_fit(Problem(**{**p.__dict__, "hardware": prof}), space):
            out.append(f"--hardware {prof.name}: {prof.gpu.memory_bytes / 2**30:.0f} GiB GPUs fit")
            break
    out += _finetune_fixes(p, space)
    if not out:
        out.append("nothing tried fits: more GPUs, offload, shorter sequences and bigger GPUs all fail")
    return out


def _finetune_fixes(p: Problem, space: SearchSpace) -> list[str]:
    """When every weight trains: whether LoRA (then QLoRA) on a frozen base fits, for a job that
    is a fine-tune (the adapters' states instead of the model's)."""
    if p.tuning.frozen:
        return []
    for mode in ("lora", "qlora"):
        lora = Tuning.of(Layout(finetune=mode, **{
            k: getattr(p.tuning, k) for k in ("fp8", "activation_offload",
                                              "optimizer_in_backward")}))
        if _first_fit(replace(p, tuning=lora), space):
            return [f"--finetune {mode}: LoRA adapters on a frozen "
                    f"{'4-bit ' if mode == 'qlora' else ''}base fit, if this job is a fine-tune"]
    return []


