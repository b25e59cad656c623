"""The design review's sections, one builder each, in the order ``review.doc.SECTIONS`` lists.

Every figure comes from the library (the estimate, the search, ``api.resilience_for``,
``api.time_to_train``, ``gate.checkpoint_figures``); a builder selects and words them, and
registers the chart it wants drawn in ``ReviewContext.chart_specs`` (title, function name in
``render.charts``, arguments). The one formula shown, the bubble (p−1)/(v·m + p−1), is
``engine.pipeline.bubble_fraction`` (Narayanan et al., SC21, Sec. 2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, TypeAlias

import numpy as np

from planner.review import summary as rs
from planner.engine import checkpoint as ckpt
from planner.engine.pipeline import bubble_fraction, bubble_slots
from planner.engine.schedules import SPLIT_BACKWARD
from planner.evaluation.estimate import Estimate
from planner.gate.check import Outcome
from planner.gate.plan_rules import checkpoint_figures
from planner.review.timeline import pipeline_timeline
from planner.render.document import Table
from planner.io.units import capacity
from planner.review.assumptions import assumption_tables
from planner.review.doc import SECTIONS, Section
from planner.search.fit import FitResult
from planner.specs.job import Job


# A chart a section wants drawn: its title, its function in render.charts, the arguments.
ChartSpec: TypeAlias = tuple[str, str, tuple[Any, ...]]


@dataclass
class ReviewContext:
    """What every section reads: the resolved input, its estimate and the search around it."""

    inp: Job
    source: str
    outcome: Outcome               # gate.evaluate_inputs: estimate, rules, notes
    fit_result: FitResult          # the search of the same GPUs and batch (its search kept)
    charts: bool
    chart_specs: dict[str, ChartSpec] = field(default_factory=dict)

    @property
    def e(self) -> Estimate:
        return self.outcome.estimate


def inputs_section(ctx: ReviewContext) -> Section:
    text = [f"Source: {ctx.source}."]
    if ctx.inp.model.inferred:
        text.insert(0, "**WARNING: MODEL SHAPE INFERRED** from a bare parameter count — the "
                       "layers, hidden size and heads below are a guess (Llama-style dense "
                       "decoder), not your model. Pass `--model`, `--model-config` or the "
                       "architecture flags for real numbers.")
    text += [f"Note: {n}" for n in dict.fromkeys(ctx.outcome.notes)]
    return Section(SECTIONS[0], text, assumption_tables(ctx.inp, ctx.inp.budget))


def layout_section(ctx: ReviewContext) -> Section:
    from planner.render.estimate import layout_line, verdict_line
    e, res = ctx.e, ctx.fit_result
    text = [f"Chosen layout ({'the plan' if 'plan' in ctx.source else 'the search winner'}): "
            f"**{layout_line(e)}**.", verdict_line(e)]
    rank = next((x.rank for x in res.layouts if x.layout == ctx.inp.layout), None)
    text.append(f"The search ranks this layout #{rank} of {res.valid} valid layouts."
                if rank else f"The search's top {len(res.layouts)} of {res.valid} "
                             "valid layouts (this layout is not among them):")
    if ctx.charts:
        ctx.chart_specs["pareto"] = (
            "Step time against peak memory: every valid layout, the plan starred", "pareto_chart",
            (rs.pareto(ctx.fit_result.search_result), (e.peak_memory_bytes, e.step_time_s)))
    return Section(SECTIONS[1], text, [rs.alternatives_table(e, res, ctx.inp.model,
                                                             ctx.inp.hardware)],
                   ["pareto"] if ctx.charts else [])


def memory_section(ctx: ReviewContext) -> Section:
    from planner.render.estimate import memory_tables
    e = ctx.e
    ctx.chart_specs["memory"] = ("Memory per GPU by pipeline stage", "memory_chart", (e,))
    return Section(SECTIONS[2], [
        f"Per-GPU memory item by item on each pipeline stage; peak {e.peak_memory_bytes / 1e9:.2f} GB "
        f"on the {e.peak_stage} stage against {e.usable_memory_bytes / 1e9:.2f} GB usable "
        f"({capacity(e.capacity_bytes)} capacity minus the {ctx.inp.budget.margin_fraction:.0%} margin). "
        "Context, buffers and fragmentation are budgeted explicitly; an estimate, not a promise."],
        memory_tables(e), ["memory"])


def time_section(ctx: ReviewContext) -> Section:
    from planner.render.estimate import time_tables
    e = ctx.e
    text = [f"Step time {e.step_time_s:.3f} s. Communication is listed per axis before overlap "
            "with the link each axis's groups cross (Megatron rank order: TP fastest, then CP, "
            "DP, PP); the breakdown table counts only the exposed part."]
    for axis, t in e.communication_s.items():
        if t > 0:
            text.append(f"- {axis.upper()}: {t * 1e3:,.1f} ms per step over "
                        f"{e.links.get(axis, '—')} "
                        f"({t / e.step_time_s:.1%} of the step if nothing overlapped)")
    ctx.chart_specs["step_time"] = ("Step-time breakdown", "step_time_chart", (e,))
    return Section(SECTIONS[3], text, time_tables(e), ["step_time"])


def bubble_section(ctx: ReviewContext) -> Section:
    """The schedule's bubble by formula, its share of the whole step, and the timeline chart."""
    e, lay = ctx.e, ctx.inp.layout
    m = e.accumulation
    v = lay.chunks if lay.schedule == "interleaved" else 1
    formula = float(bubble_fraction(lay.pp, m, v))
    source = "Narayanan et al., SC21, Sec. 2.2"
    if lay.schedule == "interleaved":
        form = f"(p−1)/(v·m + p−1) = ({lay.pp}−1)/({v}·{m:g} + {lay.pp}−1)"
    elif lay.schedule in SPLIT_BACKWARD:   # the weight gradient deferred: s idle slots
        slots = float(bubble_slots(lay.pp, schedule=lay.schedule))
        formula = slots / (m + slots) if lay.pp > 1 else 0.0
        form = f"s/(m + s), s = {slots:.3g} idle micro-batch slots"
        source = ("Qi et al. 2023, Sec. 3.1" if lay.schedule == "zb-h1"
                  else "deepseek-ai/DualPipe README; the chart draws 1F1B's order")
    else:
        form = f"(p−1)/(m + p−1) = ({lay.pp}−1)/({m:g} + {lay.pp}−1)"
    text = [f"Schedule {lay.schedule}" + (f" with v = {v} chunks per stage" if v > 1 else "")
            + f", p = {lay.pp} stages, m = {m:g} micro-batches per step.",
            f"Bubble share of the pipeline's time: {form} = **{formula:.2%}** ({source}).",
            f"In the estimate the bubble is {e.breakdown.get('bubble', 0.0) * 1e3:,.1f} ms, "
            f"{e.bubble_fraction:.2%} of the whole step (the step also holds the optimizer and "
            "the exposed gradient reduction)."]
    if lay.pp > 1 and m == int(m):
        shown = int(min(m, 2 * lay.pp))
        ctx.chart_specs["pipeline"] = (f"Pipeline schedule, {shown} of {m:g} micro-batches",
                                       "pipeline_chart",
                                       (pipeline_timeline(lay.pp, shown, v, lay.schedule), lay.pp,
                                        shown, v, lay.schedule))
        text.append(f"The chart draws the schedule for {shown} micro-batches (the real step has "
                    f"{m:g}), forward blocks 1 unit and backward 2 units per stage.")
    return Section(SECTIONS[4], text, [], ["pipeline"] if "pipeline" in ctx.chart_specs else [])


def batch_section(ctx: ReviewContext) -> Section:
    inp, lay, m = ctx.inp, ctx.inp.layout, ctx.e.accumulation
    model_par = lay.tp * lay.pp * lay.cp
    text = [f"B = b × a × DP = {lay.micro_batch} × {m:g} × {lay.dp} = "
            f"{lay.micro_batch * m * lay.dp:g} sequences (stated: {inp.global_batch}).",
            f"Tokens per step: {inp.global_batch:,} × {inp.seq_len:,} = "
            f"{inp.global_batch * inp.seq_len:,}.",
            f"TP × PP × CP = {lay.tp} × {lay.pp} × {lay.cp} = {model_par} GPUs hold one model "
            f"replica and share its micro-batches; they never multiply the batch. "
            f"DP = {inp.gpus} ÷ {model_par} = {lay.dp}."]
    if inp.accumulation is not None:
        text.append(f"The plan states accumulation a = {inp.accumulation}.")
    return Section(SECTIONS[5], text)


def _plan_gpu_mtbf_s(inp: Job) -> Optional[float]:
    """The per-GPU MTBF the plan's checkpoint section states, in seconds (a node's or the job's
    MTBF scaled to one GPU), or None."""
    c = inp.checkpoint
    if c is None:
        return None
    if c.gpu_mtbf_hours is not None:
        return c.gpu_mtbf_hours * 3600
    if c.node_mtbf_hours is not None:
        return c.node_mtbf_hours * 3600 * inp.hardware.scale_up.gpus_per_node
    if c.mtbf_hours is not None:
        return c.mtbf_hours * 3600 * inp.gpus
    return None


def checkpoint_section(ctx: ReviewContext, train_tokens: Optional[float],
                       gpu_hour_cost: Optional[float]) -> tuple[Section, float]:
    """(the section, the goodput at the optimum interval); waste δ/τ + τ/(2M) + R/M."""
    from planner.evaluation.train import DEFAULT_GPU_MTBF_S, resilience_for
    from planner.render.estimate import resilience_table
    inp, e = ctx.inp, ctx.e
    gpu_mtbf = _plan_gpu_mtbf_s(inp)
    mtbf_note = "MTBF from the plan's checkpoint section." if gpu_mtbf else ""
    res = resilience_for(e, inp.hardware, inp.model, gpu_mtbf_s=gpu_mtbf or DEFAULT_GPU_MTBF_S,
                         train_tokens=train_tokens, gpu_hour_cost=gpu_hour_cost)
    o = res.optimum
    text = [f"Checkpoint size {res.contents.total_bytes / 1e12:.2f} TB, blocking write "
            f"δ = {res.write.blocking_s:.1f} s (bound by {res.write.binds}); job MTBF "
            f"M = {res.failures.job_mtbf_s / 3600:.1f} h; restart R = {res.restart.total_s / 60:.1f} min. "
            + mtbf_note,
            f"Wasted fraction δ/τ + τ/(2M) + R/M (Young 1974); Daly's (2006) interval "
            f"τ = {o.interval_s / 60:.1f} min wastes {o.waste_fraction:.2%}: goodput "
            f"**{o.goodput_fraction:.1%}**."]
    ck = checkpoint_figures(inp, ctx.source) if inp.checkpoint is not None else None
    if ck is not None:
        text.append(f"The plan checkpoints every {ck.interval_s / 60:.0f} min: waste {ck.waste:.2%} "
                    f"(optimum {ck.optimum_s / 60:.0f} min, {ck.optimum_waste:.2%}; these two figures use "
                    f"the plan's restart cost, {inp.checkpoint.restart_min:g} min, as `dtplan check` does).")
    taus = np.geomspace(max(o.interval_s / 10, 1.0), o.interval_s * 10, 120)
    waste = np.asarray(ckpt.waste_fraction(taus, res.write.blocking_s, res.failures.job_mtbf_s,
                                           res.restart.total_s))
    ctx.chart_specs["checkpoint"] = ("Checkpoint waste versus interval", "checkpoint_chart",
                                     (taus, waste, o.interval_s, o.waste_fraction,
                                      ck.interval_s if ck else None))
    return Section(SECTIONS[6], text, [resilience_table(res)], ["checkpoint"]), o.goodput_fraction


def train_section(ctx: ReviewContext, train_tokens: Optional[float],
                  gpu_hour_cost: Optional[float], goodput: float) -> tuple[Section, Any]:
    """(the section, api.time_to_train at the goodput or None without a token budget)."""
    from planner.evaluation.train import time_to_train
    e = ctx.e
    if not train_tokens:
        return Section(SECTIONS[7], [
            f"Throughput {e.tokens_per_s:,.0f} tokens/s on {ctx.inp.gpus} GPUs "
            f"({e.energy_per_step_j / e.step_time_s / 1e3:,.0f} kW at board power). Pass "
            "`--train-tokens` (and `--gpu-hour-cost`) for the time, energy and cost to train."]), None
    ideal = time_to_train(e, train_tokens, gpu_hour_cost)
    real = time_to_train(e, train_tokens, gpu_hour_cost, goodput=goodput)
    rows = [["tokens", f"{train_tokens:.4g}"],
            ["time, no failures", f"{ideal.days:.1f} days ({ideal.gpu_hours:,.0f} GPU-hours)"],
            ["time at the goodput", f"{real.days:.1f} days ({real.gpu_hours:,.0f} GPU-hours)"],
            ["energy at board power", f"{real.energy_mwh:,.1f} MWh (GPUs only)"],
            ["cost", f"{real.cost:,.0f} at {gpu_hour_cost:g} per GPU-hour"
             if real.cost is not None else "pass --gpu-hour-cost"]]
    return Section(SECTIONS[7], [real.summary + "."],
                   [Table("Time to train", ["quantity", "value"], rows)]), real


def scaling_counts(gpus: int, node: int) -> list[int]:
    """GPU counts around the chosen one: ¼×, ½×, 1×, 2×, 4× (whole nodes when ≥ a node), up to
    the largest count --gpus allows (validate.MAX_GPUS: a plan of 10^7 GPUs sweeps down only)."""
    from planner.io.validate import MAX_GPUS
    out = set()
    for f in (0.25, 0.5, 1, 2, 4):
        n = max(1, int(round(gpus * f)))
        out.add(max(node, n // node * node) if n >= node else n)
    return sorted(n for n in out if n <= MAX_GPUS)


# The scaling sweep searches the other GPU counts, nearest first, only while the layouts its
# searches have enumerated (the plan's own search included) stay under this budget: a search
# costs ~0.4 µs of CPU per enumerated layout (benchmarks/bounds.py), so the sweep stays within
# a few seconds (one search past the budget at most); a 10^7-GPU plan's own search enumerates
# ~6.7 M and the other counts are left to the `dtplan fit` command the section prints.
SWEEP_MAX_ENUMERATED = 3_000_000


def _row(n: int, best: Any) -> dict:
    from planner.search.fit import short_label
    return {"gpus": n, "fits": best is not None, "searched": True,
            "layout": short_label(best.layout) if best else "nothing fits",
            "tokens_per_s": best.tokens_per_s if best else 0.0,
            "mfu": best.mfu if best else 0.0, "step_time_s": best.step_time_s if best else 0.0}


def _best_at(inp: Job, budget: Any, counts: list[int], own: Any) -> list[dict]:
    """The search's best layout at each GPU count (same model, batch, precision, optimizer):
    the review's own search (`own`, an api.FitResult) at the plan's count, then the others
    nearest first (by the ratio to the plan's count) while the budget lasts; a count not
    searched has a row with "searched" False."""
    from planner.search.fit import fit
    from planner.search.blocks import SpaceTooLarge
    rows = {inp.gpus: _row(inp.gpus, own.layouts[0] if own.layouts else None)}
    spent = own.enumerated
    for n in sorted((c for c in counts if c != inp.gpus),
                    key=lambda c: (abs(np.log(c / inp.gpus)), c)):
        r = None
        if spent < SWEEP_MAX_ENUMERATED:
            try:
                r = fit(inp.model, inp.hardware, n, seq_len=inp.seq_len,
                        global_batch=inp.global_batch, precision=inp.layout.precision,
                        optimizer=inp.layout.optimizer, budget=budget, top=1, suggest=False,
                        explain=False, framework=inp.framework)
            except SpaceTooLarge:  # this count's space alone is over one search's bound
                pass
        if r is None:
            rows[n] = {"gpus": n, "fits": False, "searched": False, "layout": "not searched",
                       "tokens_per_s": 0.0, "mfu": 0.0, "step_time_s": 0.0}
            continue
        spent += r.enumerated
        rows[n] = _row(n, r.layouts[0] if r.layouts else None)
    return [rows[n] for n in counts]


def fit_command(inp: Job, counts: list[int]) -> str:
    """The `dtplan fit` sweep that searches `counts` for this job (the model by preset name when
    it is one; otherwise the plan's model options stand in)."""
    from planner.specs.presets import PRESETS
    name = next((k for k, spec in PRESETS.items() if spec == inp.model), None)
    model = f"--model {name}" if name else "<the plan's model options>"
    lay = inp.layout
    extra = "".join(f" --{k} {x}" for k, x, d in (("precision", lay.precision, "mixed"),
                                                  ("optimizer", lay.optimizer, "adam")) if x != d)
    return (f"dtplan fit {model} --hardware {inp.hardware.name} --gpus "
            f"{','.join(map(str, counts))} --seq-len {inp.seq_len} "
            f"--global-batch {inp.global_batch}{extra}")


def scaling_section(ctx: ReviewContext, scaling: bool) -> Section:
    """The plan's own layout (DP scaled) and the search's best at GPU counts around the plan's."""
    if not scaling:
        return Section(SECTIONS[8], ["Not computed (scaling sweep switched off)."])
    inp = ctx.inp
    counts = scaling_counts(inp.gpus, inp.hardware.scale_up.gpus_per_node)
    srows = _best_at(inp, ctx.inp.budget, counts, ctx.fit_result)
    prows = rs.plan_scaling(inp, ctx.inp.budget, counts)
    ctx.chart_specs["scaling"] = ("Throughput versus GPU count (log-log): the plan, ideal and best",
                                  "scaling_chart",
                                  (prows, srows, inp.gpus, rs.ideal_tokens_per_s(prows, inp.gpus)))
    text = ["The plan's own layout at GPU counts around the chosen one (only DP changes; same model "
            "and global batch), its share of ideal linear scaling from the plan's point, and the "
            "search's best layout at each count."]
    skipped = [r["gpus"] for r in srows if not r["searched"]]
    if skipped:
        text.append(f"The search's best is not computed at {', '.join(f'{n:,}' for n in skipped)} "
                    f"GPUs: the review's searches stop after {SWEEP_MAX_ENUMERATED:,} enumerated "
                    f"layouts (the search of {inp.gpus:,} GPUs alone enumerated "
                    f"{ctx.fit_result.enumerated:,}). `{fit_command(inp, skipped)}` computes them.")
    return Section(SECTIONS[8], text, [rs.scaling_table(prows, srows, inp.gpus)], ["scaling"])


def rejections_section(ctx: ReviewContext) -> Section:
    from planner.render.fit import rejections_table
    res = ctx.fit_result
    table = rejections_table(res)
    return Section(SECTIONS[9], [
        f"The search enumerated {res.enumerated} layouts; {res.valid} pass every "
        "rule. Each rejected one is counted under the first rule it failed."],
        [table] if table is not None else [])


def rules_section(ctx: ReviewContext) -> Section:
    from planner.render.estimate import rules_table
    if "plan" in ctx.source:
        rt = Table("Rules", ["rule", "status", "measured", "limit", "key"],
                   [[r.name, r.status, r.measured, r.limit, r.key or ""]
                    for r in ctx.outcome.rules])
    else:
        rt = rules_table(ctx.e)
    return Section(SECTIONS[10], [
        "Every rule the layout is checked against (`dtplan check` gives the same verdict)."], [rt])
