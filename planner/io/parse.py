"""Bounded parsing of YAML / TOML / JSON text: every limit is checked before or while parsing.

What is bounded, and why each bound is where it is:

- nesting depth (MAX_DEPTH): a plan needs 3 levels, engine configs 4; the JSON and TOML parsers
  recurse, so a cheap bracket pre-scan refuses deep text before it reaches them;
- values (MAX_NODES) and YAML aliases (MAX_ALIASES): counted while a YAML document is composed,
  so a "billion laughs" document is refused before it expands;
- integers: a literal longer than MAX_INT_DIGITS digits is refused before ``int()`` sees it
  (CPython refuses over 4,300 digits with a ValueError and converting is quadratic), and any
  integer beyond ±MAX_INT, the largest a float64 holds exactly (2^53), is refused: no count
  in a training configuration is that large, and beyond it float and C-long conversions
  downstream overflow;
- floats: must be finite (``.inf``, ``nan``, ``1e400``, which JSON and TOML read as inf).

Every refusal is an ``InputError("<file>:<line>", "<key.path>: <what is allowed>")`` when the
key is known, else ``InputError("<file>", ...)``.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

from planner.errors import InputError
from planner.io.bounds import (MAX_DEPTH, MAX_INT, MAX_INT_DIGITS, MAX_NODES, Refused, YamlSyntax,
                               _Bad, int_bound_reason)


def _json_int(s: str) -> Any:
    reason = int_bound_reason(s)
    return _Bad(reason, s) if reason else int(s)


def _json_float(s: str) -> Any:
    x = float(s)
    return x if math.isfinite(x) else _Bad("must be a finite number", s)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (json keeps the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Refused(f"{key}: given twice", label="")
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


# MAX_INT_DIGITS + 1 digits, underscores allowed between them: the shortest run _prescan refuses
_LONG_RUN = re.compile(r"[0-9](?:_*[0-9]){%d}" % MAX_INT_DIGITS)


def _nothing_to_refuse(text: str) -> bool:
    """Whether _prescan cannot refuse the text, found at C speed: no more opening brackets in
    all than MAX_DEPTH (its depth counts those outside strings) and no run of more than
    MAX_INT_DIGITS digits anywhere (it counts those outside strings and comments), with no
    digit outside ASCII (str.isdigit, which the scan asks, reads ² or ٣ as a digit too)."""
    if text.count("[") + text.count("{") > MAX_DEPTH:
        return False
    if not text.isascii() and any(ch.isdigit() for ch in set(text) if ord(ch) > 127):
        return False
    return _LONG_RUN.search(text) is None


def _prescan(text: str, toml: bool) -> None:
    """Refuse nesting deeper than MAX_DEPTH before a recursive parser sees it, and TOML integer
    literals longer than MAX_INT_DIGITS (tomllib has no integer hook), naming the line: the
    character scan (_scan), unless a quick look shows there is nothing to refuse (a profile's
    10 kB took ~0.4 ms character by character)."""
    if not _nothing_to_refuse(text):
        _scan(text, toml)


def _scan(text: str, toml: bool) -> None:
    """One pass over JSON/TOML text outside strings (and TOML comments): _prescan's refusals."""
    depth, line, run, run_start = 0, 1, 0, 0
    in_str = esc = comment = False
    quote = ""
    for i, ch in enumerate(text):
        if comment and ch != "\n":
            continue
        comment = False
        if in_str:
            if esc:
                esc = False
            elif ch == "\\" and quote == '"':
                esc = True
            elif ch == quote:
                in_str = False
            line += ch == "\n"
            continue
        if ch.isdigit() or (toml and ch == "_" and run):
            run_start = run_start if run else i
            run += ch != "_"
            continue
        if toml and run > MAX_INT_DIGITS and _is_int_literal(text, run_start, i):
            _refuse_literal(text, run_start, i, line)
        run = 0
        if ch == "\n":
            line += 1
        if ch in "\"'":
            in_str, quote = True, ch
        elif toml and ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise Refused(f"nested deeper than {MAX_DEPTH} levels", line)
        elif ch in "]}":
            depth -= 1
    if toml and run > MAX_INT_DIGITS and _is_int_literal(text, run_start, len(text)):
        _refuse_literal(text, run_start, len(text), line)


def _is_int_literal(text: str, start: int, end: int) -> bool:
    """Whether the digit run text[start:end] is an integer (not a float's fraction or exponent,
    not part of a bare key or a date)."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before in "._-:" or after.isalpha() or after in ".eE-:")


def _refuse_literal(text: str, start: int, end: int, line: int) -> None:
    """Refused for the over-long integer literal text[start:end], naming the TOML key assigned
    on its line when there is one."""
    head = text[text.rfind("\n", 0, start) + 1:start]
    m = re.search(r"([A-Za-z0-9_.\-\"']+)\s*=\s*[+-]?$", head)
    key = f"{m.group(1).strip(chr(34) + chr(39))}: " if m else ""
    raise Refused(f"{key}{int_bound_reason(text[start:end]) or 'integer literal too long'}", line,
                  label="")


def _key_line(text: str, key: str, literal: Optional[str]) -> Optional[int]:
    """1-based line of the value of ``key`` (``key:``, ``"key":``, ``key =``): the first line
    from the key's on that holds ``literal`` (a value may sit on the next line), else the key's
    line; None if the key is not found."""
    pat = re.compile(rf"(^|[\s{{,\"'])\"?'?{re.escape(key)}\"?'?\s*[:=]")
    lines = text.splitlines()
    keyed = [n for n, ln in enumerate(lines) if pat.search(ln)]
    if literal is not None:
        for n in keyed:
            for m in range(n, min(n + 3, len(lines))):
                if literal in lines[m]:
                    return m + 1
    return keyed[0] + 1 if keyed else None


def _walk(data: Any, text: str, where: str) -> Any:
    """Iterative check of depth, value count and number bounds over parsed data (no recursion
    of our own); raises InputError naming the key path and line of the first bad number."""
    stack, count = [(data, 1, "")], 0
    while stack:
        cur, d, path = stack.pop()
        count += 1
        if d > MAX_DEPTH:
            raise InputError(where, f"refused: nested deeper than {MAX_DEPTH} levels")
        if count > MAX_NODES:
            raise InputError(where, f"refused: more than {MAX_NODES} values")
        bad = cur if isinstance(cur, _Bad) else None
        if bad is None and isinstance(cur, float) and not math.isfinite(cur):
            bad = _Bad("must be a finite number", None)
        if bad is None and isinstance(cur, int) and not isinstance(cur, bool) \
                and abs(cur) > MAX_INT:
            bad = _Bad(f"integer {cur} is out of range; at most {MAX_INT} (2^53) in magnitude",
                       None)
        if bad is not None:
            leaf = re.sub(r"\[\d+\]", "", path).split(".")[-1]  # the last key, not an index
            line = bad.line or (_key_line(text, leaf, bad.literal) if leaf else None)
            raise InputError(f"{where}:{line}" if line else where,
                             f"{path or 'value'}: {bad.reason}")
        if isinstance(cur, dict):
            stack.extend((v, d + 1, f"{path}.{k}" if path else str(k)) for k, v in cur.items())
        elif isinstance(cur, list):
            stack.extend((v, d + 1, f"{path}[{i}]") for i, v in enumerate(cur))
    return data


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


def _parse(text: str, fmt: str, where: str) -> Any:
    if fmt in ("json", "toml"):
        _prescan(text, fmt == "toml")
    if fmt == "yaml":  # PyYAML is imported by the reader of YAML text only
        from planner.io.yaml_bounded import load_yaml
        return load_yaml(text)
    if fmt == "toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the same parser, published apart
            import tomli as tomllib
        return tomllib.loads(text)
    if fmt == "json":
        import json   # JSON text only: the fit path reads TOML profiles
        return json.loads(text, parse_constant=_no_constant, parse_int=_json_int,
                          parse_float=_json_float, object_pairs_hook=_json_pairs)
    raise InputError(where, f"unknown format {fmt!r}")


def parse_text(text: str, fmt: str, where: str) -> Any:
    """Parse YAML / TOML / JSON text with bounded depth, values, aliases and numbers."""
    try:
        data = _parse(text, fmt, where)
    except Refused as e:
        raise InputError(f"{where}:{e.line}" if e.line else where, f"{e.label}{e}") from None
    except RecursionError:
        raise InputError(where, f"refused: nested deeper than {MAX_DEPTH} levels") from None
    except YamlSyntax as e:
        raise InputError(where, f"invalid YAML{e}") from None
    except ValueError as e:  # json.JSONDecodeError, tomllib.TOMLDecodeError and JSON constants
        if fmt == "json":   # _parse has imported json for it
            import json
            if isinstance(e, json.JSONDecodeError):
                raise InputError(where, f"invalid JSON at line {e.lineno} column {e.colno}: "
                                 f"{e.msg}") from None
        raise InputError(where, f"invalid {fmt.upper()}: {str(e).splitlines()[0]}") from None
    return _walk(data, text, where)
