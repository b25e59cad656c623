"""`dtplan calibrate`: the step-time model against published Megatron-LM and FSDP runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from planner.cli import options as o
from planner.cli.options import Format, option
from planner.cli.root import EXIT_OK, command

if TYPE_CHECKING:
    from planner.calibration.report import CalibrationReport, CrossValidation, ModelTypeRun
    from planner.specs.hardware import HardwareProfile
    from planner.render import Table


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
    # In the terminal the layout goes on a row of its own under the case name, so the table
    # fits 80 columns (a cell holds one line: renderers print a newline in a cell as "\n").
    merged = fmt is Format.table
    tables, notes, verdict = _published_tables(rep, merged)
    data = dump(rep)
    more_tables: list[Table] = []
    if hardware is None:   # the cross-validation runs every family on its own hardware
        from planner.calibration.lofo import cross_validate
        cv = cross_validate()
        more_tables, more, line = _cross_validation(cv, framework, merged)
        notes += more
        verdict += "; " + line
        data["cross_validation"] = dump(cv)
        from planner.calibration.model_runs import model_type_runs
        checks = model_type_runs(framework)
        if checks:
            more_tables.append(_model_type_table(checks, merged))
            notes += [f"{c.run} ({c.source}): {c.measured_as}" + (
                "; not modelled: " + "; ".join(c.not_modelled) if c.not_modelled else "")
                for c in checks]
            data["model_types"] = [dump(c) for c in checks]
    doc = Document(command="calibrate",
                   title=f"Calibration against published runs ({rep.hardware})",
                   tables=tables + more_tables, notes=notes, verdict=verdict,
                   ok=rep.within_tolerance == len(rep.rows), data=data)
    emit(doc, fmt.value)
    return EXIT_OK


def _published_tables(rep: "CalibrationReport", merged: bool
                      ) -> tuple[list["Table"], list[str], str]:
    """The published rows (case by case, by regime, memory), their notes and the verdict."""
    from planner.render import Table

    unit = {"iteration_time_s": "s", "hardware_tflops_per_gpu": "TFLOP/s/GPU",
            "tokens_per_s_per_gpu": "tok/s/GPU", "peak_memory_gib": "GiB reserved"}

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
    tables = [Table("Published vs predicted", first + ["metric", "published", "predicted",
                                                      "error"] + last, rows, bars=bars),
              Table("By regime (framework / GPU generation / layout family), in sample",
                    ["regime", "rows", "median |error|", "worst", "RMS"], reg)]
    if mem:
        tables.append(Table("Memory rows, max reserved",
                            first + ["published GiB", "predicted GiB", "error"] + last, mem))
    return tables, notes, verdict


def _cross_validation(cv: "CrossValidation", framework: Optional[str], merged: bool,
                      generation: Optional[str] = None) -> tuple[list["Table"], list[str], str]:
    """The leave-one-family-out tables (per family; bands per regime; memory rows), their notes
    and the verdict's clause. `framework` / `generation` keep those families (and bands)."""
    from planner.render import Table
    from planner.specs.framework import load_framework

    fw = None if framework is None else load_framework(framework).name
    fams = [f for f in cv.families if (fw is None or f.family.split("/")[1] == fw)
            and (generation is None or f.family.split("/")[2] == generation)]
    refit = {f.family: f.constants[0] for f in fams}
    per_family = [[f.family, str(f.runs), f"{f.median_abs_error_pct:.1f}%",
                   f"{f.worst_abs_error_pct:.1f}%", f"{refit[f.family].value:.3f}",
                   _fitted_on(refit[f.family].source)] for f in fams]
    bands = [[b.regime, f"± {b.band_pct:g}%", str(len(b.families)), f"{b.rms_error_pct:.1f}%"]
             for b in cv.bands if (fw is None or b.regime.startswith(fw + "/"))
             and (generation is None or b.regime.endswith("/" + generation))]
    memory = [[m.run if merged else m.run, m.hardware, f"{m.measured_gib:.1f}",
               f"{m.predicted_gib:.1f}", f"{m.error_pct:+.1f}%"] for m in cv.memory]
    tables = [Table("Leave-one-family-out step time (family = source / framework / GPU "
                    "generation)", ["family", "runs", "median", "worst", "share", "fitted on"],
                    per_family,
                    bars=[f.worst_abs_error_pct for f in fams]),
              Table("Bands derived per regime (printed on time, tokens/s and MFU)",
                    ["regime", "band", "families", "RMS"], bands),
              Table("Measured peak memory", ["run", "hardware", "measured GiB", "predicted GiB",
                                             "error"], memory)]
    profiles = sorted({c.key.split(".")[0] for f in fams for c in f.constants[1:]})
    notes = [f"Cross-validation: {cv.refit}; "
             f"{cv.runs} runs in {len(cv.families)} families on {', '.join(cv.generations)}."]
    for prof in profiles:
        cs = next(c for f in fams for c in f.constants[1:] if c.key.startswith(prof + "."))
        vals = sorted({(c.key.split('.', 1)[1], c.value) for f in fams for c in f.constants[1:]
                       if c.key.startswith(prof + ".")})
        notes.append(f"{prof} constants ({cs.source}; {cs.kind}): "
                     + ", ".join(f"{k} = {v:g}" for k, v in vals))
    notes += cv.notes + [f"Not expressible: {k}: {v}" for k, v in cv.not_expressible.items()]
    notes.append("Memory: " + "; ".join(sorted({m.statistic for m in cv.memory})))
    line = (f"leave-one-family-out median |error| {cv.median_abs_error_pct:.1f}% (target "
            f"≤ {cv.target_median_pct:g}%), worst {cv.worst_abs_error_pct:.1f}% (target ≤ "
            f"{cv.target_worst_pct:g}%, {cv.worst_run}); memory {cv.memory_within}/"
            f"{len(cv.memory)} within ±{cv.memory_target_pct:g}%")
    return tables, notes, line


def _model_type_table(checks: list["ModelTypeRun"], merged: bool) -> "Table":
    """One published run per model family, at the shipped profiles (in no fit and no band)."""
    from planner.render import Table
    from planner.render.json_out import layout_text

    cells = [[c.model_type, c.run, f"{c.gpus} {c.hardware}", f"{c.measured_step_s:.3g}",
              f"{c.predicted_step_s:.3g}", f"{c.error_pct:+.1f}%"] for c in checks]
    texts = [layout_text(c.layout) for c in checks]
    rows = ([r for t, cell in zip(texts, cells) for r in (cell, ["", t, "", "", "", ""])]
            if merged else [cell + [t] for t, cell in zip(texts, cells)])
    return Table("Model families: a published run each, shipped profiles (in no fit or band)",
                 ["model type", "run / layout" if merged else "run", "GPUs", "measured s",
                  "predicted s", "error"] + ([] if merged else ["layout"]), rows)


def _fitted_on(source: str) -> str:
    """'2 families' for a share refitted on other families, else 'profile'."""
    if not source.startswith("refitted on "):
        return "default" if source.startswith("specs/") else "profile"
    n = len(source.split(", "))
    return f"{n} other famil{'y' if n == 1 else 'ies'}"


def _runs_of_generation(asked: "HardwareProfile", fmt: str) -> bool:
    """Print the leave-one-family-out families of the public runs on `asked`'s GPU generation
    (MLPerf and the other collected runs) and return True; False when none ran on it."""
    from planner.calibration.lofo import cross_validate
    from planner.calibration.runs import load_runs
    from planner.evaluation.error_band import generation
    from planner.render import Document, emit
    from planner.specs.hardware_toml import load_profile
    from planner.specs.records import dump

    gen = generation(asked)
    profiles = sorted({r.hardware for r in load_runs().runs
                       if generation(load_profile(r.hardware)) == gen})
    if not profiles:
        return False
    cv = cross_validate()
    tables, notes, line = _cross_validation(cv, None, fmt == "table", generation=gen)
    emit(Document(command="calibrate", title=f"Public runs on {gen} ({', '.join(profiles)})",
                  tables=tables[:2], notes=notes, verdict=line[0].upper() + line[1:].split(
                      "; memory")[0] + " (all families)", ok=None,
                  data={"hardware": asked.name, "rows": [], "cases_hardware": profiles,
                        "cross_validation": dump(cv)}, mode="none"), fmt)
    return True


def _no_published_run(hardware: str, fmt: str) -> bool:
    """Say so and return True when no published case ran on this profile's GPU: comparing A100
    runs with H100 predictions measures nothing."""
    from planner.calibration.modern import MODERN_PROFILE
    from planner.calibration.published import DEFAULT_PROFILE
    from planner.calibration.runs import load_runs
    from planner.render import Document, emit
    from planner.specs.hardware_toml import load_profile

    asked = load_profile(hardware)
    ran_on = [load_profile(n) for n in (DEFAULT_PROFILE, MODERN_PROFILE)]
    if asked.gpu.name in {h.gpu.name for h in ran_on}:
        return False
    if _runs_of_generation(asked, fmt):
        return True
    names = " and ".join(h.name for h in ran_on)
    gens = ", ".join(sorted({r.hardware for r in load_runs().runs}))
    emit(Document(command="calibrate", title=f"Calibration against published runs ({asked.name})",
                  verdict=f"No published run on {asked.gpu.name} in dtplan's calibration set: the "
                          f"paper cases ran on {names}, the public runs on {gens} (`dtplan "
                          "calibrate` or --hardware with one of them compares them)",
                  ok=None, data={"hardware": asked.name, "rows": [],
                                 "cases_hardware": [h.name for h in ran_on]}, mode="none"), fmt)
    return True
