"""`dtplan calibrate --from FILE...`: what the measured artifacts say, file by file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from planner.evidence import read_evidence
from planner.evidence.model import Evidence
from planner.io.escape import visible
from planner.render import Document, Table, emit
from planner.render.evidence import (FITS, cluster, comparison_tables, figures, fit_table,
                               trace_table)

if TYPE_CHECKING:
    from planner.calibration.fit_compute import RunSpec
    from planner.specs.hardware import HardwareProfile


def _progress(i: int, n: int, path: Path) -> None:
    sys.stderr.write(f"\rreading {i + 1}/{n}: {visible(path.name)[:60]:<60}")
    sys.stderr.flush()


def _read(paths: list[str], warmup_steps: int, option: str = "--from") -> list[Evidence]:
    """read_evidence with a progress line on a terminal (quiet when stderr is piped)."""
    tty = sys.stderr.isatty()
    evidence = read_evidence(paths, warmup_steps, progress=_progress if tty else None,
                             option=option)
    if tty:
        sys.stderr.write("\r" + " " * 80 + "\r")
    return evidence


def show_evidence(paths: list[str], fmt: str, warmup_steps: int) -> int:
    """Print what each file is and what it measured; exit 0 (or 2 via InputError)."""
    evidence = _read(paths, warmup_steps)
    rows = [[Path(e.path).name, e.format, cluster(e), figures(e)] for e in evidence]
    tables = [Table("What the files say", ["file", "format", "cluster", "measured"], rows)]
    tables += [trace_table(e.path, e.trace) for e in evidence if e.trace is not None]
    kinds = list(dict.fromkeys(e.kind for e in evidence))
    notes = [f"{k}: would fit {FITS[k]}" for k in kinds]
    notes += [f"{Path(e.path).name}: {n}" for e in evidence for n in e.notes]
    doc = Document(command="calibrate", title=f"Evidence read from {len(evidence)} file(s)",
                   tables=tables, notes=notes,
                   data={"evidence": [e.to_dict() for e in evidence],
                         "fits": {k: FITS[k] for k in kinds}}, mode="evidence")
    emit(doc, fmt)
    return 0


def _base_hardware(hardware: str | None, hardware_file: str | None) -> HardwareProfile | None:
    """The base profile --hardware or --hardware-file names (None: neither)."""
    from planner.specs.hardware_toml import load_hardware
    from planner.errors import InputError

    if hardware and hardware_file:
        raise InputError("--hardware-file", "give --hardware or --hardware-file, not both")
    if hardware_file:   # its errors name the option it came from
        from planner.specs.hardware_toml import load_profile_file
        return load_profile_file(hardware_file, option="--hardware-file")
    return load_hardware(hardware) if hardware else None


def _base_profile(hardware: str | None, hardware_file: str | None, plan: str | None
                  ) -> tuple[RunSpec | None, HardwareProfile | None]:
    """(RunSpec or None, base HardwareProfile or None) from --plan / --hardware(-file)."""
    from planner.calibration.job import run_from_file

    hw = _base_hardware(hardware, hardware_file)
    if plan:
        return run_from_file(plan, hw)
    return None, hw


def calibrate_from(paths: list[str], fmt: str, warmup_steps: int, hardware: str | None,
                   hardware_file: str | None, plan: str | None, output: str | None,
                   force: bool, framework: str | None = None) -> int:
    """Read the evidence; with a base profile (and a job for compute), fit and write -o.
    --framework selects the time model the job ran on (else the plan's framework: key)."""
    from planner.errors import InputError
    from planner.calibration.closed_loop import calibrate_evidence
    from planner.calibration.profile_toml import calibrated_toml, write_profile
    from planner.io.write import check_targets

    fw = None
    if framework is not None:   # checked even where no job reads it (was silently ignored)
        from planner.specs.framework import load_framework
        fw = load_framework(framework)
    if output is None and not (hardware or hardware_file or plan):
        return show_evidence(paths, fmt, warmup_steps)
    if output:
        check_targets([output], force=force)
    run, hw = _base_profile(hardware, hardware_file, plan)
    if fw is not None and run is not None:   # the flag wins over the plan's key
        from dataclasses import replace
        run = replace(run, framework=fw)
    if hw is None:
        raise InputError("-o", "needs a base profile to calibrate: --hardware NAME, "
                         "--hardware-file FILE or --plan FILE")
    evidence = _read(paths, warmup_steps)
    cal = calibrate_evidence(evidence, hw, run)
    notes = list(cal.notes) + [f"unchanged {k}: {why}" for k, why in cal.unchanged.items()]
    if output:
        name = Path(output).stem if output != "-" else f"{hw.name}-calibrated"
        text = calibrated_toml(hw, name, cal.values, [e.path for e in evidence])
        write_profile(output, text, force) if output != "-" else sys.stdout.write(text)
        if output != "-":
            notes.insert(0, f"wrote {output}: use it with --hardware-file {output}")
    doc = Document(command="calibrate", title=f"Calibration of {hw.name} on {len(evidence)} file(s)",
                   tables=[fit_table(cal)], notes=notes,
                   verdict=f"{len(cal.values)} constant(s) calibrated, {len(cal.unchanged)} unchanged",
                   data={"calibration": cal.to_dict(),
                         "evidence": [e.to_dict() for e in evidence]}, mode="profile-fit")
    if output != "-":
        emit(doc, fmt)
    return 0


def compare_cmd_body(runs: list[str], plan: str, hardware: str | None,
                     hardware_file: str | None, fmt: str, warmup_steps: int) -> int:
    """Measured run(s) vs the plan's estimate, term by term, and the largest discrepancy."""
    from planner.calibration.compare import compare_run
    from planner.calibration.job import run_from_file

    run, hw = run_from_file(plan, _base_hardware(hardware, hardware_file))
    evidence = _read(runs, warmup_steps, "RUNS")
    cmp = compare_run(evidence, run, hw)
    tables = comparison_tables(cmp)
    doc = Document(command="compare", title=f"Measured vs estimate on {hw.name} "
                   f"({', '.join(cmp.sources)})", tables=tables, notes=cmp.notes,
                   verdict=cmp.largest, data=cmp.to_dict())
    emit(doc, fmt)
    return 0
