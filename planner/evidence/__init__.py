"""Measured artifacts from the user's own cluster, read into typed summaries.

`read_evidence(paths)` detects each file's kind from its content (not its name) and returns
one `Evidence` per file: nccl-tests tables, training logs, profiler traces, memory summaries
and snapshots. Directories are read file by file (one trace in memory at a time).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path

from planner.errors import InputError
from planner.evidence.golden import is_ci_config, is_golden, read_ci_config, read_golden, read_json_or_yaml
from planner.evidence.memory import PICKLE_PROTOCOL_BYTE, looks_like_pickle, looks_like_summary, read_snapshot, read_summary, read_timeline
from planner.evidence.model import Evidence
from planner.evidence.nccl import looks_like as _is_nccl
from planner.evidence.nccl import read_nccl
from planner.evidence.source import MAX_JSON_BYTES, MAX_TEXT_BYTES, PROBE_BLOCK_BYTES, fail, open_content, read_bytes, text_lines
from planner.evidence.stats import WARMUP_STEPS
from planner.evidence.trace import read_trace, read_trace_file
from planner.evidence.training import looks_like as _is_training
from planner.evidence.training import read_training

SKIP_SUFFIXES = (".md", ".py", ".sh", ".toml")
# Files read in one command: one per rank of a 1,024-GPU job. Each is read alone (its size
# bounded), so the count is what bounds the time; a directory walk stops at the first file over.
MAX_EVIDENCE_FILES = 1024


def expand(paths: Iterable[str | Path], option: str = "--from") -> list[Path]:
    """Files as given; a directory contributes its files (sorted, hidden ones skipped); more
    than MAX_EVIDENCE_FILES in all is an InputError naming ``option``."""
    out: list[Path] = []
    paths = list(paths)
    if any(not str(p).strip() for p in paths):  # Path("") is ".": the working directory
        raise InputError(option, "empty path; expected a measured evidence file or directory")
    for p in map(Path, paths):
        if os.path.isdir(p):  # never raises (a name too long for the OS is read, and refused)
            found = (f for f in p.rglob("*") if f.is_file() and not f.name.startswith(".")
                     and not f.name.endswith(SKIP_SUFFIXES))
            out += sorted(islice(found, MAX_EVIDENCE_FILES + 1 - len(out)))
        else:
            out.append(p)
        if len(out) > MAX_EVIDENCE_FILES:
            raise InputError(option, f"at most {MAX_EVIDENCE_FILES} evidence files in one run "
                                     "(one per rank of a 1,024-GPU job); give fewer files or "
                                     "a sub-directory")
    return out


def _json_kind(path: Path, raw: bytes, warmup_steps: int) -> Evidence:
    text, data = read_json_or_yaml(path, raw)
    if is_golden(data):
        return read_golden(path, text, data, warmup_steps)
    if isinstance(data, list) and data and isinstance(data[0], list):
        return read_timeline(path, text, data)
    if isinstance(data, dict) and "traceEvents" in data:
        return read_trace(path, data)
    raise fail(path, 1, "JSON that is neither a profiler trace, Megatron golden values nor a "
               "memory timeline")


def read_file(path: str | Path, warmup_steps: int = WARMUP_STEPS,
              option: str = "--from") -> Evidence:
    """One file -> Evidence; an unreadable or unrecognised file is an InputError naming
    ``option`` (where the path came from), then file:line."""
    try:
        return _read_file(Path(path), warmup_steps, option)
    except InputError as e:
        if option and not e.field.startswith(option):
            raise InputError(f"{option}: {e.field}", e.message) from None
        raise


def _head(path: Path, option: str) -> bytes:
    """The first PROBE_BLOCK_BYTES of the file's content (gunzipped): what tells its kind."""
    fh, close = open_content(path, MAX_JSON_BYTES, option)
    try:
        return fh.read(PROBE_BLOCK_BYTES)
    finally:
        close()


def _read_file(path: Path, warmup_steps: int, option: str) -> Evidence:
    # a profiler trace opens a JSON object: streamed (evidence.stream) whatever its key order,
    # never parsed whole; standard input is read whole
    head = None if str(path) == "-" else _head(path, option)
    if head is not None and head.lstrip()[:1] == b"{":
        trace = read_trace_file(path, option)
        if trace is not None:
            return trace
        # another JSON object (golden values): its values were bounded in all while streamed
        return _json_kind(path, read_bytes(path, MAX_TEXT_BYTES, option=option), warmup_steps)
    # whole where a reader needs it all (a pickle, JSON, YAML); a text file is streamed line by
    # line (raw None), only the kind detectors' first lines read before its reader's pass
    raw = read_bytes(path, MAX_TEXT_BYTES, option=option) if head is None or \
        head[:1] == bytes([PICKLE_PROTOCOL_BYTE]) else None
    if raw is not None and looks_like_pickle(raw):
        return read_snapshot(path, raw)
    start = (raw if raw is not None else head or b"")[:4096].lstrip()
    if start[:1] == b"{" or re.match(rb"\[\s*[\[{]", start):  # not `[0] ...` launcher tags
        return _json_kind(path, raw or read_bytes(path, MAX_TEXT_BYTES, option=option),
                          warmup_steps)
    if path.suffix.lower() in (".yaml", ".yml"):
        _, data = read_json_or_yaml(path, raw or read_bytes(path, MAX_TEXT_BYTES, option=option))
        if is_ci_config(data):
            return read_ci_config(path, data)
        raise fail(path, 1, "YAML that is not a Megatron CI model_config (MODEL_ARGS)")
    lines = text_lines(path, raw, limit=20_000)  # what the kind detectors look at, at most
    if looks_like_summary(lines):
        return read_summary(path, raw)
    if _is_nccl(text_lines(path, raw, tags_anywhere=True, limit=400)):
        return read_nccl(path, raw)
    if _is_training(lines):
        return read_training(path, raw, warmup_steps)
    raise fail(path, 1, "not a recognised evidence file (nccl-tests output, training log, "
               "profiler trace JSON, memory_summary text or snapshot pickle)")


def read_evidence(paths: Iterable[str | Path], warmup_steps: int = WARMUP_STEPS,
                  progress: Callable[[int, int, Path], None] | None = None,
                  option: str = "--from") -> list[Evidence]:
    """Every file under `paths`, read one at a time; `progress(i, n, path)` before each;
    ``option`` names where the paths came from (--from, RUNS, --compare) in errors."""
    files = expand(paths, option)
    if not files:
        raise InputError(option, "no files to read (an empty directory?)")
    out = []
    for i, f in enumerate(files):
        if progress is not None:
            progress(i, len(files), f)
        out.append(read_file(f, warmup_steps, option))
    return out


def dumps(evidence: list[Evidence]) -> str:
    """JSON of a list of Evidence (what `dtplan calibrate --from ... -f json` prints)."""
    return json.dumps([e.to_dict() for e in evidence], indent=2)
