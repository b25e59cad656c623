"""Closed loop, part 3: a measured run beside the planner's estimate, term by term.

A profiler trace gives the step's GPU time by category (compute, the exposed time of each
collective kind, copies, idle); the estimate gives compute, each parallel axis's exposed
communication, the bubble and the optimizer. Collectives are matched by kind (a trace names
NCCL operations, not the axis that issued them): each kind's row carries the estimate of every
axis that uses that kind in this layout. A training log without a trace compares the step only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.calibration.fit_compute import RunSpec, predict
from planner.evidence.model import Evidence, MemoryStats, TraceSummary

@dataclass
class Term:
    """One row: what was measured and what the planner estimated (seconds per step)."""

    name: str
    measured_s: float | None
    estimate_s: float | None
    explains: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.measured_s or not self.estimate_s:
            return None
        return self.measured_s / self.estimate_s


@dataclass
class Comparison:
    terms: list[Term]
    memory: list[Term]
    largest: str
    sources: list[str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        row = lambda t: {"measured_s": t.measured_s, "estimate_s": t.estimate_s,  # noqa: E731
                         "ratio": t.ratio}
        mem = lambda t: {"measured_bytes": t.measured_s, "estimate_bytes": t.estimate_s,  # noqa: E731
                         "ratio": t.ratio}
        return {"terms": {t.name: row(t) for t in self.terms},
                "memory": {t.name: mem(t) for t in self.memory},
                "largest_discrepancy": self.largest, "sources": self.sources}


def axis_kinds(lay: Layout) -> dict[str, list[str]]:
    """Collective kind -> the estimate terms (axes) that use it in this layout."""
    kinds: dict[str, list[str]] = {}
    add = lambda kind, term: kinds.setdefault(kind, []).append(term)  # noqa: E731
    if lay.tp > 1:
        for k in (("all_gather", "reduce_scatter") if lay.sequence_parallel else ("all_reduce",)):
            add(k, "t.tp_exposed")
    if lay.dp > 1:
        add("reduce_scatter" if lay.zero >= 2 else "all_reduce", "t.dp_exposed")
        if lay.zero >= 3:
            add("all_gather", "t.zero3_exposed")
            add("reduce_scatter", "t.zero3_exposed")
    if lay.ep > 1:
        add("all_to_all", "t.ep")
    if lay.pp > 1:
        add("send_recv", "t.pp")
    if lay.cp > 1:
        add("send_recv", "t.cp_exposed")
    return kinds


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _trace_terms(traces: list[TraceSummary], est: dict[str, float], lay: Layout) -> list[Term]:
    """Rows from the mean over ranks of each trace's per-step exclusive breakdown."""
    cats = sorted({k for t in traces for k in t.exclusive_ms})
    ms = {k: _mean([t.exclusive_ms.get(k, 0.0) for t in traces]) for k in cats}
    compute = sum(ms.get(k, 0.0) for k in ("gemm", "attention", "other_compute")) / 1e3
    rows = [Term("compute", compute, est["t.compute"] + est["t.recompute"] + est["t.optimizer"],
                 "efficiency.sustained_matmul_fraction")]
    for part in ("gemm", "attention", "other_compute"):
        rows.append(Term(f"compute.{part}", ms.get(part, 0.0) / 1e3, None))
    used = axis_kinds(lay)
    kinds = sorted({k.split(":", 1)[1] for k in cats if k.startswith("comm:")} | set(used))
    for kind in kinds:
        terms = used.get(kind, [])
        # an axis on two kinds (ZeRO-3 gathers and scatters) shares its estimate between them
        share = sum(est[t] / sum(t in v for v in used.values()) for t in terms)
        rows.append(Term(f"comm.{kind}", ms.get(f"comm:{kind}", 0.0) / 1e3,
                         share if terms else 0.0, "+".join(t[2:] for t in terms)))
    rows.append(Term("memcpy", ms.get("memcpy", 0.0) / 1e3, est["t.offload"], "offload"))
    rows.append(Term("idle", ms.get("idle", 0.0) / 1e3, est["t.bubble"],
                     "bubble; data loading and host stalls show here too"))
    start = _mean([t.idle_at_start_ms for t in traces]) / 1e3
    rows.append(Term("idle.at_step_start", start, 0.0, "data loading / host before the first "
                     "kernel (not modelled)"))
    return rows


# Megatron-LM's timers (megatron/training/training.py timers_to_log), ms per iteration, grouped
# by the estimate term they measure. Pipeline receives include waiting for the previous stage,
# so they are compared with the p2p time plus the bubble.
MEGATRON_TIMERS = {
    "compute": (("forward-compute", "backward-compute"), ("t.compute", "t.recompute")),
    "pipeline p2p + bubble": (("forward-recv", "forward-send", "backward-recv", "backward-send",
                               "forward-send-backward-recv", "backward-send-forward-recv",
                               "forward-backward-send-forward-backward-recv"),
                              ("t.pp", "t.bubble")),
    "dp grad reduction": (("backward-params-all-reduce", "grads-reduce-scatter",
                           "params-all-gather", "all-grads-sync"),
                          ("t.dp_exposed", "t.zero3_exposed")),
    "embedding all-reduce": (("backward-embedding-all-reduce", "embedding-grads-all-reduce"), ()),
    "optimizer": (("optimizer",), ("t.optimizer",)),
}


def _timer_terms(logs: list[Evidence], est: dict[str, float]) -> list[Term]:
    """Rows from a Megatron log's per-iteration timers (the first log that has them)."""
    timers = next(e.steps.timers_ms for e in logs if e.steps and e.steps.timers_ms)
    rows = []
    for name, (keys, terms) in MEGATRON_TIMERS.items():
        found = [timers[k] for k in keys if k in timers]
        if found:
            rows.append(Term(name, sum(found) / 1e3, sum(est[t] for t in terms),
                             "+".join(t[2:] for t in terms) or "not modelled"))
    return rows


def _memory(mems: list[MemoryStats], est: dict[str, float]) -> list[Term]:
    stage = ("first", "middle", "last")[int(est.get("peak_stage", 0))]
    # the memory model's own views of the peak stage (memory_model.stage_memory)
    tensors = est.get(f"mem.{stage}.allocated", 0.0)
    reserved = est.get(f"mem.{stage}.reserved", 0.0)
    alloc = [m.peak_allocated_bytes for m in mems if m.peak_allocated_bytes]
    res = [m.peak_reserved_bytes for m in mems if m.peak_reserved_bytes]
    return [Term("peak_allocated", max(alloc) if alloc else None, tensors, "tensors"),
            Term("peak_reserved", max(res) if res else None, reserved,
                 "allocated + the caching allocator's rounding and fragmentation")]


def _largest(terms: list[Term], hw: HardwareProfile, run: RunSpec) -> str:
    """The row furthest from its estimate in absolute time, and what would explain it."""
    cands = [(t, t.measured_s, t.estimate_s) for t in terms
             if t.name != "step" and "." not in t.name.replace("comm.", "")
             and t.measured_s is not None and t.estimate_s is not None]
    if not cands:
        return "nothing to compare beyond the step time"
    t, measured, estimate = max(cands, key=lambda c: abs(c[1] - c[2]))
    m, e = measured * 1e3, estimate * 1e3
    if t.ratio:
        head = f"{t.name} {t.ratio:.1f}x the estimate: measured {m:.1f} ms vs estimated {e:.1f} ms"
    else:
        head = f"{t.name}: measured {m:.1f} ms where the estimate has {e:.1f} ms"
    if t.name == "compute" and t.ratio:
        f = hw.efficiency.sustained_matmul_fraction
        return head + (f"; efficiency.sustained_matmul_fraction {f:.2f} -> {min(1, f / t.ratio):.2f}"
                       " would explain it (dtplan calibrate --from this run)")
    if t.name.startswith("comm.") and t.ratio:
        tp_only = t.explains == "tp_exposed"
        key = "scale_up" if tp_only or run.gpus <= hw.scale_up.gpus_per_domain else "scale_out"
        eff = getattr(hw, key).bus_efficiency
        return head + (f" ({t.explains or 'no axis uses it in this layout'}); {key}.bus_efficiency"
                       f" {eff:.2f} -> {eff / t.ratio:.2f} or less overlap would explain it "
                       "(run nccl-tests on the group's ranks)")
    return head + f" ({t.explains})"


def compare_run(evidence: list[Evidence], run: RunSpec, hw: HardwareProfile) -> Comparison:
    """Measured vs estimate: per-term rows from traces, the step from any log or trace."""
    est = predict(run, hw)
    traced = [(Path(e.path).name, e.trace) for e in evidence if e.trace is not None]
    traces = [t for _, t in traced]
    steps = [e.steps.step_time_s.median for e in evidence if e.steps and e.steps.step_time_s]
    timed = [e for e in evidence if e.steps and e.steps.timers_ms]
    terms = (_trace_terms(traces, est, run.layout) if traces else
             _timer_terms(timed, est) if timed else [])
    tokens = run.global_batch * run.seq_len
    if not steps:
        rates = [e.steps.tokens_per_s_per_gpu.median for e in evidence
                 if e.steps and e.steps.tokens_per_s_per_gpu]
        steps = [tokens / r / run.gpus for r in rates]
    terms.insert(0, Term("step", _mean(steps) if steps else None, est["step_time"]))
    mems = [e.memory for e in evidence if e.memory is not None]
    cmp = Comparison(terms=terms, memory=_memory(mems, est) if mems else [],
                     largest=_largest(terms, hw, run), sources=[Path(e.path).name for e in evidence])
    if len(traces) > 1:  # one trace per rank: the slowest rank sets the step
        slow, trace = max(traced, key=lambda named: _mean(named[1].step_ms))
        cmp.notes.append(f"{len(traces)} traces averaged; slowest {slow} at "
                         f"{_mean(trace.step_ms):.1f} ms per step")
    if not traces and timed:
        cmp.notes.append("terms from Megatron's timers (ms per iteration on the logging rank; "
                         "pipeline receives include waiting, hence compared with p2p + bubble)")
    elif not traces:
        cmp.notes.append("no profiler trace: only the step time is compared (a trace gives the "
                         "per-term breakdown)")
    return cmp
