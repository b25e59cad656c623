"""`dtplan calibrate --from FILE...`: what the measured artifacts say, file by file."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..evidence import Evidence, read_evidence
from ..render import Document, Table, emit

# What each kind of evidence lets `calibrate` fit once it knows the job's layout.
FITS = {"nccl-tests": "link bus bandwidth and per-step latency for this group shape",
        "training-log": "sustained compute fraction and comm/compute overlap (needs the layout: "
                        "--plan, an engine config or options)",
        "profiler-trace": "exposed communication per collective and the overlap fraction",
        "memory": "allocator overhead: reserved over allocated (fragmentation)",
        "job-config": "nothing by itself: the layout the other files were measured with"}


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f} GB"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def _plural(n: int | None, word: str) -> str:
    return "" if not n else f"{n} {word}{'' if n == 1 else 's'}"


def _cluster(e: Evidence) -> str:
    parts = [_plural(e.ranks, "rank"), _plural(e.nodes, "node"),
             e.gpu or ""]
    return ", ".join(p for p in parts if p) or "not stated"


def _figures(e: Evidence) -> str:
    out = []
    if e.nccl:
        big = e.nccl.largest
        out.append(f"{e.nccl.collective or 'collective ?'}: busbw {big.busbw_gbps:.2f} GB/s at "
                   f"{_size(big.size_bytes)}, peak {e.nccl.peak_busbw_gbps:.2f}")
    st = e.steps
    if st and st.step_time_s:
        s = st.step_time_s
        out.append(f"step {s.median:.4g} s ±{s.spread_pct:.1f}% (n={s.n})")
    for name, label in (("tokens_per_s_per_gpu", "tok/s/GPU"), ("tflops_per_gpu", "TFLOP/s/GPU"),
                        ("mfu_pct", "% MFU"), ("samples_per_s", "samples/s")):
        v = getattr(st, name, None) if st else None
        if v is not None:
            out.append(f"{v.median:,.4g} {label}")
    if e.memory:
        m = e.memory
        if m.peak_allocated_bytes is not None:
            out.append(f"peak alloc {_gb(m.peak_allocated_bytes)}")
        if m.peak_reserved_bytes is not None:
            out.append(f"peak reserved {_gb(m.peak_reserved_bytes)}")
    if e.kind == "job-config":
        out.append(", ".join(f"{k}={v}" for k, v in e.config.items() if not isinstance(v, bool)))
    return "; ".join(out) or "-"


def _trace_table(e: Evidence) -> Table:
    t = e.trace
    step = sum(t.exclusive_ms.values())
    rows = [[k.replace("comm:", "comm "), f"{v:.2f}", f"{100 * v / step:.1f}%" if step else "-",
             f"{t.overlapped_ms[k]:.2f}" if k in t.overlapped_ms else ""]
            for k, v in t.exclusive_ms.items()]
    rows.append(["sum (= mean step)", f"{step:.2f}", "100.0%", ""])
    return Table(f"{Path(e.path).name}: GPU time per step by category (mean of {len(t.steps)})",
                 ["category", "ms/step", "share", "overlapped ms"], rows,
                 bars=[v for v in t.exclusive_ms.values()] + [0.0])


def _escaped(doc: Document) -> Document:
    """Rich reads `[...]` as markup: user strings (file names, GPU names) are escaped."""
    from rich.markup import escape

    tables = [replace(t, title=escape(t.title), rows=[[escape(c) for c in r] for r in t.rows])
              for t in doc.tables]
    return replace(doc, title=escape(doc.title), tables=tables,
                   notes=[escape(n) for n in doc.notes])


def _progress(i: int, n: int, path: Path) -> None:
    sys.stderr.write(f"\rreading {i + 1}/{n}: {path.name[:60]:<60}")
    sys.stderr.flush()


def _read(paths: list[str], warmup_steps: int) -> list[Evidence]:
    """read_evidence with a progress line on a terminal (quiet when stderr is piped)."""
    tty = sys.stderr.isatty()
    evidence = read_evidence(paths, warmup_steps, progress=_progress if tty else None)
    if tty:
        sys.stderr.write("\r" + " " * 80 + "\r")
    return evidence


def show_evidence(paths: list[str], fmt: str, warmup_steps: int) -> int:
    """Print what each file is and what it measured; exit 0 (or 2 via InputError)."""
    evidence = _read(paths, warmup_steps)
    rows = [[Path(e.path).name, e.format, _cluster(e), _figures(e)] for e in evidence]
    tables = [Table("What the files say", ["file", "format", "cluster", "measured"], rows)]
    tables += [_trace_table(e) for e in evidence if e.trace is not None]
    kinds = list(dict.fromkeys(e.kind for e in evidence))
    notes = [f"{k}: would fit {FITS[k]}" for k in kinds]
    notes += [f"{Path(e.path).name}: {n}" for e in evidence for n in e.notes]
    doc = Document(command="calibrate", title=f"Evidence read from {len(evidence)} file(s)",
                   tables=tables, notes=notes,
                   data={"evidence": [e.to_dict() for e in evidence],
                         "fits": {k: FITS[k] for k in kinds}})
    emit(_escaped(doc) if fmt == "table" else doc, fmt)
    return 0


def _base_profile(hardware: str | None, hardware_file: str | None, plan: str | None):
    """(RunSpec or None, base HardwareProfile or None) from --plan / --hardware(-file)."""
    from ..evidence.job import run_from_file
    from ..specs.hardware import load_hardware
    from ..errors import InputError

    if hardware and hardware_file:
        raise InputError("--hardware-file", "give --hardware or --hardware-file, not both")
    hw = load_hardware(hardware_file or hardware) if (hardware or hardware_file) else None
    if plan:
        return run_from_file(plan, hw)
    return None, hw


def _fit_table(cal) -> Table:
    rows = []
    for f in cal.fits:
        after = "not identified" if f.after is None else f"{f.after:.4g}"
        res = ("-" if f.residual_before_pct is None else
               f"{f.residual_before_pct:.1f}% -> {f.residual_after_pct:.1f}%")
        rows.append([f.key, f"{f.before:.4g}", after, res, f.evidence, f.note])
    return Table("Fitted constants (residual = median |error| of the evidence)",
                 ["constant", "profile", "fitted", "residual before -> after", "file", "how"], rows)


def calibrate_from(paths: list[str], fmt: str, warmup_steps: int, hardware: str | None,
                   hardware_file: str | None, plan: str | None, output: str | None,
                   force: bool) -> int:
    """Read the evidence; with a base profile (and a job for compute), fit and write -o."""
    from ..errors import InputError
    from ..evidence.closedloop import calibrate_evidence
    from ..evidence.profile_toml import calibrated_toml, write_profile
    from ..files import check_targets

    if output is None and not (hardware or hardware_file or plan):
        return show_evidence(paths, fmt, warmup_steps)
    if output:
        check_targets([output], force=force)
    run, hw = _base_profile(hardware, hardware_file, plan)
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
                   tables=[_fit_table(cal)], notes=notes,
                   verdict=f"{len(cal.values)} constant(s) calibrated, {len(cal.unchanged)} unchanged",
                   data={"calibration": cal.to_dict(),
                         "evidence": [e.to_dict() for e in evidence]})
    if output != "-":
        emit(_escaped(doc) if fmt == "table" else doc, fmt)
    return 0


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def compare_cmd_body(runs: list[str], plan: str, hardware: str | None,
                     hardware_file: str | None, fmt: str, warmup_steps: int) -> int:
    """Measured run(s) vs the plan's estimate, term by term, and the largest discrepancy."""
    from ..evidence.compare import compare_run

    run, hw = _base_profile(hardware, hardware_file, plan)
    evidence = _read(runs, warmup_steps)
    cmp = compare_run(evidence, run, hw)
    rows = [[t.name, _ms(t.measured_s), _ms(t.estimate_s),
             f"{t.ratio:.2f}x" if t.ratio else "-", t.explains] for t in cmp.terms]
    tables = [Table("Step time by term (ms per step)", ["term", "measured", "estimate", "ratio",
                                                       "estimate from / knob"], rows)]
    if cmp.memory:
        tables.append(Table("Memory per view (GB)", ["view", "measured", "estimate", "ratio", ""],
                            [[t.name, _gb(t.measured_s), _gb(t.estimate_s),
                              f"{t.ratio:.2f}x" if t.ratio else "-", t.explains]
                             for t in cmp.memory]))
    doc = Document(command="compare", title=f"Measured vs estimate on {hw.name} "
                   f"({', '.join(cmp.sources)})", tables=tables, notes=cmp.notes,
                   verdict=cmp.largest, data=cmp.to_dict())
    emit(_escaped(doc) if fmt == "table" else doc, fmt)
    return 0
