"""Numbers as people type them on a command line: 70e9, 4_000_000, 70B, 4M, 15T, 4Mi, 8k.

One parser for every numeric option (and for counts inside text, such as --tokens-per-batch).
Counts use SI suffixes (K/k = 10^3, M = 10^6, B/G = 10^9, T = 10^12: "70B parameters", "15T
tokens"; lower-case m/b/t too: "70b") and binary ones (Ki/Mi/Gi/Ti = 2^10..2^40: "4Mi tokens" = 4,194,304). Sequence
lengths are the exception people expect: "8k", "32k", "128K" name powers of two (Llama 3's 8K
context is 8,192 positions; Llama 3.1's 128K is max_position_embeddings = 131,072 in its
config.json), so with ``sequence=True`` K/k and M are 2^10 and 2^20.
"""

from __future__ import annotations

import math

from planner.errors import InputError
from planner.io.validate import within

SI_SUFFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12,
               "m": 1e6, "b": 1e9, "t": 1e12}   # 70b, 15t as often typed (no milli for counts)
BINARY_SUFFIXES = {"Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
SUFFIXES = {**SI_SUFFIXES, **BINARY_SUFFIXES}
SEQUENCE_SUFFIXES = {**BINARY_SUFFIXES, "k": 2.0 ** 10, "K": 2.0 ** 10, "M": 2.0 ** 20}
HINT = "suffixes K, M, B, T or Ki, Mi, Gi, Ti allowed"
SEQUENCE_HINT = "suffixes k = 1024 and M = 2^20 allowed: 8k = 8192"


def parse_number(field: str, text: str | float, *, sequence: bool = False) -> float:
    """A finite number from `text` ("70e9", "4_000_000", "70B", "4Mi", "8k"), or an InputError
    naming `field` and the allowed suffixes. ``sequence``: K/k and M are powers of two."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        x = float(text)
    else:
        table = SEQUENCE_SUFFIXES if sequence else SUFFIXES
        s = str(text).strip().replace("_", "")
        if not s.isascii():   # float() reads ２５６ and ٨; plan files (YAML, TOML, JSON) do not
            raise InputError(field, f"must be written in ASCII digits, got {_shown(text)}")
        scale = 1.0
        for suf in sorted(table, key=len, reverse=True):
            if s.endswith(suf) and len(s) > len(suf):
                s, scale = s[: -len(suf)], table[suf]
                break
        try:
            x = float(s) * scale
        except (ValueError, OverflowError):
            raise InputError(field, f"must be a number ({SEQUENCE_HINT if sequence else HINT}), "
                                    f"got {_shown(text)}") from None
    if math.isnan(x) or math.isinf(x):
        raise InputError(field, f"must be a finite number, got {_shown(text)}")
    return x


def parse_whole(field: str, text: str | float, *, sequence: bool = False,
                lower: float | None = None, upper: float | None = None) -> int:
    """A whole number (8, 8.0, 8k, 4M) within [lower, upper], or an InputError naming `field`."""
    x = parse_number(field, text, sequence=sequence)
    if x != int(x):
        raise InputError(field, f"must be a whole number, got {_shown(text)}")
    if lower is not None and x < lower:
        raise InputError(field, f"must be at least {lower}, got {_shown(text)}")
    if upper is not None and x > upper:
        raise InputError(field, f"must be at most {upper}, got {_shown(text)}")
    return int(x)


def parse_real(field: str, text: str | float, *, lower: float | None = None,
               upper: float | None = None) -> float:
    """A finite number within [lower, upper] (`parse_number`'s forms), or an InputError naming
    `field` and the range."""
    x = parse_number(field, text)
    return within(field, x, lower, upper, fmt=".10g", got=_shown(text))


def format_number(n: float, *, sequence: bool = False) -> str:
    """The shortest text `parse_number` reads back as exactly `n`: 4000000 → "4M", 8192 with
    ``sequence`` → "8k", 70553706496 → "70553706496" (no suffix divides it cleanly)."""
    if n == int(n) and abs(n) < 2 ** 53:
        n = int(n)
    best = repr(n) if isinstance(n, float) else str(n)
    table = SEQUENCE_SUFFIXES if sequence else SUFFIXES
    for suf, scale in table.items():
        q = n / scale
        if not 1 <= abs(q) < (1024 if suf in BINARY_SUFFIXES or sequence else 1000):
            continue   # 68900104Ki is no easier to read than 70553706496
        text = (f"{int(q)}" if q == int(q) else f"{q:.6g}") + suf
        if len(text) < len(best) and parse_number("", text, sequence=sequence) == n:
            best = text
    return best


def _shown(text: object) -> str:
    s = str(text)
    return repr(s if len(s) <= 40 else f"{s[:20]}…({len(s)} characters)")
