"""nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
sendrecv_perf, ...): one row per message size with out-of-place and in-place time, algorithm
bandwidth and bus bandwidth, as printed by NVIDIA/nccl-tests src/common.cu.

Tolerated: headers of old and new releases (with or without `Group`, `redop`, `root`
columns; `error` or `#wrong`), alltoall's empty redop column, `N/A` in the wrong column, rows
wrapped over two lines, launcher tags inside rows (`[0]`), NCCL INFO lines between rows,
excerpts without headers. Refused: a row whose numbers do not parse, a file without rows.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from planner.evidence.model import Evidence, NcclRow, NcclTable
from planner.evidence.source import MAX_LOG_NUMBER, fail, integer, iter_lines

RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+"
                       r"device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")
THREADS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
STARTING = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf)?\b")
AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
REDOPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum"}
# Rows in one file: nccl-tests' sweep of 8 B .. 16 GB by doubling is 32 rows, a fine step
# (-f 1.1) a few hundred; 10,000 bounds the rows kept (each a dataclass) and the time.
MAX_ROWS = 10_000
# File-name spellings of the tests, longest first so reduce_scatter is not read as reduce.
COLLECTIVES = [("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"),
               ("allgather", "all_gather"), ("alltoall", "alltoall"), ("sendrecv", "sendrecv"),
               ("broadcast", "broadcast"), ("hypercube", "hypercube"), ("gather", "gather"),
               ("scatter", "scatter"), ("reduce", "reduce")]


def _row_start(tokens: list[str]) -> bool:
    return (len(tokens) >= 3 and _digits(tokens[0]) and _digits(tokens[1])
            and tokens[2][:1].isalpha())


def _digits(token: str) -> bool:
    """ASCII digits only (str.isdigit also accepts '²', which int() refuses)."""
    return token.isascii() and token.isdigit()


def _value(tok: str, path: Path, line: int, what: str) -> float | None:
    if tok == "N/A":
        return None
    try:
        v = float(tok)
    except ValueError:
        raise fail(path, line, f"nccl-tests row: {what} {tok!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise fail(path, line, f"nccl-tests row: {what} {tok!r} is not a non-negative number")
    if v > MAX_LOG_NUMBER:
        raise fail(path, line, f"nccl-tests row: {what} {tok} is out of range (at most "
                   f"{MAX_LOG_NUMBER:g})")
    return v


def _row(tokens: list[str], path: Path, line: int, time_scale: float) -> NcclRow:
    """size count type [redop] [root] then 8 (out-of-place + in-place) or 4 result columns."""
    rest = tokens[3:]
    n_tail = 8 if len(rest) >= 8 else 4
    tail, middle = rest[-n_tail:], rest[:-n_tail]
    if len(rest) < 4 or len(middle) > 2 or any(
            m.lower() not in REDOPS and not m.lstrip("-").isdigit() for m in middle):
        raise fail(path, line, f"nccl-tests row: expected size, count, type, [redop, root], "
                   f"then time/algbw/busbw/wrong; got {len(tokens)} fields")
    names = ("time", "algbw", "busbw", "#wrong")
    vals = [_value(t, path, line, names[i % 4]) for i, t in enumerate(tail)]
    # time, algbw, busbw out of place (and in place): every column but #wrong is a number
    figures = [v for i, v in enumerate(vals) if i % 4 != 3 and v is not None]
    if len(figures) < n_tail // 4 * 3:
        raise fail(path, line, "nccl-tests row: N/A outside the #wrong column")
    ip: tuple[float | None, ...] = tuple(figures[3:]) or (None, None, None)
    return NcclRow(size_bytes=integer(tokens[0], path, line, "nccl-tests row: size"),
                   count=integer(tokens[1], path, line, "nccl-tests row: count"), dtype=tokens[2],
                   time_us=figures[0] * time_scale, algbw_gbps=figures[1],
                   busbw_gbps=figures[2],
                   inplace_time_us=None if ip[0] is None else ip[0] * time_scale,
                   inplace_algbw_gbps=ip[1], inplace_busbw_gbps=ip[2])


def _collective_from_name(path: Path) -> str | None:
    flat = re.sub(r"[^a-z]", "", path.name.lower())
    return next((name for key, name in COLLECTIVES if key in flat), None)


def looks_like(lines: list[tuple[int, str]]) -> bool:
    """True when the text has nccl-tests markers or at least two result rows."""
    rows = 0
    for _, s in lines[:400]:
        if "Avg bus bandwidth" in s or THREADS.search(s) or "busbw" in s:
            return True
        rows += _row_start(s.split()) and len(s.split()) >= 7
    return rows >= 2


def read_nccl(path: Path, data: bytes | None = None) -> Evidence:
    """Parse an nccl-tests output file into an Evidence of kind "nccl-tests"."""
    # one line at a time, one kept back; empty lines left out (a gap in the line numbers)
    lines = iter_lines(path, data, tags_anywhere=True, skip_empty=True)
    ranks: dict[int, tuple[str, int, str]] = {}
    collective, avg, time_scale, threads = None, None, 1.0, None
    rows: list[NcclRow] = []
    held: tuple[int, str] | None = None
    while True:
        ln, s = held or next(lines, (0, None))
        held = None
        if s is None:
            break
        stripped = s.strip()
        if stripped.startswith("#"):
            if m := RANK_LINE.match(stripped):
                ranks[integer(m[1], path, ln, "Rank")] = (m[2], integer(m[3], path, ln, "Pid"),
                                                           m[4])
            elif (m := STARTING.search(stripped)) or THREADS.search(stripped):
                if rows:  # nccl-tests prints one header per run
                    raise fail(path, ln, "a second nccl-tests run starts here; give each test "
                               "its own file")
                if m:
                    collective = m[1]
                elif t := THREADS.search(stripped):
                    threads = (integer(t[1], path, ln, "nThread"),
                               integer(t[2], path, ln, "nGpus"))
            elif m := AVG.search(stripped):
                avg = _value(m[1], path, ln, "Avg bus bandwidth")
            elif "(us)" in stripped or "(ms)" in stripped:
                time_scale = 1000.0 if "(ms)" in stripped else 1.0
            continue
        tokens = stripped.split()
        if not _row_start(tokens):
            if tokens and tokens[0].isdigit() and len(tokens) >= 2 and tokens[1].isdigit():
                raise fail(path, ln, f"nccl-tests row: type {tokens[2] if len(tokens) > 2 else ''!r} "
                           "missing or not a name")
            continue
        # A row wrapped by the terminal or the launcher continues on the next line(s), up to
        # an empty line (a gap in the numbers), a blank one, a comment or the next row.
        last = ln
        while len(tokens) < 11 and (held := next(lines, None)) is not None:
            nxt = held[1].strip().split()
            if held[0] != last + 1 or not nxt or held[1].strip().startswith("#") \
                    or _row_start(nxt):
                break
            tokens += nxt
            last, held = held[0], None
        if len(rows) >= MAX_ROWS:
            raise fail(path, ln, f"more than {MAX_ROWS:,} nccl-tests rows (one test's sweep of "
                       "message sizes is tens of rows); give each run its own file")
        rows.append(_row(tokens, path, ln, time_scale))
    if not rows:
        raise fail(path, 1, "no nccl-tests result rows (size count type ... busbw) found")
    table = NcclTable(collective=collective or _collective_from_name(path), rows=rows,
                      avg_busbw_gbps=avg, dtype=rows[-1].dtype)
    ev = Evidence(path=str(path), kind="nccl-tests", format="nccl-tests", nccl=table)
    _cluster(ev, ranks, threads)
    if table.collective is None:
        ev.notes.append("the output does not name its test; name the file after it "
                        "(e.g. all_reduce_perf.txt) to say which collective it measured")
    return ev


def _cluster(ev: Evidence, ranks: dict[int, tuple[str, int, str]],
             threads: tuple[int, int] | None) -> None:
    """Ranks, nodes and GPU from the `# Rank N ... on HOST device D [bus] NAME` lines. An
    excerpt may list only some ranks: the highest rank + 1 and the devices per host bound it."""
    if not ranks:
        ev.notes.append("no rank lines: ranks, nodes and GPU are not stated in this file")
        return
    n_ranks = max(ranks) + 1
    hosts = {h for h, _, _ in ranks.values()}
    per_host = max(d for _, d, _ in ranks.values()) + 1
    ev.ranks = n_ranks
    ev.nodes = max(len(hosts), math.ceil(n_ranks / per_host))
    ev.gpu = ranks[min(ranks)][2]
    if len(ranks) < n_ranks:
        ev.notes.append(f"{len(ranks)} of {n_ranks} rank lines present; nodes = ranks / "
                        f"{per_host} devices per host")
    if threads and len(hosts) == 1 and len(ranks) == n_ranks:
        ev.config["gpus_per_process"] = threads[1]
