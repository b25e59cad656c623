"""What the design review leads with: the decision, the plan beside its alternatives, the plan's
own scaling and the step-time/memory trade-off of every valid layout.

Numbers come from the library (``evaluate.estimate``, ``api.fit``, ``search.search``,
``api.time_to_train``); this module only selects and compares them:
- gap to the best alternative = plan step time ÷ best valid layout's step time − 1 (same model,
  GPUs and global batch, so tokens per step are equal and the ratio is the throughput ratio);
- the plan's scaling keeps its TP, PP, CP, EP, ZeRO, micro-batch and recompute and changes
  only DP (n ÷ (TP·PP·CP)) at the same global batch; the ideal line is linear in GPUs through
  the plan's own point;
- the Pareto front: valid layouts that no other valid layout beats on both step time and peak
  memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from planner.evaluation.error_band import band_for, band_note
from planner.render.document import Table
from planner.specs.framework import DEFAULT_FRAMEWORK
from planner.search.fit import short_label
from planner.io.units import count, gb, pct

TIGHT_HEADROOM = 0.10     # risk: less than 10 % of usable memory free (allocator spikes, drift)
HIGH_BUBBLE = 0.10        # risk: more than 10 % of the step idle in the pipeline
LOW_GOODPUT = 0.95        # risk: checkpoints and failures waste more than 5 % of the run


@dataclass
class Summary:
    """The review's first screen: one row per question a reviewer asks first."""

    rows: list[list[str]]
    decision: str
    gap_text: str
    gap_fraction: Optional[float]
    risks: list[str] = field(default_factory=list)

    def table(self) -> Table:
        return Table("Executive summary", ["question", "answer"], self.rows)


def plan_row(e: Any, model: Any = None, hardware: Any = None) -> Any:
    """The plan's own figures in the shape of a ranked layout (rank 0); with the model and
    hardware, its checkpoint interval and goodput at the failure rate the search's rows use."""
    from planner.search.fit import RankedLayout
    from planner.evaluation.train import resilience_for
    row = RankedLayout(rank=0, layout=e.layout, peak_memory_bytes=e.peak_memory_bytes,
                       headroom_bytes=e.headroom_bytes, step_time_s=e.step_time_s,
                       tokens_per_s=e.tokens_per_s, mfu=e.mfu, bubble_fraction=e.bubble_fraction,
                       collective_fraction=e.collective_fraction, accumulation=e.accumulation)
    if model is not None and hardware is not None:
        o = resilience_for(e, hardware, model).optimum
        row = replace(row, checkpoint_interval_s=o.interval_s, goodput=o.goodput_fraction)
    return row


def best_alternative(e: Any, fit_result: Any) -> tuple[Optional[Any], Optional[float]]:
    """(the fastest valid layout other than the plan, plan step ÷ its step − 1)."""
    others = [x for x in fit_result.layouts if x.layout != e.layout]
    if not fit_result.layouts:
        return None, None
    best = fit_result.layouts[0]
    if best.layout == e.layout:            # the plan is the search's winner
        return (others[0] if others else None), (e.step_time_s / others[0].step_time_s - 1
                                                  if others else None)
    return best, e.step_time_s / best.step_time_s - 1


def alternatives_table(e: Any, fit_result: Any, model: Any = None, hardware: Any = None, *,
                       gib: bool = False) -> Table:
    """The plan as row 0, then the search's top layouts, each with its step time against the plan."""
    from planner.render.fit import LEGEND, layouts_table
    rows_in = [plan_row(e, model, hardware)] + [x for x in fit_result.layouts if x.layout != e.layout]
    cols, rows, _ = layouts_table(rows_in, gib=gib, wide=True)
    rows[0][0] = "plan"
    cols.append("vs plan")
    for x, row in zip(rows_in, rows):
        row.append("—" if x.rank == 0 else f"{x.step_time_s / e.step_time_s - 1:+.1%}")
    return Table(f"The plan (row 0) and the search's top {len(rows_in) - 1} of {fit_result.valid} "
                 "valid layouts", cols, rows, legend=LEGEND.format(unit="GiB" if gib else "GB"))


def _band(inp: Any) -> tuple[Optional[float], str]:
    """(the calibrated band of the plan's regime or None, the sentence estimate prints about the
    band: the regime's residual RMS, or the profile's wide band with its reason)."""
    fw = inp.framework.name if inp.framework is not None else DEFAULT_FRAMEWORK
    moe = inp.model.is_moe
    return (band_for(inp.hardware, fw, inp.layout, moe),
            band_note(inp.hardware, fw, inp.layout, moe).rstrip("."))


def risks(inp: Any, e: Any, failed: list[str], goodput: Optional[float]) -> list[str]:
    out = [f"fails {', '.join(failed)}"] if failed else []
    if e.usable_memory_bytes > 0 and e.headroom_bytes < TIGHT_HEADROOM * e.usable_memory_bytes:
        out.append(f"tight memory: {gb(e.headroom_bytes)} GB free of {gb(e.usable_memory_bytes)} GB "
                   f"usable ({e.headroom_bytes / e.usable_memory_bytes:.0%}, under "
                   f"{TIGHT_HEADROOM:.0%})")
    band, note = _band(inp)
    if band is None:   # the wide band: its reason, and what to do about it
        out.append(f"{note[0].lower()}{note[1:]}; measure the first steps")
    if inp.model.inferred:
        out.append("model shape inferred from a parameter count, not a real architecture")
    if e.bubble_fraction > HIGH_BUBBLE:
        out.append(f"pipeline bubble {pct(e.bubble_fraction)} of the step")
    if goodput is not None and goodput < LOW_GOODPUT:
        out.append(f"goodput {pct(goodput)}: checkpoints and failures waste over "
                   f"{1 - LOW_GOODPUT:.0%}")
    return out


def summarize(inp: Any, e: Any, fit_result: Any, *, failed: list[str], goodput: Optional[float],
              train: Optional[Any] = None, gpu_hour_cost: Optional[float] = None) -> Summary:
    """The executive summary: decision, step time, MFU, time and cost to train, gap, risks."""
    decision = ("PASS: the plan fits and passes every rule" if not failed else
                f"FAIL: the plan fails {', '.join(failed)}")
    best, gap = best_alternative(e, fit_result)
    if best is None:
        gap_text = "no other valid layout of these GPUs to compare with"
    elif gap is not None and gap > 0.005:
        gap_text = (f"the plan is {gap:.0%} slower than the best alternative, "
                    f"{short_label(best.layout)} at {best.step_time_s:.2f} s/step")
    elif gap is not None and gap < -0.005:
        gap_text = (f"the plan is the fastest valid layout, {-gap:.0%} ahead of the next, "
                    f"{short_label(best.layout)} at {best.step_time_s:.2f} s/step")
    else:
        gap_text = (f"the plan is as fast as the best alternative ({short_label(best.layout)}, "
                    f"{best.step_time_s:.2f} s/step)")
    band, _ = _band(inp)
    shown = inp.hardware.efficiency.uncalibrated_band if band is None else band
    mfu = f"{pct(e.mfu)} ± {shown:g}%" + (" (calibrated band of this regime)" if band is not None
                                          else " (wide band: no published run of this regime)")
    if train is not None:
        cost = (f", cost {train.cost:,.0f} at {gpu_hour_cost:g} per GPU-hour" if train.cost is not None
                else " (pass --gpu-hour-cost for the cost)")
        to_train = (f"{train.days:.1f} days for {count(train.train_tokens)} tokens at "
                    f"{pct(goodput or 1.0)} goodput, {train.gpu_hours:,.0f} GPU-hours{cost}")
    else:
        to_train = "pass --train-tokens (and --gpu-hour-cost) for the time and cost to train"
    found = risks(inp, e, failed, goodput)
    rows = [["decision", decision],
            ["step time", f"{e.step_time_s:.2f} s per step, {e.tokens_per_s:,.0f} tokens/s "
                          f"(± {shown:g}%) on "
                          f"{e.gpus} GPUs"],
            ["MFU", mfu], ["time and cost to train", to_train],
            ["gap to the best alternative", gap_text],
            ["risks", "; ".join(found) if found else "none flagged"]]
    return Summary(rows=rows, decision=decision, gap_text=gap_text, gap_fraction=gap, risks=found)


def plan_scaling(inp: Any, budget: Any, counts: list[int]) -> list[dict]:
    """The plan's own layout at other GPU counts: only DP changes, the global batch holds."""
    from planner.evaluation.estimate import estimate
    lay = inp.layout
    replica = lay.tp * lay.pp * lay.cp
    rows = []
    for n in counts:
        dp = n // replica
        row = {"gpus": n, "dp": dp, "fits": False, "tokens_per_s": 0.0, "step_time_s": 0.0,
               "mfu": 0.0, "why": ""}
        if dp < 1 or dp * replica != n:
            row["why"] = f"{n} GPUs is not a multiple of TP×PP×CP = {replica}"
        elif inp.global_batch % (lay.micro_batch * dp):
            row["why"] = f"batch {inp.global_batch} is not divisible by mb × DP = {lay.micro_batch * dp}"
        else:
            e = estimate(inp.model, inp.hardware, n, replace(lay, dp=dp),
                         seq_len=inp.seq_len, global_batch=inp.global_batch, budget=budget,
                         framework=inp.framework)
            failed = [r.name for r in e.rules if r.status == "fail"]
            row.update(fits=not failed, tokens_per_s=e.tokens_per_s, step_time_s=e.step_time_s,
                       mfu=e.mfu, why=", ".join(failed))
        rows.append(row)
    return rows


def ideal_tokens_per_s(plan_rows: list[dict], plan_gpus: int) -> list[Optional[float]]:
    """Linear scaling through the plan's own point, per row: tokens/s(plan) × n ÷ n_plan (all
    None when the plan's own GPU count does not fit)."""
    base = next((r for r in plan_rows if r["gpus"] == plan_gpus and r["fits"]), None)
    return [base["tokens_per_s"] * r["gpus"] / plan_gpus if base else None for r in plan_rows]


def scaling_table(plan_rows: list[dict], best_rows: list[dict], plan_gpus: int) -> Table:
    """Per GPU count: the plan's layout (DP scaled) against ideal linear scaling, and the search's
    best layout at that count."""
    out = []
    for p, b, ideal in zip(plan_rows, best_rows, ideal_tokens_per_s(plan_rows, plan_gpus)):
        out.append([str(p["gpus"]), str(p["dp"]) if p["dp"] else "",
                    f"{p['step_time_s']:.3f}" if p["fits"] else p["why"] or "does not fit",
                    f"{p['tokens_per_s']:,.0f}" if p["fits"] else "",
                    f"{p['tokens_per_s'] / ideal:.0%}" if p["fits"] and ideal else "",
                    b["layout"], f"{b['tokens_per_s']:,.0f}" if b["fits"] else ""])
    return Table("The plan's layout at other GPU counts (DP scaled, same global batch)",
                 ["GPUs", "DP", "plan step s", "plan tokens/s", "of ideal", "best layout there",
                  "best tokens/s"], out)


def pareto(res: Any) -> dict[str, Any]:
    """Every valid layout's (peak memory, step time), the Pareto front's indices, and the
    search's winner, for the review's trade-off chart; `res` is the review's search of the same
    GPUs and batch (search.SearchResult, kept by its FitResult)."""
    idx = res.order
    mem = np.asarray(res.results.memory.peak)[idx]
    step = np.asarray(res.results.time.step)[idx]
    order = np.lexsort((mem, step))           # by step time, then memory
    front, best_mem = [], np.inf
    for i in order:
        if mem[i] < best_mem:
            front.append(int(i))
            best_mem = mem[i]
    return {"peak_memory_bytes": mem, "step_time_s": step, "front": front}
