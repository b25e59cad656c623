"""PyTorch profiler (Kineto) Chrome-trace JSON, one file per rank: GPU time per ProfilerStep
by category, and how much of each collective ran under compute.

Categories come from kernel names: NCCL kernels (`ncclKernel_*` / `ncclDevKernel_*`) are
communication, named by the `nccl:<op>` annotation around their launch when the trace has it
(all_to_all runs as SendRecv kernels), else by the kernel's `Collective name` argument, else by
the kernel name; GEMM and attention by the library kernel names below; memcpy / memset events
are copies; any other kernel is other compute. Within a step window each instant counts once,
in this order: GEMM, attention, other compute, communication, copies, idle — so the categories
sum to the step time, and communication under compute is reported as overlapped.
"""

from __future__ import annotations

import bisect
import math
import re
from array import array
from pathlib import Path
from typing import Any, Callable

import numpy as np

from planner.evidence.model import Evidence, StepStats, TraceSummary
from planner.evidence.source import MAX_JSON_BYTES, fail, open_content
from planner.evidence.stream import TraceStream
from planner.evidence.stats import spread

GEMM = re.compile(r"gemm|Gemm|GEMM|cutlass|xmma|cublas|nvjet|matmul|_mma_|wgrad|dgrad|fprop",
                  re.I)
ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa|mha_", re.I)
NCCL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel_([A-Za-z]+)")
NCCL_KERNEL_KIND = {"AllReduce": "all_reduce", "AllGather": "all_gather",
                    "ReduceScatter": "reduce_scatter", "SendRecv": "send_recv",
                    "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "all_to_all"}
COMPUTE = ("gemm", "attention", "other_compute")
# Kineto times are microseconds since the epoch (~1.7e15 in 2024) or since the profiler's
# start; 1e17 µs is ~3,000 years. A kernel longer than 1e10 µs (~3 hours) is not one kernel.
MAX_TS_US = 1e17
MAX_DUR_US = 1e10
COPY = "memcpy"
IDLE = "idle"


def _op_name(name: str) -> str:
    """`nccl:_reduce_scatter_base` / `allreduce` / `all_gather_into_tensor` -> reduce_scatter..."""
    n = name.split(":", 1)[-1].strip("_").lower()
    n = re.sub(r"(_base|_into_tensor|_coalesced|_tensor)$", "", n)
    return {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
            "reducescatter": "reduce_scatter", "sendrecv": "send_recv", "send": "send_recv",
            "recv": "send_recv", "all_to_all_single": "all_to_all"}.get(n, n)


class _Collected:
    """What one pass over the events keeps: ProfilerStep ranges, kernel launches (correlation →
    CPU thread and time), `nccl:<op>` annotations per thread, and per device the GPU events as
    numbers — never the events themselves, so a streamed trace stays in bounded memory."""

    def __init__(self, line: Callable[[], int] = lambda: 1) -> None:
        self.line = line    # the line being read, for errors (the stream's position)
        self.steps: list[tuple[float, float, str]] = []
        # correlation, thread code, ts
        self.launch: tuple[array[int], array[int], array[float]] = (array("q"), array("q"),
                                                                     array("d"))
        self.annotations: dict[Any, list[tuple]] = {}
        self.gpu: dict[int, tuple[array, array, array]] = {}   # starts, ends, kind codes
        # NCCL kernels, resolved after the pass: device, row, correlation, `Collective name`
        self.nccl = (array("q"), array("q"), array("q"), array("q"))
        self.kinds: list[str] = []
        self.by_name: dict[tuple, int] = {}
        self.names: dict[Any, int] = {}    # thread ids and collective names, as small codes

    def name_code(self, x: Any) -> int:
        return self.names.setdefault(_key(x), len(self.names))

    def code(self, kind: str) -> int:
        if kind not in self.kinds:
            self.kinds.append(kind)
        return self.kinds.index(kind)

    def add(self, e: Any, path: Path) -> None:
        if not isinstance(e, dict):
            return
        cat, name = e.get("cat"), e.get("name", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
            self._gpu_event(e, cat, str(name), path)
        elif cat == "cuda_runtime" and isinstance(e.get("args"), dict) \
                and _corr(e["args"].get("correlation")) >= 0 and _num(e.get("ts")) is not None:
            corr, thread, ts = self.launch
            corr.append(_corr(e["args"]["correlation"]))
            thread.append(self.name_code(e.get("tid")))
            ts.append(float(e["ts"]))
        elif cat == "user_annotation" and str(name).startswith("nccl:") \
                and _num(e.get("ts")) is not None:
            t = float(e["ts"])
            self.annotations.setdefault(e.get("tid"), []).append(
                (t, t + (_num(e.get("dur")) or 0.0), _op_name(str(name))))
        if e.get("ph") == "X" and str(name).startswith("ProfilerStep#") \
                and cat in ("user_annotation", "cpu_op", None) and _num(e.get("ts")) is not None:
            self.steps.append((float(e["ts"]), _num(e.get("dur")) or 0.0, str(name)))

    def _gpu_event(self, e: dict, cat: str, name: str, path: Path) -> None:
        ts, dur = _num(e.get("ts")), _num(e.get("dur", 0))
        if ts is None or dur is None:
            raise fail(path, self.line(), f"GPU event {name[:60]!r} without a numeric ts/dur")
        if not (abs(ts) <= MAX_TS_US and 0 <= dur <= MAX_DUR_US):
            field, value = ("ts", ts) if abs(ts) > MAX_TS_US else ("dur", dur)
            raise fail(path, self.line(), f"GPU event {name[:60]!r}: {field} {value:g} is out of "
                       f"range (ts within ±{MAX_TS_US:g} µs, dur 0 to {MAX_DUR_US:g} µs)")
        given = e.get("args")
        args: dict[str, Any] = given if isinstance(given, dict) else {}
        try:
            dev = int(args.get("device", e.get("pid", 0)) or 0)
        except (TypeError, ValueError, OverflowError):
            dev = 0
        cols = self.gpu.get(dev)
        if cols is None:   # (setdefault would build three arrays for every event)
            cols = self.gpu[dev] = (array("d"), array("d"), array("i"))
        starts, ends, codes = cols
        code = self.by_name.get((cat, name))
        if code is None:   # kernel names repeat: each is classified once
            m = NCCL.match(name) if cat == "kernel" else None
            kind = (COPY if cat != "kernel" else f"nccl:{m[1]}" if m else
                    "attention" if ATTENTION.search(name) else
                    "gemm" if GEMM.search(name) else "other_compute")
            code = self.by_name[(cat, name)] = self.code(kind)
        if self.kinds[code].startswith("nccl:"):   # its launch may come later in the file
            coll = args.get("Collective name")
            for col, x in zip(self.nccl, (dev, len(starts), _corr(args.get("correlation")),
                                          self.name_code(str(coll)) if coll else -1)):
                col.append(x)
        starts.append(ts)
        ends.append(ts + max(dur, 0.0))
        codes.append(code)

    def device(self, path: Path) -> tuple[int, np.ndarray, np.ndarray]:
        """(device with the most GPU events, its [start, end] rows, its kind codes), the NCCL
        kernels named by their launch's annotation."""
        if not self.gpu:
            raise fail(path, 1, "profiler trace without GPU kernels (was CUDA activity recorded?)")
        dev = max(self.gpu, key=lambda d: len(self.gpu[d][0]))
        t0s, t1s, kind_codes = self.gpu[dev]
        starts, ends = _column(t0s, np.float64), _column(t1s, np.float64)
        codes = _column(kind_codes, np.int32).copy()
        windows = {self.names.get(_key(t), -1): ([w[0] for w in sorted(ws)], sorted(ws))
                   for t, ws in self.annotations.items()}
        names = {c: n for n, c in self.names.items()}
        d, rows, corr, coll = (_column(a, np.int64) for a in self.nccl)
        mine = d == dev
        rows, corr, coll = rows[mine], corr[mine], coll[mine]
        lc, lt, lts = (_column(self.launch[0], np.int64), _column(self.launch[1], np.int64),
                       _column(self.launch[2], np.float64))
        wanted = np.isin(lc, corr[corr >= 0])
        launches = {int(c): (int(t), float(x)) for c, t, x in zip(lc[wanted], lt[wanted],
                                                                  lts[wanted])}
        for row, c, k in zip(rows.tolist(), corr.tolist(), coll.tolist()):
            op = self.kinds[codes[row]][5:]
            args = {"correlation": c, "Collective name": names.get(k)}
            codes[row] = self.code(_comm_kind(op, args, launches, windows))
        return dev, np.column_stack([starts, ends]), codes


def _column(a: array[Any], dtype: type[np.generic]) -> np.ndarray:
    """The numbers of an array as a numpy view (np.frombuffer refuses an empty buffer)."""
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)


def _num(x: Any) -> float | None:
    """A finite float from a JSON number (or numeric string), else None."""
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _key(x: Any) -> Any:
    return x if isinstance(x, (int, str)) else repr(x)


def _corr(x: Any) -> int:
    """A launch's correlation id (Kineto numbers them 0, 1, …), or -1 when it is not one."""
    return x if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63 else -1


def _comm_kind(kernel_op: str, args: dict, launches: dict, windows: dict) -> str:
    launch = launches.get(args.get("correlation"))
    if launch is not None and launch[0] in windows:
        starts, ws = windows[launch[0]]
        t = launch[1]
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0:  # innermost (latest-starting) annotation that still covers the launch
            if ws[i][0] <= t <= ws[i][1]:
                return "comm:" + ws[i][2]
            i -= 1
    if args.get("Collective name"):
        return "comm:" + _op_name(str(args["Collective name"]))
    return "comm:" + NCCL_KERNEL_KIND.get(kernel_op, _op_name(kernel_op))


def _step_breakdown(iv: np.ndarray, codes: np.ndarray, kinds: list[str], order: list[str],
                    t0: float, t1: float, longest: float
                    ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Exclusive time per category (priority `order`, then idle), comm time under compute,
    and each category's own busy time, all in µs, within [t0, t1]. `iv` is sorted by start and
    no event is longer than `longest`, so the window's events are found by bisection."""
    lo, hi = np.searchsorted(iv[:, 0], [t0 - longest, t1], side="left")
    idx = lo + np.nonzero(iv[lo:hi, 1] > t0)[0]
    starts, ends = np.clip(iv[idx, 0], t0, t1), np.clip(iv[idx, 1], t0, t1)
    bounds = np.unique(np.concatenate(([t0, t1], starts, ends)))
    seg = np.diff(bounds)
    active = {}
    mine_codes = codes[idx]
    for k in order:
        sel = mine_codes == kinds.index(k)
        cover = np.zeros(len(bounds), dtype=np.int64)
        np.add.at(cover, np.searchsorted(bounds, starts[sel]), 1)
        np.add.at(cover, np.searchsorted(bounds, ends[sel]), -1)
        active[k] = np.cumsum(cover)[:-1] > 0
    taken = np.zeros(len(seg), dtype=bool)
    exclusive, overlapped, busy = {}, {}, {}
    compute = np.zeros(len(seg), dtype=bool)
    for k in order:
        if k in COMPUTE:
            compute |= active[k]
    for k in order:
        mine = active[k] & ~taken
        exclusive[k] = float(seg[mine].sum())
        busy[k] = float(seg[active[k]].sum())
        if k.startswith("comm:"):
            overlapped[k] = float(seg[active[k] & compute].sum())
        taken |= active[k]
    exclusive[IDLE] = float(seg[~taken].sum())
    return exclusive, overlapped, busy


def _idle_at_start(iv: np.ndarray, t0: float, t1: float, longest: float) -> float:
    """µs from the window's start until the GPU first works in it (the input pipeline, the
    host's launch latency): the idle a data loader that cannot keep up shows. `iv` is sorted by
    start, no event longer than `longest`."""
    lo, i = np.searchsorted(iv[:, 0], [t0 - longest, t0], side="right")
    if (iv[lo:i, 1] > t0).any():     # running at the window's start (started at or before t0)
        return 0.0
    return float(iv[i, 0] - t0) if i < len(iv) and iv[i, 0] < t1 else t1 - t0


def read_trace_file(path: Path, option: str = "--from",
                    limit: int = MAX_JSON_BYTES) -> Evidence | None:
    """Summarise one rank's Kineto trace, streamed event by event (evidence.stream): memory
    holds the GPU events as numbers, not the parsed JSON. None when the file is a JSON object
    without `traceEvents` (another kind of JSON: its other values are bounded in all)."""
    fh, close = open_content(path, limit, option)
    try:
        stream = TraceStream(fh, path)
        got = _Collected(stream.line)
        for e in stream.events():
            got.add(e, path)
        if not stream.found and "traceEvents" not in stream.header:
            return None
        return summarise(path, stream.header, got)
    finally:
        close()


_NONE = object()


def read_trace(path: Path, doc: Any) -> Evidence:
    """Summarise a trace already parsed (a JSON object whose 'traceEvents' key came late)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise fail(path, 1, "a profiler trace is a JSON object with a 'traceEvents' list")
    got = _Collected()
    for e in events:
        got.add(e, path)
    return summarise(path, doc, got)


def summarise(path: Path, header: dict, got: _Collected) -> Evidence:
    """The per-step breakdown of the collected GPU events (`header`: the trace's other keys)."""
    dev, iv, codes = got.device(path)
    order_rows = np.argsort(iv[:, 0], kind="stable")
    iv, codes = iv[order_rows], codes[order_rows]
    longest = float((iv[:, 1] - iv[:, 0]).max()) if len(iv) else 0.0
    steps = sorted(got.steps)
    whole = not steps
    if whole:  # profiled without a schedule: the GPU's active span is the one window
        t0, t1 = float(iv[:, 0].min()), float(iv[:, 1].max())
        steps = [(t0, t1 - t0, "whole trace")]
    kinds = got.kinds
    present = {kinds[c] for c in np.unique(codes)}
    order = list(COMPUTE) + sorted(k for k in present if k.startswith("comm:")) + [COPY]
    for k in order:
        got.code(k)
    tot_ex = {k: 0.0 for k in order + [IDLE]}
    tot_ov: dict[str, float] = {}
    tot_busy: dict[str, float] = {}
    step_ms: list[float] = []
    start_idle = 0.0
    for t0, dur, _name in steps:
        t1 = t0 + dur
        ex, ov, busy = _step_breakdown(iv, codes, kinds, order, t0, t1, longest)
        step_ms.append((t1 - t0) / 1e3)
        start_idle += _idle_at_start(iv, t0, t1, longest)
        for d, tot in ((ex, tot_ex), (ov, tot_ov), (busy, tot_busy)):
            for k, v in d.items():
                tot[k] = tot.get(k, 0.0) + v
    n = len(steps)
    mean = lambda d: {k: v / n / 1e3 for k, v in d.items()}  # noqa: E731  (µs total -> ms/step)
    summary = TraceSummary(steps=[name for _, _, name in steps], step_ms=step_ms,
                           exclusive_ms=mean(tot_ex), overlapped_ms=mean(tot_ov),
                           busy_ms=mean(tot_busy), device=dev,
                           idle_at_start_ms=start_idle / n / 1e3,
                           window="GPU active span (no ProfilerStep)" if whole else
                           "cpu ProfilerStep")
    return _evidence(path, header, summary, step_ms)


def _evidence(path: Path, doc: dict, summary: TraceSummary, step_ms: list[float]) -> Evidence:
    info = doc.get("distributedInfo") or {}
    props = {p.get("id"): p for p in doc.get("deviceProperties") or [] if isinstance(p, dict)}
    gpu = props.get(summary.device, {}).get("name")
    ev = Evidence(path=str(path), kind="profiler-trace", format="kineto", gpu=gpu,
                  ranks=info.get("world_size"), trace=summary,
                  steps=StepStats(steps_read=len(step_ms), warmup_dropped=0,
                                  step_time_s=spread([m / 1e3 for m in step_ms])))
    if "rank" in info:
        ev.config["rank"] = info["rank"]
    if gpu is None:
        ev.notes.append("no deviceProperties: the GPU model is not stated in this trace")
    if summary.window == "cpu ProfilerStep":
        ev.notes.append("per-step means; GPU work is clipped to each CPU ProfilerStep range, so "
                        "work queued by the previous step counts in the step it runs in")
    else:
        ev.notes.append("no ProfilerStep#N ranges (profile with a schedule and call prof.step()"
                        " for per-step figures): the whole GPU span is one window")
    return ev
