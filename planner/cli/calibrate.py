"""`dtplan calibrate`: the step-time model against published Megatron-LM and FSDP runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from planner.cli import options as o
from planner.cli.options import Format, option
from planner.cli.root import EXIT_OK, command

if TYPE_CHECKING:
    from planner.calibration.report import CalibrationRow


@command("calibrate", "dtplan calibrate", "dtplan calibrate --format json")
def calibrate_cmd(
    evidence: Annotated[Optional[List[str]], option(
        "--from", help="measured files or directories (nccl-tests, training logs, profiler "
        "traces, memory): print what they say", metavar="N|LIST")] = None,
    more: Annotated[Optional[List[str]], typer.Argument(hidden=True)] = None,
    warmup_steps: o.WarmupSteps = 1,
    plan: o.PlanCalibrate = None,
    hardware: o.HardwareCalibrate = None,
    hardware_file: o.HardwareFile = None,
    framework: o.FrameworkCalibrate = None,
    fmt: o.Fmt = Format.table,
    output: o.OutputCalibrate = None,
    force: o.Force = False,
) -> int:
    """Published runs vs dtplan's prediction, case by case and by regime (median, worst, the
    error band); --from: your own cluster's measurements, fitted."""
    if evidence or more:
        from planner.cli.evidence_cmds import calibrate_from
        return calibrate_from(list(evidence or []) + list(more or []), fmt.value, warmup_steps,
                              hardware, hardware_file, plan, output, force, framework)
    from planner.calibration.published import calibrate
    from planner.errors import InputError
    from planner.render import Document, Table, emit
    from planner.specs.records import dump

    for name, value in (("--hardware-file", hardware_file), ("--plan", plan), ("-o", output)):
        if value is not None:   # was silently ignored (a file never read, a profile never written)
            raise InputError(name, "applies with --from (calibrating to your own measurements); "
                                   "the published-run calibration uses the bundled profiles")

    if hardware is not None and _no_published_run(hardware, fmt.value):
        return EXIT_OK
    rep = calibrate(hardware, framework)
    unit = {"iteration_time_s": "s", "hardware_tflops_per_gpu": "TFLOP/s/GPU",
            "tokens_per_s_per_gpu": "tok/s/GPU", "peak_memory_gib": "GiB reserved"}
    # In the terminal the layout goes on a row of its own under the case name, so the table
    # fits 80 columns (a cell holds one line: renderers print a newline in a cell as "\n").
    merged = fmt is Format.table

    def grid(cells: list[list[str]], layouts: list[str]) -> list[list[str]]:
        if not merged:
            return [c + [lay] for c, lay in zip(cells, layouts)]
        return [row for c, lay in zip(cells, layouts)
                for row in (c, ["  " + lay] + [""] * (len(c) - 1))]
    rows = grid([[r.case, unit[r.metric], f"{r.published:.2f}", f"{r.predicted:.2f}",
                  f"{r.error_pct:+.1f}%"] for r in rep.rows], [r.layout for r in rep.rows])
    bars = [b for r in rep.rows for b in ((abs(r.error_pct), 0.0) if merged else (abs(r.error_pct),))]
    reg = [[k, str(v.rows), f"{v.median_abs_error_pct:.1f}%", f"{v.worst_abs_error_pct:.1f}%",
            f"± {v.band_pct:g}%"] for k, v in rep.regimes.items()]
    mem = grid([[r.case, f"{r.published:.1f}", f"{r.predicted:.1f}", f"{r.error_pct:+.1f}%"]
                for r in rep.memory_rows], [r.layout for r in rep.memory_rows])
    first = ["case / layout" if merged else "case"]
    last = [] if merged else ["layout"]
    consts = ", ".join(f"{k} = {v:g}" for k, v in rep.constants.items())
    notes = rep.notes + [f"Constants ({rep.hardware}): {consts}."] + [
        f"Skipped {k}: {v}" for k, v in rep.skipped.items()]
    verdict = (f"Median |error| {rep.median_abs_error_pct:.1f}%, worst "
               f"{rep.worst_abs_error_pct:.1f}% ({rep.worst_case}); {rep.within_tolerance}/"
               f"{len(rep.rows)} within their bar (Megatron-LM ±{rep.tolerance_pct:g}%, "
               f"FSDP ±{rep.fsdp_tolerance_pct:g}%)")
    doc = Document(command="calibrate",
                   title=f"Calibration against published runs ({rep.hardware})",
                   tables=[Table("Published vs predicted", first + ["metric", "published",
                                                            "predicted", "error"] + last,
                                 rows, bars=bars),
                           Table("By regime (framework / GPU generation / layout family)",
                                 ["regime", "rows", "median |error|", "worst", "band (RMS)"],
                                 reg)]
                   + ([Table("Memory rows, max reserved",
                             first + ["published GiB", "predicted GiB", "error"] + last, mem)]
                      if mem else []),
                   notes=notes, verdict=verdict,
                   ok=rep.within_tolerance == len(rep.rows), data=dump(rep))
    emit(doc, fmt.value)
    return EXIT_OK


def _no_published_run(hardware: str, fmt: str) -> bool:
    """Say so and return True when no published case ran on this profile's GPU: comparing A100
    runs with H100 predictions measures nothing."""
    from planner.calibration.modern import MODERN_PROFILE
    from planner.calibration.published import DEFAULT_PROFILE
    from planner.render import Document, emit
    from planner.specs.hardware_toml import load_profile

    asked = load_profile(hardware)
    ran_on = [load_profile(n) for n in (DEFAULT_PROFILE, MODERN_PROFILE)]
    if asked.gpu.name in {h.gpu.name for h in ran_on}:
        return False
    names = " and ".join(h.name for h in ran_on)
    emit(Document(command="calibrate", title=f"Calibration against published runs ({asked.name})",
                  verdict=f"No published run on {asked.gpu.name} in dtplan's calibration set: the "
                          f"cases ran on {names} (`dtplan calibrate` or --hardware with one of "
                          f"them compares them)",
                  ok=None, data={"hardware": asked.name, "rows": [],
                                 "cases_hardware": [h.name for h in ran_on]}, mode="none"), fmt)
    return True
