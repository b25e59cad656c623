"""`dtplan calibrate`: the step-time model against published Megatron-LM and FSDP runs."""

from __future__ import annotations

from typing import List, Optional

import typer

from . import EXIT_OK, app
from .options import Format


@app.command("calibrate")
def calibrate_cmd(
    hardware: Optional[str] = typer.Option(None, "--hardware", help="hardware profile: "
                                           "a100-80g or h100-96gb-500w keep the rows that ran "
                                           "there; another runs every row on it (default: each "
                                           "row on its own GPU)"),
    framework: Optional[str] = typer.Option(None, "--framework", help="keep the rows that ran "
                                            "on this framework (megatron, torchtitan)"),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="table, json or markdown"),
    evidence: Optional[List[str]] = typer.Option(None, "--from", help="measured files or "
                                                 "directories (nccl-tests, training logs, "
                                                 "profiler traces, memory): print what they say"),
    more: Optional[List[str]] = typer.Argument(None, hidden=True),
    warmup_steps: int = typer.Option(1, "--warmup-steps", min=0, help="drop logged steps up "
                                     "to this step as warm-up"),
    hardware_file: Optional[str] = typer.Option(None, "--hardware-file", help="base profile TOML"),
    plan: Optional[str] = typer.Option(None, "--plan", help="the measured job: plan file or "
                                       "engine config (fits compute speed from its step time)"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="write the calibrated "
                                         "profile TOML here"),
    force: bool = typer.Option(False, "--force", help="overwrite -o"),
) -> int:
    """Published runs vs dtplan's prediction, case by case and by regime (median, worst, the
    error band); --from: your own cluster's measurements, fitted."""
    if evidence or more:
        from .evidence_cmds import calibrate_from
        return calibrate_from(list(evidence or []) + list(more or []), fmt.value, warmup_steps,
                              hardware, hardware_file, plan, output, force, framework)
    from ..calibration import calibrate
    from ..render import Document, Table, emit

    rep = calibrate(hardware, framework)
    unit = {"iteration_time_s": "s", "hardware_tflops_per_gpu": "TFLOP/s/GPU",
            "tokens_per_s_per_gpu": "tok/s/GPU", "peak_memory_gib": "GiB reserved"}
    rows = [[r.case, unit[r.metric], f"{r.published:.2f}", f"{r.predicted:.2f}",
             f"{r.error_pct:+.1f}%", r.layout] for r in rep.rows]
    reg = [[k, str(v.rows), f"{v.median_abs_error_pct:.1f}%", f"{v.worst_abs_error_pct:.1f}%",
            f"± {v.band_pct:g}%"] for k, v in rep.regimes.items()]
    mem = [[r.case, f"{r.published:.1f}", f"{r.predicted:.1f}", f"{r.error_pct:+.1f}%", r.layout]
           for r in rep.memory_rows]
    consts = ", ".join(f"{k} = {v:g}" for k, v in rep.constants.items())
    notes = rep.notes + [f"Constants ({rep.hardware}): {consts}."] + [
        f"Skipped {k}: {v}" for k, v in rep.skipped.items()]
    verdict = (f"Median |error| {rep.median_abs_error_pct:.1f}%, worst "
               f"{rep.worst_abs_error_pct:.1f}% ({rep.worst_case}); {rep.within_tolerance}/"
               f"{len(rep.rows)} within their bar (Megatron-LM ±{rep.tolerance_pct:g}%, "
               f"FSDP ±{rep.fsdp_tolerance_pct:g}%)")
    doc = Document(command="calibrate",
                   title=f"Calibration against published runs ({rep.hardware})",
                   tables=[Table("Published vs predicted", ["case", "metric", "published",
                                                            "predicted", "error", "layout"],
                                 rows, bars=[abs(r.error_pct) for r in rep.rows]),
                           Table("By regime (framework / GPU generation / layout family)",
                                 ["regime", "rows", "median |error|", "worst", "band (RMS)"],
                                 reg)]
                   + ([Table("Memory rows, max reserved (the memory model, issue #13)",
                             ["case", "published GiB", "predicted GiB", "error", "layout"], mem)]
                      if mem else []),
                   notes=notes, verdict=verdict,
                   ok=rep.within_tolerance == len(rep.rows), data=rep.model_dump())
    emit(doc, fmt.value)
    return EXIT_OK
