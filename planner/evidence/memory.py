"""Device-memory artifacts: `torch.cuda.memory_summary()` text, the pickle of
`torch.cuda.memory._snapshot()`, and the profiler's raw memory timeline
(`export_memory_timeline(... .raw.json[.gz])`).

The snapshot is a pickle, and a pickle can run code when loaded. It is read with an
unpickler that resolves no global at all: dicts, lists, tuples, strings, numbers, booleans and
None are built by pickle opcodes that need no class, so a real snapshot loads and a crafted one
that names any callable (os.system, builtins.eval, a class) is refused.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

from planner.evidence.model import Evidence, MemoryStats
from planner.evidence.pickle_scan import Budget, PickleRefused, scan
from planner.evidence.source import fail, integer, iter_lines, number

UNITS = {"B": 1, "KB": 2**10, "KIB": 2**10, "MB": 2**20, "MIB": 2**20, "GB": 2**30,
         "GIB": 2**30, "TB": 2**40, "TIB": 2**40, "PB": 2**50, "PIB": 2**50}
SUMMARY_ROW = re.compile(r"\|\s*([A-Za-z][A-Za-z \-]*?)\s*\|\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B)?"
                         r"\s*\|\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B)?\s*\|")
SUMMARY_COUNTER = re.compile(r"(CUDA OOMs|cudaMalloc retries):\s*(\d+)")
SUMMARY_DEVICE = re.compile(r"memory summary, device ID (\d+)")
SUMMARY_NAMED = re.compile(r"\|\s*(Allocated|Active|Reserved|GPU reserved)")
# torch.profiler._memory_profiler: category index i in the raw timeline is the i-th key of
# _CATEGORY_TO_COLORS (the last, None, is memory the profiler could not attribute).
TIMELINE_CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation",
                       "gradient", "autograd_detail", "unknown")
PICKLE_PROTOCOL_BYTE = 0x80
MAX_SNAPSHOT_BYTES = 2**53   # a byte count a float64 holds exactly (and far above any device)


def looks_like_summary(lines: list[tuple[int, str]]) -> bool:
    """A memory_summary() printout: its title line, or (an excerpt pasted without the
    header, as in issue threads) one of its named rows with two sizes in the first 50 lines."""
    return any("PyTorch CUDA memory summary" in s or (
        s.lstrip()[:1] == "|" and SUMMARY_NAMED.match(s.strip()) and SUMMARY_ROW.match(s.strip()))
        for _, s in lines[:50])


def read_summary(path: Path, data: bytes | None = None) -> Evidence:
    """Allocated / reserved / active current and peak from a memory_summary() table (sizes in
    its binary units: torch formats with 1024 steps whether it prints MB or MiB)."""
    mem = MemoryStats()
    rows: dict[str, tuple[float, float]] = {}
    device = None
    for ln, s in iter_lines(path, data, skip_empty=True):   # an empty line reads nothing
        if "device ID" in s and (m := SUMMARY_DEVICE.search(s)):
            device = integer(m[1], path, ln, "device ID")
        if "OOMs" in s or "retries" in s:
            for name, val in SUMMARY_COUNTER.findall(s):
                mem.counters[name.replace(" ", "_").lower()] = number(val, path, ln, name)
        row = s.strip()
        if row[:1] != "|":  # every pattern below starts with the table's bar
            continue
        m = SUMMARY_ROW.match(row)
        if not m or m[1].strip().lower() in ("metric",):
            if SUMMARY_NAMED.match(row):
                raise fail(path, ln, "memory_summary row: expected '| name | cur | peak | ...'")
            continue
        name = m[1].strip().lower()
        field = m[1].strip()
        cur = number(m[2], path, ln, f"{field} (current)") * UNITS.get((m[3] or "B").upper(), 1)
        peak = number(m[4], path, ln, f"{field} (peak)") * UNITS.get((m[5] or "B").upper(), 1)
        rows.setdefault(name, (cur, peak))
    if "allocated memory" not in rows:
        raise fail(path, 1, "memory_summary text without an 'Allocated memory' row")
    mem.allocated_bytes, mem.peak_allocated_bytes = rows["allocated memory"]
    reserved = rows.get("gpu reserved memory") or rows.get("reserved memory")
    if reserved:
        mem.reserved_bytes, mem.peak_reserved_bytes = reserved
    if "active memory" in rows:
        mem.by_category_bytes["active_peak"] = rows["active memory"][1]
    ev = Evidence(path=str(path), kind="memory", format="memory-summary", memory=mem)
    if device is not None:
        ev.config["device"] = device
    if not reserved:
        ev.notes.append("no reserved-memory row in this summary: fragmentation not stated")
    return ev


def read_timeline(path: Path, text: str, data: list) -> Evidence:
    """Peak of the profiler's raw memory timeline: entries [time_ns, action, bytes, category]
    with signed bytes (create +, destroy -, a version bump moves bytes between categories);
    time -1 is memory that existed before profiling. Peak = max of the running sum."""
    if _is_sampled(data):
        return _read_sampled(path, data)
    totals = [0.0] * len(TIMELINE_CATEGORIES)
    events = []
    for i, e in enumerate(data):
        ok = (isinstance(e, list) and len(e) == 4 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in e)
            and 0 <= e[3] < len(TIMELINE_CATEGORIES) and e[1] in (1, 2, 3, 4))
        if not ok:
            line = text.count("\n", 0, _nth_entry(text, i)) + 1
            raise fail(path, line, f"memory timeline entry {i}: expected [time_ns, action 1-4, "
                       f"bytes, category 0-{len(TIMELINE_CATEGORIES) - 1}], got {e!r}"[:200])
        events.append(e)
    events.sort(key=lambda e: e[0])
    peak, peak_at, at_peak = 0.0, None, list(totals)
    j = 0
    while j < len(events):  # apply all events of one timestamp before comparing
        t = events[j][0]
        while j < len(events) and events[j][0] == t:
            totals[int(events[j][3])] += events[j][2]
            j += 1
        if sum(totals) > peak:
            peak, peak_at, at_peak = sum(totals), t, list(totals)
    mem = MemoryStats(peak_allocated_bytes=peak, allocated_bytes=sum(totals),
                      by_category_bytes=dict(zip(TIMELINE_CATEGORIES, at_peak)))
    ev = Evidence(path=str(path), kind="memory", format="profiler-memory-timeline", memory=mem)
    ev.config["entries"] = len(events)
    ev.config["peak_time_ns"] = peak_at
    return ev


def _is_sampled(data: list) -> bool:
    """`export_memory_timeline(x.json)`: [times, sizes], sizes one list of 8 per time."""
    return (len(data) == 2 and all(isinstance(x, list) for x in data)
            and len(data[0]) == len(data[1]) and all(isinstance(r, list) for r in data[1]))


def _read_sampled(path: Path, data: list) -> Evidence:
    times, sizes = data
    best, at = -1.0, 0
    for i, row in enumerate(sizes):
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row):
            raise fail(path, 1, f"memory timeline sizes[{i}]: expected numbers")
        if sum(row) > best:
            best, at = float(sum(row)), i
    cats = dict(zip(TIMELINE_CATEGORIES, map(float, sizes[at]))) if sizes else {}
    mem = MemoryStats(peak_allocated_bytes=max(best, 0.0), by_category_bytes=cats)
    ev = Evidence(path=str(path), kind="memory", format="profiler-memory-timeline", memory=mem)
    ev.config["entries"] = len(times)
    return ev


def _nth_entry(text: str, n: int) -> int:
    """Offset of the n-th inner list of a JSON list of lists (for the error's line)."""
    at = text.find("[") + 1
    for _ in range(n + 1):
        nxt = text.find("[", at)
        if nxt < 0:
            return len(text)
        at = nxt + 1
    return at


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle makes without a global: containers, str, bytes, numbers."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def looks_like_pickle(raw: bytes) -> bool:
    return len(raw) > 2 and raw[0] == PICKLE_PROTOCOL_BYTE and raw[-1:] == b"."


def read_snapshot(path: Path, raw: bytes) -> Evidence:
    """Reserved, allocated and trace-window peak from a torch.cuda.memory._snapshot() pickle;
    its opcodes are checked first (evidence.pickle_scan) and the walk over it is budgeted."""
    try:
        budget = Budget(scan(raw).opcodes)
        snap = _PlainUnpickler(io.BytesIO(raw)).load()
    except PickleRefused as e:
        raise fail(path, 1, f"refused: not a plain memory snapshot ({e})") from None
    except pickle.UnpicklingError as e:
        raise fail(path, 1, f"not a plain memory snapshot ({e}); only containers and numbers "
                   "are loaded") from None
    except Exception as e:  # truncated or corrupt pickle stream
        raise fail(path, 1, f"unreadable pickle ({type(e).__name__})") from None
    try:
        return _snapshot_evidence(path, snap, budget)
    except PickleRefused as e:
        raise fail(path, 1, f"refused: {e}") from None


def _size(path: Path, value: Any, field: str) -> int:
    """A byte count of the snapshot: an integer from 0 to 2^53 (a float64 holds it exactly),
    else an error naming the field."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, 1, f"{field}: expected an integer byte count, got "
                   f"{type(value).__name__} {str(value)[:40]!r}")
    if not 0 <= value <= MAX_SNAPSHOT_BYTES:
        raise fail(path, 1, f"{field}: {value if value.bit_length() < 80 else 'a huge integer'}"
                   f" is out of range (0 to 2^53 bytes)")
    return value


def _snapshot_evidence(path: Path, snap: Any, budget: Budget) -> Evidence:
    segments = snap.get("segments") if isinstance(snap, dict) else None
    if not isinstance(segments, list):
        raise fail(path, 1, "a memory snapshot is a dict with a 'segments' list")
    reserved = allocated = 0.0
    budget.spend(len(segments))
    for k, seg in enumerate(segments):
        if not isinstance(seg, dict) or "total_size" not in seg:
            raise fail(path, 1, f"segments[{k}]: expected a dict with an integer total_size")
        reserved += _size(path, seg["total_size"], f"segments[{k}].total_size")
        blocks = seg.get("blocks", [])
        blocks = blocks if isinstance(blocks, list) else []
        budget.spend(len(blocks))
        for j, b in enumerate(blocks):
            if isinstance(b, dict) and b.get("state") == "active_allocated":
                allocated += _size(path, b.get("size", 0), f"segments[{k}].blocks[{j}].size")
    mem = MemoryStats(allocated_bytes=allocated, reserved_bytes=reserved,
                      peak_reserved_bytes=reserved,
                      peak_allocated_bytes=_trace_peak(path, snap.get("device_traces"),
                                                       allocated, budget))
    ev = Evidence(path=str(path), kind="memory", format="memory-snapshot", memory=mem)
    ev.config["segments"] = len(segments)
    ev.notes.append("peak allocated: replayed backwards from the snapshot over its trace "
                    "window; reserved is what the allocator held when the snapshot was taken")
    return ev


def _trace_peak(path: Path, traces: Any, allocated_now: float, budget: Budget) -> float:
    """Walk the allocator trace backwards from the current allocated bytes: before an `alloc`
    there was `size` less, before a `free_completed` `size` more. Max over the walk."""
    if not isinstance(traces, list):
        return allocated_now
    level = peak = allocated_now
    budget.spend(len(traces))
    lists = [dev for dev in traces if isinstance(dev, list)]
    for dev in lists:
        budget.spend(len(dev))
    events = [e for dev in lists for e in dev if isinstance(e, dict)]
    for e in reversed(events):
        action = e.get("action")
        if action not in ("alloc", "free_completed"):
            continue
        size = _size(path, e.get("size", 0), f"device_traces: {action} size")
        if action == "alloc":
            level -= size
        elif e.get("action") == "free_completed":
            level += size
        peak = max(peak, level)
    return peak
