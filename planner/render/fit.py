"""Documents for `dtplan fit`: the ranked layouts, the winner's breakdown, the rejections."""

from __future__ import annotations

from planner.evaluation.train import DEFAULT_GPU_MTBF_S

from planner.advice.batch import BatchAdvice
from planner.advice.shrink import ShrinkResult
from planner.search.fit import FitResult, RankedLayout
from planner.specs.knobs import Layout
from planner.render.document import Document, Table
from planner.render.json_out import layout_text
from planner.render.estimate import batch_advice_note, memory_tables, time_tables
from planner.io.units import count, gb, hours, pct
from planner.specs.records import dump


def _rc(lay: Layout) -> str:
    if lay.recompute == "full" and lay.recompute_layers is not None:
        return f"full×{lay.recompute_layers}"
    return lay.recompute


def _zero(lay: Layout) -> str:
    return (f"{lay.zero}" + (f"h{lay.shard_group}" if lay.shard_group else "")
            + ("+off" if lay.offload_optimizer != "none" or lay.offload_params != "none" else ""))


def _sched(lay: Layout) -> str:
    if lay.schedule == "interleaved":
        return f"int v{lay.chunks}"
    return lay.schedule


# (header, how to read it from a ranked layout, shown without --wide, dropped into the notes when
# the same in every row). The default set fits 80 columns; tokens/s is step time in other units
# (the batch is the same in every row), so it is --wide only.
_COLUMNS = (
    ("#", lambda x, gib: str(x.rank), True, False),
    ("TP", lambda x, gib: str(x.layout.tp), True, False),
    ("PP", lambda x, gib: str(x.layout.pp), True, False),
    ("DP", lambda x, gib: str(x.layout.dp), True, False),
    ("CP", lambda x, gib: str(x.layout.cp), True, True),
    ("EP", lambda x, gib: str(x.layout.ep), True, True),
    ("ZeRO", lambda x, gib: _zero(x.layout), True, False),
    ("mb", lambda x, gib: str(x.layout.micro_batch), True, False),
    ("acc", lambda x, gib: f"{x.accumulation:g}", True, False),
    ("sched", lambda x, gib: _sched(x.layout), True, True),
    ("recomp", lambda x, gib: _rc(x.layout), True, False),
    ("peak", lambda x, gib: gb(x.peak_memory_bytes, 1, gib=gib), True, False),
    ("free", lambda x, gib: gb(x.headroom_bytes, 1, gib=gib) + ("!" if x.short_of_headroom else ""),
     True, False),
    ("step s", lambda x, gib: f"{x.step_time_s:.3f}", True, False),
    ("tok/s", lambda x, gib: count(x.tokens_per_s), False, False),
    # the band is the regime's (framework / GPU generation), one for every row: in the notes once
    ("MFU", lambda x, gib: pct(x.mfu), True, False),
    ("bubble", lambda x, gib: pct(x.bubble_fraction), True, True),
    ("comm", lambda x, gib: pct(x.collective_fraction), True, False),
    ("ckpt", lambda x, gib: f"{x.checkpoint_interval_s / 60:.0f}m" if x.checkpoint_interval_s else "",
     False, True),
    ("goodput", lambda x, gib: pct(x.goodput) if x.goodput is not None else "", False, True),
)
_CONSTANT_NAMES = {"CP": "CP", "EP": "EP", "sched": "schedule", "bubble": "bubble",
                   "ckpt": "checkpoint every", "goodput": "goodput"}


def layouts_table(layouts: list[RankedLayout], *, gib: bool = False, wide: bool = False) -> tuple[list[str], list[list[str]], list[str]]:
    """(columns, rows, notes): the ranked layouts. Without `wide`, the columns that are the same
    in every row move into one note, so the table fits an 80-column terminal."""
    cells = {name: [get(x, gib) for x in layouts] for name, get, _, _ in _COLUMNS}
    keep, constant = [], []
    for name, _, default, droppable in _COLUMNS:
        same = len(set(cells[name])) == 1 and len(layouts) > 1
        if not wide and droppable and (same or (name in ("CP", "EP") and set(cells[name]) == {"1"})):
            if cells[name] and cells[name][0]:
                constant.append(f"{_CONSTANT_NAMES[name]} {cells[name][0]}")
            continue
        if wide or default:
            keep.append(name)
    rows = [[cells[name][i] for name in keep] for i in range(len(layouts))]
    notes = ["Same in every row above: " + ", ".join(constant) + "."] if constant else []
    return keep, rows, notes


LEGEND = ("ZeRO 3h8: stage 3 sharded in groups of 8, +off: CPU offload · mb micro-batch, acc "
          "accumulation steps · int v3: interleaved 1F1B, 3 chunks · full×19: full recompute of "
          "19 layers per stage · peak, free: {unit} per GPU · bubble, comm: share of the step · "
          "--wide shows every column")


def rejections_table(r: FitResult) -> Table | None:
    """The rejected candidates by the first rule each failed, with the closest miss (None when
    the search rejected none)."""
    rows = [[j.rule, str(j.count), (j.closest or "") + (
        f": {j.measured}, allowed {j.limit}" if j.measured and j.rule != "fits-in-memory" else "")]
        for j in r.rejections]
    if not rows:
        return None
    return Table(f"Rejected: {r.rejected} candidates, by the first rule each failed",
                 ["rule", "count", "closest miss"], rows)


def fit_doc(r: FitResult, *, gib: bool = False, wide: bool = False,
            batch_advice: BatchAdvice | None = None) -> Document:
    """`batch_advice` (planner.advice.batch.BatchAdvice or None): one note and the JSON's
    `batch_advice` (null when a bigger batch would not clear the threshold)."""
    cols, rows, const_notes = layouts_table(r.layouts, gib=gib, wide=wide)
    solved = f" and {r.solved} solved for partial recompute" if r.solved else ""
    tables = [Table(f"Top {len(r.layouts)} of {r.valid} valid layouts{solved} (of {r.enumerated} "
                    "enumerated), " + ranking_text(r), cols, rows,
                    legend=LEGEND.format(unit="GiB" if gib else "GB") if rows else None)]
    if r.best is not None:
        tables += [Table(f"Winner: memory per stage — {t.title}", t.columns, t.rows, t.bars)
                   for t in memory_tables(r.best, gib)]
        tables += time_tables(r.best)[:2]
    rejections = rejections_table(r)
    if rejections is not None:
        tables.append(rejections)
    if r.layouts:
        w = r.layouts[0]
        edge = " AT THE EDGE (every layout is short of the headroom rule)"
        verdict = ("FITS" + (edge if w.short_of_headroom else "")
                   + f": best layout TP {w.layout.tp} × PP {w.layout.pp} × DP {w.layout.dp}"
                   + (f" × CP {w.layout.cp}" if w.layout.cp > 1 else "")
                   + f", ZeRO-{w.layout.zero}, micro-batch {w.layout.micro_batch}: "
                   f"{w.step_time_s:.2f} s/step, {w.tokens_per_s:,.0f} tokens/s, MFU {pct(w.mfu)}"
                   + (f" ± {w.error_band_pct:g}%" if w.error_band_pct else ""))
    else:
        verdict = "DOES NOT FIT: no layout of " f"{r.gpus} GPUs passes every rule" + why_none(r)
    notes = []
    if r.model_inferred:
        notes.append("MODEL SHAPE INFERRED from the parameter count — " + r.model_description)
    else:
        notes.append(r.model_description)
    notes += const_notes
    notes += [f"Batch: {r.global_batch} sequences × {r.seq_len} tokens = "
              f"{count(r.tokens_per_step)} tokens per step",
              "Estimates, not promises: margins, context and fragmentation are budgeted explicitly "
              "(dtplan estimate shows each); measure the first steps.",
              f"Checkpoint interval (Daly) and goodput assume a per-GPU MTBF of "
              f"{hours(DEFAULT_GPU_MTBF_S)} (Llama 3's 419 interruptions in 54 days on 16,384 GPUs) "
              "and the profile's storage bandwidth; "
              "`dtplan checkpoint` takes your own figures."]
    if r.best is not None:   # the winner's framework line and its band note
        notes += [n for n in r.best.notes if n.startswith(("Framework ", "Error band", "Wide band",
                                                         "Fine-tuning ", "Packed documents"))]
    if r.layouts:
        notes.append(headroom_note(r))
    notes += ([r.empty_space] if r.empty_space else []) + [f"What would fit: {s}" for s in r.suggestions]
    if r.enumerated and not r.offload_searched and \
            not any("--allow-offload" in s for s in r.suggestions):
        notes.append("CPU offload (ZeRO-Offload of the optimizer or parameters) is outside this "
                     "search; --allow-offload adds it.")
    if batch_advice is not None:
        notes.append(batch_advice_note(batch_advice, layout_text(dump(batch_advice.layout))))
    data = dump(r)
    data["batch_advice"] = dump(batch_advice) if batch_advice is not None else None
    data["ok"] = r.fits
    data["rejected"] = r.rejected
    return Document(command="fit", title=f"{r.model} on {r.gpus} × {r.hardware}", tables=tables,
                    notes=notes, verdict=verdict, ok=r.fits, data=data)


def why_none(r: FitResult) -> str:
    """When nothing fits: the rule that rejected the most layouts, with its example's value and
    what the rule allows (or why nothing was enumerated)."""
    if not r.rejections:
        return f" — {r.empty_space[:1].lower()}{r.empty_space[1:]}" if r.empty_space else ""
    top = max(r.rejections, key=lambda j: j.count)
    share = "all" if top.count == r.rejected else f"{top.count:,} of {r.rejected:,}"
    value = f" (e.g. {top.measured}; allowed: {top.limit})" if top.measured else ""
    return f" — {top.rule} rejected {share}: {top.message}{value}"


def ranking_text(r: FitResult) -> str:
    """How the table is ordered, as its title says it: the objective; for time and cost with an
    ordering tolerance on #1, that the layouts within it of #1 are ordered by headroom; the
    layouts short of the headroom rule last."""
    text = {"time": "ranked by step time", "cost": "ranked by GPU cost",
            "headroom": "ranked by headroom", "gpus": "ranked by GPU count, then step time"}.get(
        r.objective, f"ranked by {r.objective}")
    # the search orders near-ties by headroom within the regime's in-sample spread only (the
    # printed band is on absolute figures, whose offset the layouts of one regime share)
    band = r.near_tie_pct
    if band and r.objective in ("time", "cost") and len(r.layouts) > 1:
        text += f"; within ±{band:g}% of #1 (its regime's in-sample spread) by headroom"
    if r.short_of_headroom:
        text += "; short of the headroom rule (!) last"
    return text


def headroom_note(r: FitResult) -> str:
    """The headroom rule the ranking applied and what it set aside."""
    rule = " or ".join(([f"{r.min_headroom_fraction:.1%} of its peak"] if r.min_headroom_fraction else [])
                       + ([f"{r.min_headroom_bytes / 1e9:g} GB"] if r.min_headroom_bytes else []))
    if not rule:
        return "Headroom rule: none (--min-headroom-gb 0): layouts ranked by the objective alone."
    why = ("the memory model's largest under-estimate of a measured peak"
           if r.min_headroom_fraction else "--min-headroom-gb")
    both = "; the larger applies" if r.min_headroom_fraction and r.min_headroom_bytes else ""
    text = (f"Headroom rule: the #1 leaves at least {rule} free ({why}{both}), beyond the "
            "safety margin; --min-headroom-gb sets a floor in GB instead.")
    if r.short_of_headroom:
        text += (f" {r.short_of_headroom} layout(s) of the front short of it: flagged ! and ranked "
                 "after the rest (within the model's own error of an OOM).")
    return text


def sweep_doc(results: list[FitResult]) -> Document:
    """`--gpus 64..1024`: the best layout at each GPU count, to answer "how many do I need"."""
    rows, data = [], []
    for r in results:
        if r.layouts:
            w = r.layouts[0]
            lay = w.layout
            rows.append([str(r.gpus), f"TP{lay.tp} PP{lay.pp} DP{lay.dp}" + (f" CP{lay.cp}" if lay.cp > 1 else "")
                         + (f" EP{lay.ep}" if lay.ep > 1 else "") + f" ZeRO-{lay.zero} mb{lay.micro_batch} "
                         + _rc(lay), f"{w.step_time_s:.3f}", f"{w.tokens_per_s:,.0f}",
                         f"{r.per_gpu(w.tokens_per_s):,.0f}", pct(w.mfu), gb(w.peak_memory_bytes, 1)])
        else:
            rows.append([str(r.gpus), "nothing fits", "", "", "", "", ""])
        data.append(dump(r, exclude={"best"}))
    fitting = [r.gpus for r in results if r.layouts]
    verdict = (f"Smallest GPU count tried that fits: {min(fitting)}" if fitting
               else "No GPU count tried fits")
    first = results[0]
    notes = [("MODEL SHAPE INFERRED — " if first.model_inferred else "") + first.model_description]
    return Document(command="fit", title=f"{first.model} on {first.hardware}: best layout per GPU count",
                    tables=[Table("Best layout by GPU count", ["GPUs", "layout", "step s", "tokens/s",
                                                               "tokens/s/GPU", "MFU", "peak GB"], rows)],
                    verdict=verdict, ok=bool(fitting), notes=notes, data={"sweep": data, "ok": bool(fitting)},
                    mode="sweep")


def _lay_short(lay: Layout) -> str:
    return (f"TP{lay.tp} PP{lay.pp} DP{lay.dp}" + (f" CP{lay.cp}" if lay.cp > 1 else "")
            + f" ZeRO-{lay.zero} mb{lay.micro_batch} " + _rc(lay))


def _shrink_verdict(r: ShrinkResult) -> str:
    """The recommendation (fastest within the batch tolerance) and, when it changes the batch,
    the exact-batch alternative with what it costs."""
    rec, exact = r.recommended, r.exact_batch
    if rec is None:
        return ("Nothing fits on the smaller cluster" if exact is None else
                f"Keep the batch: {_lay_short(exact.layout)}, {exact.step_time_s:.2f} s/step")
    change = r.batch_change(rec)
    text = (f"Recommended: {_lay_short(rec.layout)}, {rec.step_time_s:.2f} s/step "
            f"({rec.resume.split(';')[0]}), "
            + (f"global batch {r.global_batch} → {rec.global_batch} ({change:+.1%}, within the "
               f"{r.batch_tolerance:.0%} tolerance)" if rec.global_batch != r.global_batch
               else f"global batch kept at {r.global_batch}"))
    if exact is not None and exact is not rec and exact.layout != rec.layout:
        text += (f"; keeping the batch exactly: {_lay_short(exact.layout)}, "
                 f"{exact.step_time_s:.2f} s/step ({r.exact_batch_slowdown:+.0%})")
    return text


def shrink_doc(r: ShrinkResult) -> Document:
    """`fit --from-plan`: the running plan on fewer GPUs (planner.advice.shrink.ShrinkResult)."""
    rows = []
    opts = [("keep split", o) for o in r.keep_split] + [(f"#{i}", o) for i, o in enumerate(r.options, 1)]
    for label, o in opts:
        mark = " *" if r.recommended is not None and o is r.recommended else ""
        rows.append([label + mark, _lay_short(o.layout), str(o.global_batch or ""),
                     f"{o.accumulation:g}" if o.accumulation else "",
                     f"{o.step_time_s:.3f}" if o.step_time_s else "",
                     count(o.tokens_per_s) if o.tokens_per_s else "", o.resume])
    ok = r.recommended is not None or r.exact_batch is not None
    notes = [f"Shrinking from {r.from_gpus} to {r.to_gpus} GPUs: B = b × a × DP, so fewer DP ranks "
             f"means more accumulation, or a batch the new DP degrees divide; the recommendation "
             f"(*) is the fastest option within {r.batch_tolerance:.0%} of the plan's batch of "
             f"{r.global_batch} (--batch-tolerance).",
             "ZeRO/FSDP shards re-partition on load; a TP, PP, CP or EP change re-slices weights and "
             "needs an offline conversion of the checkpoint."]
    if not any(o.global_batch == r.global_batch and o.layout.world == r.to_gpus for o in r.options):
        notes.append(f"No layout uses all {r.to_gpus} GPUs with the global batch of "
                     f"{r.global_batch}: no data-parallel degree of {r.to_gpus} GPUs divides it.")
    return Document(command="fit", title=f"{r.fit.model}: from {r.from_gpus} to {r.to_gpus} GPUs",
                    tables=[Table("Options on the smaller cluster", ["option", "layout", "batch", "acc",
                                                                    "step s", "tok/s", "resume"], rows)],
                    verdict=_shrink_verdict(r), ok=ok, notes=notes,
                    data={**dump(r, exclude={"fit"}), "ok": ok}, mode="shrink")
