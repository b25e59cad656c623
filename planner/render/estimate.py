"""Documents for one layout's estimate: the memory budget per stage and the step-time breakdown."""

from __future__ import annotations

from planner.advice.batch import BatchAdvice
from planner.evaluation.estimate import Estimate
from planner.render.document import Document, Table
from planner.io.units import capacity, count, gb, hours, ms, pct, rule_cells, size
from planner.resilience.planning import ResiliencePlan
from planner.specs.records import dump

ITEM_LABELS = {
    "weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
    "fp8_weight_cache": "fp8 weight cache", "frozen_weights": "frozen base weights",
    "gathered_params": "gathered params (sharded DP)",
    "grad_buffers": "gradient buffers (unsharded / buckets)", "activations": "activations (saved)",
    "working": "working set (recompute, grads)", "loss": "logits + loss",
    "optimizer_temp": "optimizer temporaries",
    "fragmentation": "allocator fragmentation", "cuda_context": "CUDA context",
    "comm_buffers": "NCCL buffers",
}
TIME_LABELS = {
    "compute": "compute (forward + backward)", "recompute": "recomputation",
    "tp_exposed": "TP communication (exposed)", "cp_exposed": "CP ring exchange (exposed)",
    "ep": "EP all-to-all (exposed)", "pp": "PP send/recv (exposed)",
    "zero3_exposed": "ZeRO-3 gathers (exposed)",
    "bubble": "pipeline bubble", "dp_exposed": "DP gradient reduction (exposed)",
    "optimizer": "optimizer step", "offload": "offload transfers",
}


def layout_line(e: Estimate) -> str:
    lay = e.layout
    parts = [f"TP {lay.tp}", f"PP {lay.pp}", f"DP {lay.dp}"]
    parts += [f"CP {lay.cp}"] if lay.cp > 1 else []
    parts += [f"EP {lay.ep}"] if lay.ep > 1 else []
    parts += [f"expert TP {lay.etp} (expert DP {lay.expert_dp})"] if lay.etp is not None else []
    parts += [f"ZeRO-{lay.zero}" + (f" (shard group {lay.shard_group})" if lay.shard_group else ""),
              f"micro-batch {lay.micro_batch}", f"{lay.schedule}" + (f" v={lay.chunks}" if lay.chunks > 1 else ""),
              "SP" if lay.sequence_parallel else "no SP", f"recompute {lay.recompute}"
              + (f" ({lay.recompute_layers} layers/stage)" if lay.recompute_layers is not None else "")]
    if lay.offload_optimizer != "none" or lay.offload_params != "none":
        parts.append(f"offload opt={lay.offload_optimizer} params={lay.offload_params}")
    return ", ".join(parts)


def memory_tables(e: Estimate, gib: bool = False) -> list[Table]:
    unit = "GiB" if gib else "GB"
    names = [s.name for s in e.stages]
    rows, bars = [], []
    for key, label in ITEM_LABELS.items():
        vals = [s.items[key] for s in e.stages]
        if max(vals) <= 0:
            continue
        rows.append([label] + [gb(x, gib=gib) for x in vals])
        bars.append(max(vals))
    rows.append(["max allocated"] + [gb(s.allocated_bytes, gib=gib) for s in e.stages])
    rows.append(["max reserved"] + [gb(s.reserved_bytes, gib=gib) for s in e.stages])
    rows.append(["device total (nvidia-smi)"] + [gb(s.total_bytes, gib=gib) for s in e.stages])
    bars += [0.0, 0.0, 0.0]
    return [Table(f"Memory per GPU by pipeline stage ({unit})", ["item"] + names, rows, bars=bars)]


def verdict_line(e: Estimate, gib: bool = False) -> str:
    unit = "GiB" if gib else "GB"
    state = "FITS" if e.fits else "DOES NOT FIT"
    peak = next((s for s in e.stages if s.name == e.peak_stage), e.stages[0])
    where = peak.moment or ("the single stage" if e.peak_stage == "single stage"
                            else f"the {e.peak_stage} stage")
    return (f"{state}: device total {gb(e.peak_memory_bytes, gib=gib)} {unit} at {where} vs "
            f"{gb(e.usable_memory_bytes, gib=gib)} {unit} usable of "
            f"{capacity(e.capacity_bytes, gib=gib)} ({'headroom' if e.fits else 'short by'} "
            f"{gb(abs(e.headroom_bytes), gib=gib)} {unit})" + _past_device(e, unit, gib))


def _past_device(e: Estimate, unit: str, gib: bool) -> str:
    """The demand is reported uncapped; past the device itself the allocator cannot hold it."""
    over = e.past_device_bytes()
    if over <= 0:
        return ""
    return (f"; {gb(over, gib=gib)} {unit} past the device itself: the caching allocator would "
            "free its cached blocks, retry and run out of memory")


def band(e: Estimate) -> str:
    """' ± 6%': the regime's calibrated band, or the profile's wide band where it has no runs."""
    b = e.error_band_pct
    return f" ± {b:g}%" if b is not None else ""


def time_tables(e: Estimate) -> list[Table]:
    rows = [[TIME_LABELS[k], ms(x), pct(e.share_of_step(x))] for k, x in e.breakdown.items() if x > 0]
    rows.append(["step time", ms(e.step_time_s) + band(e), "100.0%"])
    summary = [["tokens/s", f"{e.tokens_per_s:,.0f}{band(e)}"],
               ["tokens/s per GPU", f"{e.tokens_per_s_per_gpu:,.0f}{band(e)}"],
               ["model TFLOP/s per GPU", f"{e.model_tflops_per_gpu:.1f}"],
               ["hardware TFLOP/s per GPU", f"{e.hardware_tflops_per_gpu:.1f}"],
               ["MFU", pct(e.mfu) + band(e)], ["HFU", pct(e.hfu)], ["bubble", pct(e.bubble_fraction)],
               ["collective fraction", pct(e.collective_fraction)],
               ["accumulation steps", f"{e.accumulation:g}"],
               ["energy per step", f"{e.energy_per_step_j / 3.6e6:.2f} kWh"]]
    comm = [[axis.upper(), ms(t), e.links.get(axis, "—")]
            for axis, t in e.communication_s.items() if t > 0]
    tables = [Table("Step time breakdown (ms)", ["component", "time", "share"], rows,
                    bars=[float(r[1].replace(",", "")) for r in rows[:-1]] + [0.0]),
              Table("Throughput", ["metric", "value"], summary)]
    if comm:
        tables.append(Table("Communication per step, before overlap (ms)", ["axis", "time", "link"], comm))
    return tables


def resilience_table(plan: ResiliencePlan, gib: bool = False) -> Table:
    """Checkpoint and failure planning for the layout (planner.resilience.planning.ResiliencePlan)."""
    o, w, f = plan.optimum, plan.write, plan.failures
    rows = [["checkpoint size", f"{size(plan.contents.total_bytes, True, gib=gib)} "
             f"({size(plan.contents.busiest_rank_bytes, gib=gib)} on the busiest rank)"],
            ["write time (blocking)", f"{w.blocking_s:.1f} s"],
            ["job MTBF", f"{f.job_mtbf_s / 3600:.1f} h ({f.failures_per_day:.1f} failures/day; "
             + ("given" if f.component_mtbf_s is None  # a job MTBF: no per-GPU one behind it
                else f"per-GPU MTBF {hours(f.component_mtbf_s)}")
             + ")"],
            ["restart cost", f"{plan.restart.total_s / 60:.1f} min"],
            ["checkpoint every (Daly)", f"{o.interval_s / 60:.1f} min (Young {o.young_interval_s / 60:.1f})"],
            ["wasted: writes + lost work + restarts",
             f"{o.overhead_fraction:.1%} + {o.lost_work_fraction:.1%} + {o.restart_fraction:.1%}"],
            ["goodput", f"{o.goodput_fraction:.1%}"]]
    if plan.training is not None:
        t = plan.training
        rows += [["time to train (no failures)", f"{t.ideal_s / 86400:.1f} days, {t.ideal_gpu_hours:,.0f} GPU-h"],
                 ["time to train (with failures)", f"{t.with_failures_s / 86400:.1f} days, {t.gpu_hours:,.0f} GPU-h"]
]
        if t.cost is not None:
            rows.append(["cost", f"{t.cost:,.0f}"])
    return Table("Checkpoints and failures", ["quantity", "value"], rows)


def rules_table(e: Estimate, gib: bool = False) -> Table:
    return Table("Rules", ["rule", "status", "measured", "limit"],
                 [[r.name, r.status, *rule_cells(r.name, r.measured, r.limit, e.peak_memory_bytes,
                                                 e.usable_memory_bytes, gib)] for r in e.rules])


def estimate_doc(e: Estimate, *, view: str = "estimate", gib: bool = False,
                 extra_notes: list[str] | None = None,
                 batch_advice: BatchAdvice | None = None) -> Document:
    """`batch_advice` (planner.advice.batch.BatchAdvice or None), estimate view only: one note
    and the JSON's `batch_advice` (null when a bigger batch would not clear the threshold)."""
    title = (f"{e.model} on {e.gpus} × {e.hardware}: {layout_line(e)}; seq {e.seq_len}, "
             f"global batch {e.global_batch} ({count(e.tokens_per_step)} tokens)")
    tables = memory_tables(e, gib)
    if view == "estimate":
        tables += time_tables(e)
    tables.append(rules_table(e, gib))
    failed = [r for r in e.rules if r.status == "fail"]
    verdict = verdict_line(e, gib)
    if view == "estimate":
        verdict += (f"; step {e.step_time_s:.3f} s, {e.tokens_per_s:,.0f} tokens/s, "
                    f"MFU {pct(e.mfu)}{band(e)}; framework {e.framework}")
    if failed:
        verdict += "; failing rules: " + ", ".join(r.name for r in failed)
    data = dump(e)
    data["fits"] = e.fits
    data["ok"] = not failed
    notes = list(e.notes) + (extra_notes or [])
    if gib:   # the budget's reserves in GiB too
        from planner.evaluation.estimate import budget_note
        in_gb, in_gib = budget_note(e.budget), budget_note(e.budget, gib=True)
        notes = [in_gib if n == in_gb else n for n in notes]
    if view == "estimate":
        data["batch_advice"] = dump(batch_advice) if batch_advice is not None else None
        notes += [batch_advice_note(batch_advice)] if batch_advice is not None else []
    if e.model_inferred:
        notes.insert(0, "MODEL SHAPE INFERRED from the parameter count: " + e.notes[0])
    data["notes"] = notes
    return Document(command=view, title=title, tables=tables, notes=notes, verdict=verdict,
                    ok=not failed, data=data, mode="budget" if view == "memory" else "estimate")


def batch_advice_note(a: BatchAdvice, layout_text: str = "") -> str:
    """One note line: the bigger batch (planner.advice.batch), its MFU and the caveat."""
    others = "; ".join(f"{k}: MFU {pct(v)}" for k, v in a.tried.items() if k != f"{a.factor}×")
    return (f"Bigger batch: --global-batch {a.global_batch} ({count(a.tokens_per_batch)} tokens, "
            f"{a.factor}× this one) would raise MFU from {pct(a.base_mfu)} to {pct(a.mfu)} "
            f"(+{a.gain_fraction:.0%}, above the {a.threshold_fraction:.0%} threshold) with "
            + (layout_text or "this layout and more accumulation steps")
            + (f" ({others})" if others else "")
            + ". It changes the optimisation: past the critical batch size (McCandlish et al. "
            "2018) more tokens per step buy less loss per token, and dtplan does not judge "
            "convergence.")


__all__ = ["batch_advice_note", "estimate_doc", "layout_line", "memory_tables", "time_tables",
           "verdict_line"]

