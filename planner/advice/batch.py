"""When the batch is what holds MFU back: the same job at a bigger global batch, searched.

On a fixed GPU count a bigger global batch B leaves the work per token alone but amortises what
is paid per step rather than per token: the pipeline bubble, (p − 1)/m of the step for m
micro-batches (Narayanan et al. 2021, Sec. 2.2; m grows with B), and the data-parallel gradient
reduction, once per step; it also lets more data-parallel degrees divide B. So a bigger batch
can win back at most the bubble and exposed-communication share of the step, and the search
runs only when that share could clear the threshold. Nothing here is a new formula: each
figure is the search (fit) or the estimate (estimate) of the job at B × factor.

Whether the bigger batch still trains as well is a question of optimisation (the critical
batch size, McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"), which the
planner does not model: the advice says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from planner.evaluation.candidates import Problem
from planner.evaluation.estimate import Estimate, estimate_problem
from planner.evaluation.error_band import ranking_band
from planner.search.blocks import MAX_PRICED, Budget, SpaceTooLarge
from planner.search.fast import SearchSpace, search
from planner.search.fit import FitResult
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import Tuning
from planner.specs.framework import FrameworkProfile
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec

# The range tried: 2× and 4× the global batch (a stated range, not an open-ended hunt), the
# largest first: every layout valid at 2B is valid at 4B (b·DP still divides it, the memory per
# micro-batch is the same) with twice the micro-batches, so the best MFU at 4B is at least the
# best at 2B, and when 4B does not clear the threshold, 2B is not searched.
BATCH_FACTORS = (4, 2)
# Display threshold: the relative MFU gain worth a note when the regime's error band is smaller
# (or the regime is uncalibrated). A choice of presentation, not a modelling constant.
MIN_GAIN_FRACTION = 0.10


@dataclass(frozen=True, kw_only=True)
class BatchAdvice:
    """The smallest of BATCH_FACTORS × the batch that raises MFU by more than the threshold."""

    global_batch: int            # sequences per step at the advised batch
    tokens_per_batch: int
    factor: int                  # the advised batch ÷ the batch given
    base_mfu: float
    mfu: float
    gain_fraction: float         # mfu / base_mfu − 1
    threshold_fraction: float    # the gain it had to beat: max(in-sample spread, MIN_GAIN_FRACTION)
    step_time_s: float
    layout: Layout               # the layout at the advised batch (fit: the search's best)
    tried: dict[str, float]      # factor ("2×") → MFU at that batch


def threshold(error_band_pct: Optional[float]) -> float:
    """The gain a bigger batch must beat: the regime's in-sample spread, at least
    MIN_GAIN_FRACTION."""
    return max(MIN_GAIN_FRACTION, (error_band_pct or 0.0) / 100.0)


def _worth_trying(bubble: float, collective: float, need: float, fixed: float = 0.0) -> bool:
    """A bigger batch wins back at most the bubble, the exposed communication and the per-step
    fixed cost (`fixed`: the optimizer phase, the framework's host time included) as shares of
    the step: the gain in MFU is at most 1/(1 − share) − 1."""
    share = min(bubble + collective + fixed, 0.99)
    return 1.0 / (1.0 - share) - 1.0 > need


def clears(mfu: float, base_mfu: float, need: float) -> bool:
    """Whether MFU at the bigger batch beats the base by more than `need`: mfu/base − 1 > need
    (no base MFU, no gain to speak of)."""
    return base_mfu > 0 and mfu / base_mfu - 1.0 > need


def _advice(p: Problem, base_mfu: float, need: float,
            figures: dict[int, tuple[float, float, Layout]]) -> Optional[BatchAdvice]:
    clear = [k for k, f in figures.items() if clears(f[0], base_mfu, need)]
    if not clear:
        return None
    best = min(clear)   # the smallest change of batch that clears the threshold
    mfu, step, lay = figures[best]
    gain = mfu / base_mfu - 1.0
    b = p.global_batch * best
    return BatchAdvice(global_batch=b, tokens_per_batch=b * p.seq_len, factor=best,
                       base_mfu=base_mfu, mfu=mfu, gain_fraction=gain, threshold_fraction=need,
                       step_time_s=step, layout=lay,
                       tried={f"{k}×": v[0] for k, v in sorted(figures.items())})


def _fixed_share(e: Estimate) -> float:
    """The optimizer phase's share of the step: paid once a step whatever the batch."""
    return e.breakdown.get("optimizer", 0.0) / e.step_time_s if e.step_time_s > 0 else 0.0


def _scaled(p: Problem, factor: int) -> Problem:
    return replace(p, global_batch=p.global_batch * factor)


def advise_fit(p: Problem, space: SearchSpace, *, mfu: float, bubble: float, collective: float,
               error_band_pct: Optional[float] = None, fixed: float = 0.0,
               budget: Budget | None = None) -> Optional[BatchAdvice]:
    """fit: search the job again at each factor × the batch (same GPUs, same fixed knobs) and
    keep the fastest layout's MFU; advice when the best beats the threshold. Each search
    spends from `budget` (what the fit left of blocks.MAX_PRICED): one over what is left is
    refused before it runs (the next, smaller factor is tried)."""
    need = threshold(error_band_pct)
    if not _worth_trying(bubble, collective, need, fixed):
        return None
    figures = {}
    budget = Budget(MAX_PRICED) if budget is None else budget
    for k in BATCH_FACTORS:
        try:
            res = search(_scaled(p, k), space, "time", limit=budget.left)
        except SpaceTooLarge:   # over what is left: the smaller factor may not be
            budget.short = True
            continue
        budget.take(res.priced)
        if not len(res.order):
            break
        i = int(res.order[0])
        figures[k] = (float(res.results.throughput.mfu[i]), float(res.results.time.step[i]),
                      res.candidates.layout(i, p.precision, p.optimizer, p.tuning))
        if not clears(figures[k][0], mfu, need):   # the largest factor does not: none does
            break
    return _advice(p, mfu, need, figures)


def advise_estimate(p: Problem, layout: Layout, *, mfu: float, bubble: float, collective: float,
                    error_band_pct: Optional[float] = None, fixed: float = 0.0
                    ) -> Optional[BatchAdvice]:
    """estimate: the same layout at each factor × the batch (more accumulation steps), when it
    still fits; advice when the best beats the threshold."""
    need = threshold(error_band_pct)
    if not _worth_trying(bubble, collective, need, fixed):
        return None
    figures = {}
    for k in BATCH_FACTORS:
        e = estimate_problem(_scaled(p, k), layout)
        if not e.fits or any(r.status == "fail" for r in e.rules):
            break
        figures[k] = (e.mfu, e.step_time_s, layout)
        if not clears(e.mfu, mfu, need):
            break
    return _advice(p, mfu, need, figures)


def advise_fit_result(r: FitResult, model: ModelSpec, hardware: HardwareProfile,
                      space: SearchSpace, *, precision: str = "mixed",
                      optimizer: str = "adam",
                      framework: FrameworkProfile | None = None) -> Optional[BatchAdvice]:
    """advise_fit for a planner.api.FitResult ranked by time (its winner is the base); None for
    another objective (its winner is not the fastest) or when nothing fits."""
    if not r.layouts or r.objective != "time":
        return None
    from planner.evaluation.train import problem
    w = r.layouts[0]
    p = problem(model, hardware, r.gpus, seq_len=r.seq_len, global_batch=r.global_batch,
                precision=precision, optimizer=optimizer, tuning=Tuning.of(w.layout),
                framework=framework)
    # the regime's in-sample spread (error_band.ranking_band), not the printed band: that one is
    # on the absolute figures, whose offset a batch change within one regime shares
    spent = r.search_result.priced if r.search_result is not None else 0
    return advise_fit(p, space, mfu=w.mfu, bubble=w.bubble_fraction,
                      collective=w.collective_fraction, budget=Budget(max(0, MAX_PRICED - spent)),
                      error_band_pct=ranking_band(p.hardware, p.fw.name, w.layout),
                      fixed=_fixed_share(r.best or estimate_problem(p, w.layout)))


def advise_estimate_result(e: Estimate, model: ModelSpec, hardware: HardwareProfile,
                           budget: Optional[MemoryBudget] = None,
                           framework: FrameworkProfile | None = None) -> Optional[BatchAdvice]:
    """advise_estimate for a planner.evaluation.estimate.Estimate (its layout, batch and budget)."""
    from planner.evaluation.train import problem
    p = problem(model, hardware, e.gpus, seq_len=e.seq_len, global_batch=e.global_batch,
                precision=e.layout.precision, optimizer=e.layout.optimizer, budget=budget,
                framework=framework)
    return advise_estimate(p, e.layout, mfu=e.mfu, bubble=e.bubble_fraction,
                           collective=e.collective_fraction,
                           error_band_pct=ranking_band(p.hardware, p.fw.name, e.layout),
                           fixed=_fixed_share(e))
