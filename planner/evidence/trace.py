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
import re
from pathlib import Path
from typing import Any

import numpy as np

from .model import Evidence, StepStats, TraceSummary
from .source import fail, load_json
from .stats import spread

GEMM = re.compile(r"gemm|Gemm|GEMM|cutlass|xmma|cublas|nvjet|matmul|_mma_|wgrad|dgrad|fprop",
                  re.I)
ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa|mha_", re.I)
NCCL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel_([A-Za-z]+)")
NCCL_KERNEL_KIND = {"AllReduce": "all_reduce", "AllGather": "all_gather",
                    "ReduceScatter": "reduce_scatter", "SendRecv": "send_recv",
                    "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "all_to_all"}
COMPUTE = ("gemm", "attention", "other_compute")
COPY = "memcpy"
IDLE = "idle"


def _op_name(name: str) -> str:
    """`nccl:_reduce_scatter_base` / `allreduce` / `all_gather_into_tensor` -> reduce_scatter..."""
    n = name.split(":", 1)[-1].strip("_").lower()
    n = re.sub(r"(_base|_into_tensor|_coalesced|_tensor)$", "", n)
    return {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
            "reducescatter": "reduce_scatter", "sendrecv": "send_recv", "send": "send_recv",
            "recv": "send_recv", "all_to_all_single": "all_to_all"}.get(n, n)


def _nccl_windows(events: list[dict]) -> dict[Any, tuple[list[float], list[tuple]]]:
    """Per CPU thread: the `nccl:<op>` annotations sorted by start, for launch look-ups."""
    by_tid: dict[Any, list[tuple]] = {}
    for e in events:
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("nccl:"):
            by_tid.setdefault(e.get("tid"), []).append(
                (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), _op_name(e["name"])))
    return {t: ([w[0] for w in sorted(ws)], sorted(ws)) for t, ws in by_tid.items()}


def _categorise(events: list[dict], path: Path) -> tuple[int, list[tuple[float, float, str]]]:
    """(device, [(start_us, end_us, category)]) for the device with the most GPU events."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    windows = _nccl_windows(events)
    per_dev: dict[int, list[tuple[float, float, str]]] = {}
    for e in events:
        cat = e.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            raise fail(path, 1, f"GPU event {str(e.get('name'))[:60]!r} without a numeric "
                       "ts/dur") from None
        args = e.get("args") or {}
        dev = int(args.get("device", e.get("pid", 0)) or 0)
        if cat != "kernel":
            kind = COPY
        elif m := NCCL.match(str(e.get("name", ""))):
            kind = _comm_kind(m[1], args, launches, windows)
        else:
            name = str(e.get("name", ""))
            kind = ("attention" if ATTENTION.search(name) else
                    "gemm" if GEMM.search(name) else "other_compute")
        per_dev.setdefault(dev, []).append((ts, ts + max(dur, 0.0), kind))
    if not per_dev:
        raise fail(path, 1, "profiler trace without GPU kernels (was CUDA activity recorded?)")
    dev = max(per_dev, key=lambda d: len(per_dev[d]))
    return dev, per_dev[dev]


def _comm_kind(kernel_op: str, args: dict, launches: dict, windows: dict) -> str:
    launch = launches.get(args.get("correlation"))
    if launch is not None and launch.get("tid") in windows:
        starts, ws = windows[launch["tid"]]
        t = float(launch["ts"])
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0:  # innermost (latest-starting) annotation that still covers the launch
            if ws[i][0] <= t <= ws[i][1]:
                return "comm:" + ws[i][2]
            i -= 1
    if args.get("Collective name"):
        return "comm:" + _op_name(str(args["Collective name"]))
    return "comm:" + NCCL_KERNEL_KIND.get(kernel_op, _op_name(kernel_op))


def _step_breakdown(iv: np.ndarray, kinds: list[str], order: list[str], t0: float, t1: float
                    ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Exclusive time per category (priority `order`, then idle), comm time under compute,
    and each category's own busy time, all in µs, within [t0, t1]."""
    idx = np.nonzero((iv[:, 1] > t0) & (iv[:, 0] < t1))[0]
    starts, ends = np.clip(iv[idx, 0], t0, t1), np.clip(iv[idx, 1], t0, t1)
    bounds = np.unique(np.concatenate(([t0, t1], starts, ends)))
    seg = np.diff(bounds)
    active = {}
    for k in order:
        sel = np.array([kinds[i] == k for i in idx], dtype=bool)
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


def _idle_at_start(iv: np.ndarray, t0: float, t1: float) -> float:
    """µs from the window's start until the GPU first works in it (the input pipeline, the
    host's launch latency): the idle a data loader that cannot keep up shows."""
    running = (iv[:, 0] <= t0) & (iv[:, 1] > t0)
    if running.any():
        return 0.0
    later = iv[(iv[:, 0] > t0) & (iv[:, 0] < t1), 0]
    return float(later.min() - t0) if len(later) else t1 - t0


def read_trace(path: Path, raw: bytes) -> Evidence:
    """Summarise one rank's Kineto trace; the parsed JSON is dropped when this returns."""
    doc = load_json(path, raw, "trace JSON")
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise fail(path, 1, "a profiler trace is a JSON object with a 'traceEvents' list")
    steps = sorted((e for e in events if isinstance(e, dict) and e.get("ph") == "X"
                    and str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") in ("user_annotation", "cpu_op", None)),
                   key=lambda e: float(e["ts"]))
    dev, gpu = _categorise([e for e in events if isinstance(e, dict)], path)
    iv = np.array([(a, b) for a, b, _ in gpu], dtype=float)
    whole = not steps
    if whole:  # profiled without a schedule: the GPU's active span is the one window
        t0, t1 = float(iv[:, 0].min()), float(iv[:, 1].max())
        steps = [{"name": "whole trace", "ts": t0, "dur": t1 - t0}]
    kinds = [k for _, _, k in gpu]
    order = list(COMPUTE) + sorted({k for k in kinds if k.startswith("comm:")}) + [COPY]
    tot_ex = {k: 0.0 for k in order + [IDLE]}
    tot_ov, tot_busy = {}, {}
    step_ms, start_idle = [], 0.0
    for s in steps:
        t0, t1 = float(s["ts"]), float(s["ts"]) + float(s.get("dur", 0))
        ex, ov, busy = _step_breakdown(iv, kinds, order, t0, t1)
        step_ms.append((t1 - t0) / 1e3)
        start_idle += _idle_at_start(iv, t0, t1)
        for d, tot in ((ex, tot_ex), (ov, tot_ov), (busy, tot_busy)):
            for k, v in d.items():
                tot[k] = tot.get(k, 0.0) + v
    n = len(steps)
    mean = lambda d: {k: v / n / 1e3 for k, v in d.items()}  # noqa: E731  (µs total -> ms/step)
    summary = TraceSummary(steps=[s["name"] for s in steps], step_ms=step_ms,
                           exclusive_ms=mean(tot_ex), overlapped_ms=mean(tot_ov),
                           busy_ms=mean(tot_busy), device=dev,
                           idle_at_start_ms=start_idle / n / 1e3,
                           window="GPU active span (no ProfilerStep)" if whole else
                           "cpu ProfilerStep")
    return _evidence(path, doc, summary, step_ms)


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
