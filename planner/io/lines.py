"""Where a key path (``layout.tp``) or a command-line flag sits in a file's text: the line
that `check` annotates and that plan-file errors name (``plan.yaml:7: layout.tp: …``)."""

from __future__ import annotations

import re

from planner.errors import InputError, InputErrors

__all__ = ["at_line", "find_key_line", "with_lines"]


def _segment_patterns(seg: str) -> list[re.Pattern]:
    s = re.escape(seg)
    if seg.startswith("-"):  # a command-line flag
        return [re.compile(rf"(?<![\w-]){s}(?=[\s=\"']|$)")]
    return [re.compile(rf"^\s*(?:-\s+)?[\"']?{s}[\"']?\s*[:=]"),          # key: / key = / "key":
            re.compile(rf"^\s*\[+\s*(?:[\w.\-]+\.)?{s}\s*\]+"),              # [section] / [a.seg]
            re.compile(rf"[{{,]\s*[\"']?{s}[\"']?\s*[:=]")]                    # flow / inline tables


def find_key_line(text: str, key: str | None) -> int | None:
    """1-based line of a dotted key path (``layout.tp``) or a flag, by a simple scan: each
    segment is searched from the line where the previous one was found. Comment lines are
    skipped. Returns the deepest segment found, or None. A flag given more than once is at
    its last line: argparse (Megatron-LM's) keeps the last value."""
    if not key:
        return None
    lines = text.splitlines()
    if key.startswith("-"):
        pat = _segment_patterns(key)[0]
        hits = [i + 1 for i, line in enumerate(lines)
                if not line.lstrip().startswith(("#", "//")) and pat.search(line)]
        return hits[-1] if hits else None
    segs = [s for s in key.split(".") if s]
    start, found = 0, None
    for seg in segs:
        pats = _segment_patterns(seg)
        for i in range(start, len(lines)):
            stripped = lines[i].lstrip()
            if stripped.startswith("#") or stripped.startswith("//"):
                continue
            if any(p.search(lines[i]) for p in pats):
                start, found = i, i + 1
                break
        else:
            break
    return found


def at_line(where: str, path: str, text: str | None) -> str:
    """An error's field with its line when the file's text is known: ``where:7: path``, the
    key's line, or for a key that is not there (missing) the line of the deepest mapping of
    its path that is (find_key_line), line 1 for a top-level key or the whole document."""
    if not where:
        return path
    if text is None:
        return f"{where}: {path}"
    line = (find_key_line(text, path) if path != "plan" else None) or 1
    return f"{where}:{line}: {path}"


def with_lines(e: InputError, where: str, text: str | None) -> InputError:
    """An InputError (or InputErrors) whose field is ``where: key`` relabelled
    ``where:line: key`` (at_line); others, and all without the file's text, unchanged."""
    if isinstance(e, InputErrors):
        return InputErrors([with_lines(x, where, text) for x in e.errors])
    head = f"{where}: "
    if text is None or not where or not e.field.startswith(head):
        return e
    return InputError(at_line(where, e.field[len(head):], text), e.message)
