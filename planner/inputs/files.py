"""Safe reading of the files the CLI takes: bounded before parsing, special files refused.

Loading is defensive because a CI gate reads files from pull requests: the size is checked
before reading (1 MB), binary and non-UTF-8 bytes are refused, YAML goes through a SafeLoader
that bounds aliases, nodes and nesting depth (a "billion laughs" document is refused while it
is being composed). Every problem is one ``InputError``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError

MAX_FILE_BYTES = 1_000_000      # plan and engine-config files; real ones are a few kB
MAX_DEPTH = 32                  # nesting of mappings/lists; a plan needs 3
MAX_NODES = 20_000              # YAML nodes composed (after alias expansion counting)
MAX_ALIASES = 100               # YAML alias uses; plans need none


# ---- safe reading ----------------------------------------------------------------------------

def read_text(path: str | Path, *, what: str = "plan file") -> str:
    """The file's text, refusing missing, special, oversized, binary and non-UTF-8 files
    before reading more than MAX_FILE_BYTES."""
    p = Path(path)
    where = str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(where, f"file not found; expected a {what}") from None
    except OSError as e:
        raise InputError(where, f"cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(where, f"is a directory; expected a {what}")
    if not stat.S_ISREG(st.st_mode):  # FIFOs, devices: reading could block or never end
        raise InputError(where, f"not a regular file; expected a {what}")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(where, f"file is {st.st_size} bytes; a {what} must be at most "
                                f"{MAX_FILE_BYTES // 1_000_000} MB")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(where, f"cannot read ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:  # grew between stat and read
        raise InputError(where, f"file is larger than {MAX_FILE_BYTES // 1_000_000} MB")
    if not raw.strip():
        raise InputError(where, f"file is empty; expected a {what}")
    if b"\x00" in raw:
        raise InputError(where, f"binary data (NUL bytes); expected a text {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(where, f"not UTF-8 text (bad byte at offset {e.start})") from None
    return text.removeprefix("\ufeff")


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs and deep nesting while composing, before any
    expansion: it counts alias uses, nodes (an alias counts as the size of its target) and depth."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} YAML aliases (alias bomb?)")
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            self._nodes += self._sizes.get(id(target), 1)
            if self._nodes > MAX_NODES:
                raise _Refused(f"YAML expands to more than {MAX_NODES} nodes (alias bomb?)")
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
        before = self._nodes
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} YAML nodes")
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._nodes - before
        self._depth -= 1
        return node


class _Refused(Exception):
    pass


def _depth_ok(obj: Any, limit: int = MAX_DEPTH) -> None:
    """Iterative depth/size check for parsed JSON/TOML (no recursion of our own)."""
    stack, count = [(obj, 1)], 0
    while stack:
        cur, d = stack.pop()
        count += 1
        if d > limit:
            raise _Refused(f"nested deeper than {limit} levels")
        if count > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} values")
        if isinstance(cur, dict):
            stack.extend((v, d + 1) for v in cur.values())
        elif isinstance(cur, list):
            stack.extend((v, d + 1) for v in cur)


def _bracket_depth(text: str) -> int:
    """Upper bound on JSON/TOML nesting from brackets outside strings (cheap pre-scan so a
    deeply nested document never reaches a recursive parser)."""
    depth = best = 0
    in_str = esc = False
    quote = ""
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def detect_format(path: str | Path, text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".toml":
        return "toml"
    if suffix == ".json":
        return "json"
    head = text.lstrip()[:1]
    return "json" if head in "{[" and head else "yaml"


def parse_text(text: str, fmt: str, where: str) -> Any:
    """Parse YAML / TOML / JSON text with bounded size, aliases and depth."""
    try:
        if fmt in ("json", "toml") and _bracket_depth(text) > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
        if fmt == "yaml":
            loader = _BoundedLoader(text)
            try:
                data = loader.get_single_data()
            finally:
                loader.dispose()
        elif fmt == "toml":
            import tomllib
            data = tomllib.loads(text)
        elif fmt == "json":
            data = json.loads(text, parse_constant=_no_constant)
        else:  # pragma: no cover
            raise InputError(where, f"unknown format {fmt!r}")
        _depth_ok(data)
    except _Refused as e:
        raise InputError(where, f"refused: {e}") from None
    except RecursionError:
        raise InputError(where, f"refused: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(where, f"invalid YAML{at}: {problem}") from None
    except json.JSONDecodeError as e:
        raise InputError(where, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except ValueError as e:  # tomllib.TOMLDecodeError and JSON constants
        raise InputError(where, f"invalid {fmt.upper()}: {e}") from None
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def load_document(path: str | Path, *, what: str = "plan file") -> tuple[str, str, Any]:
    """(text, format, parsed data) of a plan or engine-config file."""
    text = read_text(path, what=what)
    fmt = detect_format(path, text)
    return text, fmt, parse_text(text, fmt, str(path))


# ---- paths referenced by a plan ----------------------------------------------------------------

def safe_reference(ref: str, base_dir: Path, key: str, what: str) -> Path:
    """Resolve a path written in a plan: relative to the plan's directory, it must stay inside
    that directory or the working directory, and be a readable regular file (or a directory
    holding config.json for models)."""
    if not ref.strip() or "\x00" in ref:
        raise InputError(key, "must be a non-empty path")
    p = Path(ref)
    p = (base_dir / p) if not p.is_absolute() else p
    try:
        resolved = p.resolve(strict=False)
    except (OSError, RuntimeError) as e:
        raise InputError(key, f"{ref}: cannot resolve ({e})") from None
    roots = [base_dir.resolve(), Path.cwd().resolve()]
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise InputError(key, f"{ref}: resolves outside the plan's directory and the working "
                              "directory; refusing to read it")
    if resolved.is_dir() and what == "config.json":
        resolved = resolved / "config.json"
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        raise InputError(key, f"{ref}: file not found") from None
    except OSError as e:
        raise InputError(key, f"{ref}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(key, f"{ref}: not a regular file; expected a {what}")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(key, f"{ref}: file is {st.st_size} bytes; a {what} must be at most 1 MB")
    if not os.access(resolved, os.R_OK):
        raise InputError(key, f"{ref}: not readable (permission denied)")
    return resolved
