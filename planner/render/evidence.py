"""Formatting of evidence, calibration and comparison results as Document tables."""

from __future__ import annotations

from pathlib import Path

from planner.calibration.closed_loop import Calibration
from planner.calibration.compare import Comparison
from planner.evidence.model import Evidence, TraceSummary
from planner.render.document import Table

# What each kind of evidence lets `calibrate` fit once it knows the job's layout.
FITS = {"nccl-tests": "link bus efficiency and per-step latency for this group shape "
                      "(with --hardware or --hardware-file as the base)",
        "training-log": "compute speed from the step time or tokens/s (with --plan: a plan "
                        "file or the engine config the run used)",
        "profiler-trace": "compute speed from its kernels (with --plan); exposed communication "
                          "per collective is compared by dtplan compare",
        "memory": "allocator overhead: reserved over allocated (the --fragmentation share)",
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


def cluster(e: Evidence) -> str:
    parts = [_plural(e.ranks, "rank"), _plural(e.nodes, "node"),
             e.gpu or ""]
    return ", ".join(p for p in parts if p) or "not stated"


def figures(e: Evidence) -> str:
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


def trace_table(path: str, t: TraceSummary) -> Table:
    """The trace of the file at `path`: GPU time per step by category."""
    step = t.mean_step_ms
    rows = [[k.replace("comm:", "comm "), f"{v:.2f}", f"{t.percent_of_step(v):.1f}%" if step else "-",
             f"{t.overlapped_ms[k]:.2f}" if k in t.overlapped_ms else ""]
            for k, v in t.exclusive_ms.items()]
    rows.append(["sum (= mean step)", f"{step:.2f}", "100.0%", ""])
    return Table(f"{Path(path).name}: GPU time per step by category (mean of {len(t.steps)})",
                 ["category", "ms/step", "share", "overlapped ms"], rows,
                 bars=[v for v in t.exclusive_ms.values()] + [0.0])


def fit_table(cal: Calibration) -> Table:
    rows = []
    for f in cal.fits:
        after = "not identified" if f.after is None else f"{f.after:.4g}"
        res = ("-" if f.residual_before_pct is None else
               f"{f.residual_before_pct:.1f}% -> {f.residual_after_pct:.1f}%")
        rows.append([f.key, f"{f.before:.4g}", after, res, f.evidence, f.note])
    return Table("Fitted constants (residual = median |error| of the evidence)",
                 ["constant", "profile", "fitted", "residual before -> after", "file", "how"], rows)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def comparison_tables(cmp: Comparison) -> list[Table]:
    """The step-time rows and the memory views of a Comparison."""
    rows = [[t.name, _ms(t.measured_s), _ms(t.estimate_s),
             f"{t.ratio:.2f}x" if t.ratio else "-", t.explains] for t in cmp.terms]
    tables = [Table("Step time by term (ms per step)", ["term", "measured", "estimate", "ratio",
                                                       "estimate from / knob"], rows)]
    if cmp.memory:
        tables.append(Table("Memory per view (GB)", ["view", "measured", "estimate", "ratio", ""],
                            [[t.name, _gb(t.measured_s), _gb(t.estimate_s),
                              f"{t.ratio:.2f}x" if t.ratio else "-", t.explains]
                             for t in cmp.memory]))
    return tables
