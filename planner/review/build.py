"""The design-review printout: one layout explained section by section, from a plan or a search.

``inputs_from_plan(path)`` takes the plan's own layout; ``inputs_from_fit(...)`` the search's
winner. Either way ``build_review`` assembles the sections (inputs and assumptions, chosen
layout and alternatives, memory, step time and communication, bubble, batch arithmetic,
checkpoints, time and cost to train, rejections, rules) out of numbers the library already
computes: ``estimation.estimate`` (via ``gate.evaluate_inputs``), ``api.fit``,
``api.resilience_for`` and ``api.time_to_train``. The review's shape is ``review.doc``, each
section's builder ``review.sections``, the assumption tables ``review.assumptions``, the
executive summary ``review.summary``; the schedule drawn in the review is
``pipeline_schedule.pipeline_timeline``, whose bubble agrees with
``engine.pipeline.bubble_fraction``.

Rendering (Markdown, HTML) is ``render.review``; charts are ``render.charts``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from planner.errors import InputError, named
from planner.evaluation.train import TimeToTrain
from planner.gate.check import evaluate_inputs
from planner.resolve.job import resolve_plan
from planner.review.doc import SECTIONS, Review, Section
from planner.review import sections as rv
from planner.review.sections import ChartSpec, ReviewContext
from planner.search.fit import FitResult, fit
from planner.specs.hardware import HardwareProfile
from planner.specs.job import Job
from planner.specs.model import ModelSpec

CHARTS_HINT = "pip install 'dtplan[report]'"


def inputs_from_plan(path: str) -> Job:
    from planner.resolve.plan_file import load_plan, plan_where
    plan, text = load_plan(path)
    inp = resolve_plan(plan, Path(path).parent, plan_where(path), text=text)
    inp.notes.insert(0, f"plan {plan.name or Path(path).name}")
    return inp


def inputs_from_fit(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
                    global_batch: int, precision: str = "mixed", optimizer: str = "adam"
                    ) -> tuple[Optional[Job], FitResult]:
    """(Job with the search's winner, FitResult); Job is None when nothing fits. The FitResult
    keeps its search (search_result), which the review's trade-off chart reads, not a second."""
    res = fit(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
              precision=precision, optimizer=optimizer, top=5)
    if not res.layouts:
        return None, res
    return Job(model=model, hardware=hardware, gpus=gpus, layout=res.layouts[0].layout,
               seq_len=seq_len, global_batch=global_batch), res


def build_review(inp: Optional[Job], *, source: str, fit_result: Optional[FitResult] = None,
                 train_tokens: Optional[float] = None, gpu_hour_cost: Optional[float] = None,
                 charts: bool = True, scaling: bool = True) -> Review:
    """Every section of the review for one resolved input (``inp``: the chosen layout), in the
    order of ``SECTIONS``; each is built by ``review.sections``. ``fit_result`` (with the
    search behind it): the search of the same GPUs and batch, when the caller ran it
    (``inputs_from_fit``); otherwise the review runs it, once."""
    if inp is None:  # a search where nothing fits: inputs, rejections, what would fit
        if fit_result is None:
            raise ValueError("build_review: no input and no search result to review")
        return _nothing_fits(fit_result, source)
    ctx = _context(inp, source, fit_result, charts)
    sections = [rv.inputs_section(ctx), rv.layout_section(ctx), rv.memory_section(ctx),
                rv.time_section(ctx), rv.bubble_section(ctx), rv.batch_section(ctx)]
    ck_section, goodput = rv.checkpoint_section(ctx, train_tokens, gpu_hour_cost)
    train_section, train = rv.train_section(ctx, train_tokens, gpu_hour_cost, goodput)
    sections += [ck_section, train_section, rv.scaling_section(ctx, scaling),
                 rv.rejections_section(ctx), rv.rules_section(ctx)]
    review = _review(ctx, sections, goodput, train, gpu_hour_cost)
    _draw(review, ctx.chart_specs, charts)
    return review


def _context(inp: Job, source: str, fit_result: Optional[FitResult],
             charts: bool) -> ReviewContext:
    """The estimate of the input and, unless given, the search of the same GPUs and batch: one
    search, read by the alternatives, the rejections, the trade-off chart and the scaling
    sweep's own count. No "what would fit" searches: the review never prints them."""
    outcome = evaluate_inputs(inp, source)
    if fit_result is None:
        lay = inp.layout
        fit_result = fit(inp.model, inp.hardware, inp.gpus, seq_len=inp.seq_len,
                         global_batch=inp.global_batch, precision=lay.precision,
                         optimizer=lay.optimizer, budget=inp.budget, top=5, suggest=False)
    return ReviewContext(inp=inp, source=source, outcome=outcome,
                         fit_result=fit_result, charts=charts)


def _review(ctx: ReviewContext, sections: list[Section], goodput: float,
            train: Optional[TimeToTrain], gpu_hour_cost: Optional[float]) -> Review:
    """The sections under a title, the verdict line and the executive summary."""
    from planner.review import summary as rs
    from planner.render.estimate import verdict_line
    inp, e = ctx.inp, ctx.e
    failed = [r for r in ctx.outcome.rules if r.status == "fail"]
    verdict = ("PASS" if not failed else "FAIL: " + ", ".join(r.name for r in failed)) + \
        f" — {verdict_line(e)}; step {e.step_time_s:.2f} s, {e.tokens_per_s:,.0f} tokens/s, " \
        f"MFU {e.mfu:.1%}"
    title = f"Design review: {inp.model.name or 'model'} on {inp.gpus} × {inp.hardware.name}"
    summary = rs.summarize(inp, e, ctx.fit_result, failed=[r.name for r in failed],
                           goodput=goodput, train=train, gpu_hour_cost=gpu_hour_cost)
    return Review(title=title, source=ctx.source, verdict=verdict, ok=not failed,
                  sections=sections, summary=summary.table())


def _draw(review: Review, specs: dict[str, ChartSpec], charts: bool) -> None:
    from planner.render import charts as ch
    if not charts:
        review.charts_note = "Charts switched off."
        return
    if not ch.available():
        review.charts_note = f"Charts need matplotlib: {CHARTS_HINT}. Tables are complete without them."
        return
    for name, (title, fn, args) in specs.items():
        review.charts[name] = getattr(ch, fn)(*args)
        review.chart_titles[name] = title


def _nothing_fits(res: FitResult, source: str) -> Review:
    from planner.render.fit import fit_doc
    doc = fit_doc(res)
    secs = [Section(SECTIONS[0], [f"Source: {source}."] + doc.notes),
            Section(SECTIONS[1], [f"No layout of {res.gpus} GPUs passes every rule."]
                    + [f"What would fit: {s}" for s in res.suggestions]),
            Section(SECTIONS[9], [f"The search enumerated {res.enumerated} layouts; none is valid."],
                    [doc.tables[-1]])]
    return Review(title=f"Design review: {res.model} on {res.gpus} × {res.hardware}",
                  source=source, verdict=doc.verdict or "DOES NOT FIT", ok=False, sections=secs)


def train_tokens_value(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    from planner.io.numbers import parse_number
    x = parse_number(named("train_tokens"), text)
    if x <= 0 or math.isnan(x):
        raise InputError(named("train_tokens"), f"must be > 0, got {text}")
    return x
