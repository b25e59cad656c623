"""The design-review printout: one layout explained section by section, from a plan or a search.

``review_from_plan(path)`` takes the plan's own layout; ``review_from_fit(...)`` the search's
winner. Either way the same builder assembles the sections (inputs and assumptions, chosen
layout and alternatives, memory, step time and communication, bubble, batch arithmetic,
checkpoints, time and cost to train, rejections, rules) out of numbers the library already
computes: ``estimation.estimate`` (via ``gate.evaluate_inputs``), ``api.fit``,
``api.resilience_for`` and ``api.time_to_train``. Tables come from ``render.estimate`` and
``render.fit``; this module adds no formula of its own except ``pipeline_timeline``, the
schedule drawn in the review, whose bubble agrees with ``engine.pipeline.bubble_fraction``.

Rendering (Markdown, HTML) is ``render.review``; charts are ``render.charts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from .engine import checkpoint as ckpt
from .engine.memory import optimizer_bytes_per_param
from .engine.pipeline import bubble_fraction
from .errors import InputError, validation_message
from .gate import checkpoint_figures, evaluate_inputs, resolve_plan
from .specs.job import Inputs
from .timing import ASSUMPTIONS as TIME_ASSUMPTIONS
from .specs.hardware import HardwareProfile
from .specs.model import ModelSpec
from .render.document import Table
from .render.units import capacity
from .pipeline_schedule import Block, pipeline_timeline, timeline_bubble  # noqa: F401 (re-exported)

# Section titles, top to bottom (tests check every one is present).
SECTIONS = ("Inputs and assumptions", "Chosen layout and alternatives", "Memory budget per stage",
            "Step time and communication", "Pipeline bubble", "Global batch arithmetic",
            "Checkpoint plan", "Time, energy and cost to train", "Throughput versus GPU count",
            "Rejected layouts", "Rules")

CHARTS_HINT = "pip install 'dtplan[report]'"


# ---- the review ------------------------------------------------------------------------------------

@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)       # paragraphs (`code`, **bold** allowed)
    tables: list[Table] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)     # keys into Review.charts


@dataclass
class Review:
    title: str
    source: str
    verdict: str
    ok: bool
    sections: list[Section]
    charts: dict[str, str] = field(default_factory=dict)          # name → SVG text
    chart_titles: dict[str, str] = field(default_factory=dict)
    charts_note: Optional[str] = None
    summary: Optional[Table] = None                                # the executive summary, first


def inputs_from_plan(path: str) -> Inputs:
    from .plan import load_plan
    plan, _text = load_plan(path)
    inp = resolve_plan(plan, Path(path).parent, str(path))
    inp.notes.insert(0, f"plan {plan.name or Path(path).name}")
    return inp


def inputs_from_fit(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
                    global_batch: int, precision: str = "mixed", optimizer: str = "adam"):
    """(Inputs with the search's winner, FitResult); Inputs is None when nothing fits."""
    from .api import fit
    res = fit(model, hardware, gpus, seq_len=seq_len, global_batch=global_batch,
              precision=precision, optimizer=optimizer, top=5)
    if not res.layouts:
        return None, res
    return Inputs(model=model, hardware=hardware, gpus=gpus, layout=res.layouts[0].layout,
                  seq_len=seq_len, global_batch=global_batch), res


def _gbs(x: float) -> str:
    return f"{x / 1e9:,.0f} GB/s"


def _assumption_tables(inp: Inputs, budget) -> list[Table]:
    hw, mod, lay = inp.hardware, inp.model, inp.layout
    g, up, out, host, st = hw.gpu, hw.scale_up, hw.scale_out, hw.host, hw.storage
    peaks = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in g.peak_flops.items())
    hw_rows = [["profile", f"{hw.name}" + (f" ({hw.description})" if hw.description else "")],
               ["GPU", f"{g.name}, {capacity(g.memory_bytes)} HBM at {g.hbm_bytes_per_s / 1e12:.2f} TB/s"],
               ["peak TFLOP/s (dense)", peaks],
               ["matmul ceiling", f"{g.matmul_ceiling_fraction:.0%} of peak"],
               ["board power", f"{g.power_w:,.0f} W"],
               ["NVLink domain", f"{up.gpus_per_domain} GPUs ({up.gpus_per_node} per node), "
                                 f"{_gbs(up.bandwidth_bytes_per_s)} per GPU, latency "
                                 f"{up.latency_s * 1e6:.1f} µs, bus efficiency {up.bus_efficiency:.0%}"],
               ["scale-out network", f"{_gbs(out.nic_bytes_per_s)} per GPU, latency "
                                     f"{out.latency_s * 1e6:.1f} µs, bus efficiency "
                                     f"{out.bus_efficiency:.0%}, oversubscription {out.oversubscription:g}"],
               ["host", f"PCIe {_gbs(host.pcie_bytes_per_s)}, host memory "
                        f"{host.host_memory_bytes / 1e9:,.0f} GB, NVMe {_gbs(host.nvme_bytes_per_s)}"],
               ["storage", f"write {_gbs(st.write_bytes_per_s)}, read {_gbs(st.read_bytes_per_s)}"]]
    w, gr, k = optimizer_bytes_per_param(lay.precision, lay.optimizer)
    recipe = [["precision", lay.precision], ["optimizer", lay.optimizer],
              ["bytes per parameter", f"weights {w:g} + gradients {gr:g} + optimizer (K) {k:g} = "
                                      f"{w + gr + k:g}"]]
    bud = [[name, (f"{getattr(budget, name) / 1e9:g} GB" if name.endswith("bytes")
                   else f"{getattr(budget, name):.0%}"), f.description or ""]
           for name, f in type(budget).model_fields.items()]
    eff_labels = {"matmul_half_hidden": "GEMM half-efficiency width (hidden per TP rank)",
                  "matmul_half_tokens": "GEMM half-efficiency tokens per micro-batch",
                  "memory_passes": "memory-bound passes over activations per layer",
                  "tp_exposed_fraction": "share of TP communication not hidden",
                  "overlap_efficiency": "share of compute that overlapped collectives hide behind"}
    eff = [[eff_labels.get(k_, k_), f"{v:g}" if isinstance(v, float) else str(v)] for k_, v in hw.efficiency.model_dump().items()]
    from .api import DEFAULT_GPU_MTBF_S
    from .resilience import DEFAULT_DETECT_S, DEFAULT_RESCHEDULE_S, DEFAULT_WARMUP_S
    fail = [["per-GPU MTBF", f"{DEFAULT_GPU_MTBF_S / 3600:,.0f} h (Llama 3: 419 interruptions in "
                             "54 days on 16,384 GPUs), unless the plan states one"],
            ["restart: detect + reschedule + warm-up",
             f"{DEFAULT_DETECT_S / 60:g} + {DEFAULT_RESCHEDULE_S / 60:g} + {DEFAULT_WARMUP_S / 60:g} min, "
             "plus reloading the checkpoint"]]
    model_rows = [["model", mod.describe()],
                  ["parameters", f"{mod.param_count():,} ({mod.active_param_count():,} active)"
                   if mod.is_moe else f"{mod.param_count():,}"],
                  ["GPUs", f"{inp.gpus}"], ["sequence length", f"{inp.seq_len:,}"],
                  ["global batch", f"{inp.global_batch:,} sequences "
                                   f"({inp.global_batch * inp.seq_len:,} tokens)"]]
    return [Table("Job", ["input", "value"], model_rows),
            Table("Hardware profile values used", ["quantity", "value"], hw_rows),
            Table("Precision recipe and optimizer", ["quantity", "value"], recipe),
            Table("Memory budget beyond tensors (margins)", ["item", "value", "meaning"], bud),
            Table("Efficiency constants", ["constant", "value"], eff),
            Table("Time-model constants", ["constant", "value", "meaning"],
                  [[name, f"{value:g}", meaning] for name, value, meaning in TIME_ASSUMPTIONS]),
            Table("Failure-rate defaults", ["quantity", "value"], fail)]


def _scaling(inp: Inputs, budget, counts: list[int]) -> list[dict]:
    from .api import fit
    rows = []
    for n in counts:
        r = fit(inp.model, inp.hardware, n, seq_len=inp.seq_len, global_batch=inp.global_batch,
                precision=inp.layout.precision, optimizer=inp.layout.optimizer, budget=budget,
                top=1, suggest=False)
        best = r.layouts[0] if r.layouts else None
        rows.append({"gpus": n, "fits": best is not None,
                     "layout": _short(best.layout) if best else "nothing fits",
                     "tokens_per_s": best.tokens_per_s if best else 0.0,
                     "mfu": best.mfu if best else 0.0,
                     "step_time_s": best.step_time_s if best else 0.0})
    return rows


def _short(lay) -> str:
    from .api import _short as short
    return short(lay)


def scaling_counts(gpus: int, node: int) -> list[int]:
    """GPU counts around the chosen one: ¼×, ½×, 1×, 2×, 4× (whole nodes when ≥ a node), up to
    the largest count --gpus allows (validate.MAX_GPUS: a plan of 10^7 GPUs sweeps down only)."""
    from .validate import MAX_GPUS
    out = set()
    for f in (0.25, 0.5, 1, 2, 4):
        n = max(1, int(round(gpus * f)))
        out.add(max(node, n // node * node) if n >= node else n)
    return sorted(n for n in out if n <= MAX_GPUS)


def build_review(inp: Optional[Inputs], *, source: str, fit_result=None,
                 train_tokens: Optional[float] = None, gpu_hour_cost: Optional[float] = None,
                 charts: bool = True, scaling: bool = True) -> Review:
    """Every section of the review for one resolved input (``inp``: the chosen layout)."""
    from .api import fit, resilience_for, time_to_train
    from .specs.budget import MemoryBudget
    from .render.estimate import layout_line, memory_tables, resilience_table, rules_table, \
        time_tables, verdict_line
    from .render.fit import fit_doc
    from . import review_summary as rs

    if inp is None:  # a search where nothing fits: inputs, rejections, what would fit
        return _nothing_fits(fit_result, source)
    try:
        budget = MemoryBudget(**inp.budget)
    except Exception as e:
        raise InputError("budget", validation_message(e)) from None
    outcome = evaluate_inputs(inp, source)
    e = outcome.estimate
    lay, mod, hw = inp.layout, inp.model, inp.hardware
    if fit_result is None:
        fit_result = fit(mod, hw, inp.gpus, seq_len=inp.seq_len, global_batch=inp.global_batch,
                         precision=lay.precision, optimizer=lay.optimizer, budget=budget, top=5)
    fdoc = fit_doc(fit_result)
    failed = [r for r in outcome.rules if r.status == "fail"]
    sections: list[Section] = []
    chart_specs: dict[str, tuple] = {}

    # 1. inputs and assumptions
    text = [f"Source: {source}."]
    if mod.inferred:
        text.insert(0, "**WARNING: MODEL SHAPE INFERRED** from a bare parameter count — the "
                       "layers, hidden size and heads below are a guess (Llama-style dense "
                       "decoder), not your model. Pass `--model`, `--model-config` or the "
                       "architecture flags for real numbers.")
    text += [f"Note: {n}" for n in dict.fromkeys(outcome.notes)]
    sections.append(Section(SECTIONS[0], text, _assumption_tables(inp, budget)))

    # 2. chosen layout and the alternatives
    text = [f"Chosen layout ({'the plan' if 'plan' in source else 'the search winner'}): "
            f"**{layout_line(e)}**.", verdict_line(e)]
    rank = next((x.rank for x in fit_result.layouts if x.layout == lay), None)
    text.append(f"The search ranks this layout #{rank} of {fit_result.valid} valid layouts."
                if rank else f"The search's top {len(fit_result.layouts)} of {fit_result.valid} "
                             "valid layouts (this layout is not among them):")
    sections.append(Section(SECTIONS[1], text, [rs.alternatives_table(e, fit_result)],
                            ["pareto"] if charts else []))
    if charts:
        chart_specs["pareto"] = ("Step time against peak memory: every valid layout, the plan starred",
                                 "pareto_chart", (rs.pareto(inp, budget),
                                                  (e.peak_memory_bytes, e.step_time_s)))

    # 3. memory
    chart_specs["memory"] = ("Memory per GPU by pipeline stage", "memory_chart", (e,))
    sections.append(Section(SECTIONS[2], [
        f"Per-GPU memory item by item on each pipeline stage; peak {e.peak_memory_bytes / 1e9:.2f} GB "
        f"on the {e.peak_stage} stage against {e.usable_memory_bytes / 1e9:.2f} GB usable "
        f"({capacity(e.capacity_bytes)} capacity minus the {budget.margin_fraction:.0%} margin). "
        "Context, buffers and fragmentation are budgeted explicitly; an estimate, not a promise."],
        memory_tables(e), ["memory"]))

    # 4. step time and communication per axis
    tt = time_tables(e)
    text = [f"Step time {e.step_time_s:.3f} s. Communication is listed per axis before overlap "
            "with the link each axis's groups cross (Megatron rank order: TP fastest, then CP, "
            "DP, PP); the breakdown table counts only the exposed part."]
    for axis, t in e.communication_s.items():
        if t > 0:
            text.append(f"- {axis.upper()}: {t * 1e3:,.1f} ms per step over "
                        f"{e.links.get(axis, '—')} "
                        f"({t / e.step_time_s:.1%} of the step if nothing overlapped)")
    chart_specs["step_time"] = ("Step-time breakdown", "step_time_chart", (e,))
    sections.append(Section(SECTIONS[3], text, tt, ["step_time"]))

    # 5. bubble
    m = e.accumulation
    v = lay.chunks if lay.schedule == "interleaved" else 1
    formula = float(bubble_fraction(lay.pp, m, v))
    if lay.schedule == "interleaved":
        form = f"(p−1)/(v·m + p−1) = ({lay.pp}−1)/({v}·{m:g} + {lay.pp}−1)"
    else:
        form = f"(p−1)/(m + p−1) = ({lay.pp}−1)/({m:g} + {lay.pp}−1)"
    text = [f"Schedule {lay.schedule}" + (f" with v = {v} chunks per stage" if v > 1 else "")
            + f", p = {lay.pp} stages, m = {m:g} micro-batches per step.",
            f"Bubble share of the pipeline's time: {form} = **{formula:.2%}** "
            "(Narayanan et al., SC21, Sec. 2.2).",
            f"In the estimate the bubble is {e.breakdown.get('bubble', 0.0) * 1e3:,.1f} ms, "
            f"{e.bubble_fraction:.2%} of the whole step (the step also holds the optimizer and "
            "the exposed gradient reduction)."]
    if lay.pp > 1 and m == int(m):
        shown = int(min(m, 2 * lay.pp))
        chart_specs["pipeline"] = (f"Pipeline schedule, {shown} of {m:g} micro-batches",
                                   "pipeline_chart",
                                   (pipeline_timeline(lay.pp, shown, v, lay.schedule), lay.pp,
                                    shown, v, lay.schedule))
        text.append(f"The chart draws the schedule for {shown} micro-batches (the real step has "
                    f"{m:g}), forward blocks 1 unit and backward 2 units per stage.")
    sections.append(Section(SECTIONS[4], text, [], ["pipeline"] if "pipeline" in chart_specs else []))

    # 6. global batch
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
    sections.append(Section(SECTIONS[5], text))

    # 7. checkpoints
    mtbf_note, gpu_mtbf = "", None
    c = inp.checkpoint
    if c is not None:
        if c.gpu_mtbf_hours is not None:
            gpu_mtbf = c.gpu_mtbf_hours * 3600
        elif c.node_mtbf_hours is not None:
            gpu_mtbf = c.node_mtbf_hours * 3600 * hw.scale_up.gpus_per_node
        elif c.mtbf_hours is not None:
            gpu_mtbf = c.mtbf_hours * 3600 * inp.gpus
        if gpu_mtbf:
            mtbf_note = "MTBF from the plan's checkpoint section."
    kw = {"gpu_mtbf_s": gpu_mtbf} if gpu_mtbf else {}
    res = resilience_for(e, hw, mod, train_tokens=train_tokens, gpu_hour_cost=gpu_hour_cost, **kw)
    o = res.optimum
    text = [f"Checkpoint size {res.contents.total_bytes / 1e12:.2f} TB, blocking write "
            f"δ = {res.write.blocking_s:.1f} s (bound by {res.write.binds}); job MTBF "
            f"M = {res.failures.job_mtbf_s / 3600:.1f} h; restart R = {res.restart.total_s / 60:.1f} min. "
            + mtbf_note,
            f"Wasted fraction δ/τ + τ/(2M) + R/M (Young 1974); Daly's (2006) interval "
            f"τ = {o.interval_s / 60:.1f} min wastes {o.waste_fraction:.2%}: goodput "
            f"**{o.goodput_fraction:.1%}**."]
    ck = checkpoint_figures(inp, source) if c is not None else None
    if ck is not None:
        text.append(f"The plan checkpoints every {ck.interval_s / 60:.0f} min: waste {ck.waste:.2%} "
                    f"(optimum {ck.optimum_s / 60:.0f} min, {ck.optimum_waste:.2%}; these two figures use "
                    f"the plan's restart cost, {c.restart_min:g} min, as `dtplan check` does).")
    taus = np.geomspace(max(o.interval_s / 10, 1.0), o.interval_s * 10, 120)
    waste = np.asarray(ckpt.waste_fraction(taus, res.write.blocking_s, res.failures.job_mtbf_s,
                                           res.restart.total_s))
    chart_specs["checkpoint"] = ("Checkpoint waste versus interval", "checkpoint_chart",
                                 (taus, waste, o.interval_s, o.waste_fraction,
                                  ck.interval_s if ck else None))
    sections.append(Section(SECTIONS[6], text, [resilience_table(res)], ["checkpoint"]))

    # 8. time, energy and cost to train
    if train_tokens:
        ideal = time_to_train(e, train_tokens, gpu_hour_cost)
        real = time_to_train(e, train_tokens, gpu_hour_cost, goodput=o.goodput_fraction)
        rows = [["tokens", f"{train_tokens:.4g}"],
                ["time, no failures", f"{ideal.days:.1f} days ({ideal.gpu_hours:,.0f} GPU-hours)"],
                ["time at the goodput", f"{real.days:.1f} days ({real.gpu_hours:,.0f} GPU-hours)"],
                ["energy at board power", f"{real.energy_mwh:,.1f} MWh (GPUs only)"],
                ["cost", f"{real.cost:,.0f} at {gpu_hour_cost:g} per GPU-hour"
                 if real.cost is not None else "pass --gpu-hour-cost"]]
        sections.append(Section(SECTIONS[7], [real.summary + "."],
                                [Table("Time to train", ["quantity", "value"], rows)]))
    else:
        sections.append(Section(SECTIONS[7], [
            f"Throughput {e.tokens_per_s:,.0f} tokens/s on {inp.gpus} GPUs "
            f"({e.energy_per_step_j / e.step_time_s / 1e3:,.0f} kW at board power). Pass "
            "`--train-tokens` (and `--gpu-hour-cost`) for the time, energy and cost to train."]))

    # 9. throughput versus GPU count
    sections.append(_scaling_section(inp, budget, chart_specs) if scaling else
                    Section(SECTIONS[8], ["Not computed (scaling sweep switched off)."]))

    # 10. rejections
    rej = fdoc.tables[-1]
    sections.append(Section(SECTIONS[9], [
        f"The search enumerated {fit_result.enumerated} layouts; {fit_result.valid} pass every "
        "rule. Each rejected one is counted under the first rule it failed."], [rej]))

    # 11. rules
    if "plan" in source:
        rt = Table("Rules", ["rule", "status", "measured", "limit", "key"],
                   [[r.name, r.status, r.measured, r.limit, r.key or ""] for r in outcome.rules])
    else:
        rt = rules_table(e)
    sections.append(Section(SECTIONS[10], [
        "Every rule the layout is checked against (`dtplan check` gives the same verdict)."], [rt]))

    verdict = ("PASS" if not failed else "FAIL: " + ", ".join(r.name for r in failed)) + \
        f" — {verdict_line(e)}; step {e.step_time_s:.2f} s, {e.tokens_per_s:,.0f} tokens/s, " \
        f"MFU {e.mfu:.1%}"
    title = f"Design review: {mod.name or 'model'} on {inp.gpus} × {hw.name}"
    summary = rs.summarize(inp, e, fit_result, failed=[r.name for r in failed],
                           goodput=o.goodput_fraction, train=real if train_tokens else None,
                           gpu_hour_cost=gpu_hour_cost)
    review = Review(title=title, source=source, verdict=verdict, ok=not failed, sections=sections,
                    summary=summary.table())
    _draw(review, chart_specs, charts)
    return review


def _scaling_section(inp: Inputs, budget, chart_specs: dict) -> Section:
    """The plan's own layout (DP scaled) and the search's best at GPU counts around the plan's."""
    from . import review_summary as rs
    counts = scaling_counts(inp.gpus, inp.hardware.scale_up.gpus_per_node)
    srows = _scaling(inp, budget, counts)
    prows = rs.plan_scaling(inp, budget, counts)
    chart_specs["scaling"] = ("Throughput versus GPU count (log-log): the plan, ideal and best",
                              "scaling_chart", (prows, srows, inp.gpus))
    return Section(SECTIONS[8], [
        "The plan's own layout at GPU counts around the chosen one (only DP changes; same model "
        "and global batch), its share of ideal linear scaling from the plan's point, and the "
        "search's best layout at each count."], [rs.scaling_table(prows, srows, inp.gpus)],
        ["scaling"])


def _draw(review: Review, specs: dict[str, tuple], charts: bool) -> None:
    from .render import charts as ch
    if not charts:
        review.charts_note = "Charts switched off."
        return
    if not ch.available():
        review.charts_note = f"Charts need matplotlib: {CHARTS_HINT}. Tables are complete without them."
        return
    for name, (title, fn, args) in specs.items():
        review.charts[name] = getattr(ch, fn)(*args)
        review.chart_titles[name] = title


def _nothing_fits(res, source: str) -> Review:
    from .render.fit import fit_doc
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
    from .validate import parse_number
    x = parse_number("--train-tokens", text)
    if x <= 0 or math.isnan(x):
        raise InputError("--train-tokens", f"must be > 0, got {text}")
    return x
