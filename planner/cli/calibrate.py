"""`dtplan calibrate`: the step-time model against published Megatron-LM and FSDP runs."""

from __future__ import annotations

from typing import Optional

import typer

from . import EXIT_OK, app
from .options import Format


@app.command("calibrate")
def calibrate_cmd(
    hardware: Optional[str] = typer.Option(None, "--hardware", help="hardware profile "
                                           "(default a100-80g, the published runs' GPU)"),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="table, json or markdown"),
) -> int:
    """Published step time / TFLOP/s vs dtplan's prediction, case by case, with the error."""
    from ..calibration import DEFAULT_PROFILE, calibrate
    from ..specs.hardware import load_profile
    from ..render import Document, Table, emit

    if hardware is not None:
        asked, ran_on = load_profile(hardware), load_profile(DEFAULT_PROFILE)
        if asked.gpu.name != ran_on.gpu.name:
            # Comparing A100 runs with H100 predictions measures nothing: say there is no case.
            emit(Document(command="calibrate", title=f"Calibration against published runs ({asked.name})",
                          verdict=f"No published run on {asked.gpu.name} in dtplan's calibration "
                                  f"set: every case ran on {ran_on.gpu.name} (`dtplan calibrate` "
                                  f"or --hardware {ran_on.name} compares them)",
                          ok=None, data={"hardware": asked.name, "rows": [],
                                         "cases_hardware": ran_on.name}, mode="none"), fmt.value)
            return EXIT_OK
    rep = calibrate(hardware)
    unit = {"iteration_time_s": "s", "hardware_tflops_per_gpu": "TFLOP/s/GPU",
            "tokens_per_s_per_gpu": "tok/s/GPU"}
    # In the terminal the layout goes under the case name, so the table fits 80 columns.
    merged = fmt is Format.table
    rows = [[f"{r.case}\n  {r.layout}" if merged else r.case, unit[r.metric], f"{r.published:.2f}",
             f"{r.predicted:.2f}", f"{r.error_pct:+.1f}%"] + ([] if merged else [r.layout])
            for r in rep.rows]
    consts = ", ".join(f"{k} = {v:g}" for k, v in rep.constants.items())
    notes = rep.notes + [f"Constants ({rep.hardware}): {consts}."] + [
        f"Skipped {k}: {v}" for k, v in rep.skipped.items()]
    verdict = (f"Median |error| {rep.median_abs_error_pct:.1f}%, worst "
               f"{rep.worst_abs_error_pct:.1f}% ({rep.worst_case}); {rep.within_tolerance}/"
               f"{len(rep.rows)} within their bar (Megatron-LM ±{rep.tolerance_pct:g}%, "
               f"FSDP ±{rep.fsdp_tolerance_pct:g}%)")
    doc = Document(command="calibrate",
                   title=f"Calibration against published runs ({rep.hardware})",
                   tables=[Table("Published vs predicted", ["case / layout" if merged else "case", "metric", "published",
                                                            "predicted", "error"] + ([] if merged else ["layout"]),
                                 rows, bars=[abs(r.error_pct) for r in rep.rows])],
                   notes=notes, verdict=verdict,
                   ok=rep.within_tolerance == len(rep.rows), data=rep.model_dump())
    emit(doc, fmt.value)
    return EXIT_OK
