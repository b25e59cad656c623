"""Option parsing shared by commands: formats and number lists ("8,64,512", "64..1024")."""

from __future__ import annotations

import math
from enum import Enum

from ..errors import InputError


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


# Suffixes as people write counts: 70B parameters, 4M tokens, 15T tokens (SI, powers of 1000);
# Ki/Mi/Gi/Ti are powers of 1024 (4Mi tokens = 4,194,304).
SUFFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12,
            "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}


def parse_number(field: str, text: str) -> float:
    """A number, with an optional K/M/B/T (or Ki/Mi/Gi/Ti) suffix: "70e9", "70B", "4Mi", "1_000"."""
    s = str(text).strip().replace("_", "")
    scale = 1.0
    for suf in sorted(SUFFIXES, key=len, reverse=True):
        if s.endswith(suf) and len(s) > len(suf):
            s, scale = s[: -len(suf)], SUFFIXES[suf]
            break
    try:
        x = float(s) * scale
    except ValueError:
        raise InputError(field, f"must be a number (suffixes K, M, B, T or Ki, Mi, Gi, Ti allowed), "
                                f"got {text!r}") from None
    if math.isnan(x) or math.isinf(x):
        raise InputError(field, f"must be a finite number, got {text!r}")
    return x


def parse_list(field: str, values: list[str] | str | None) -> list[float]:
    """Repeated options and comma lists: ["8,64", "512"] → [8, 64, 512]. "a..b" expands to the
    powers of two from a to b (for GPU counts)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[float] = []
    for item in values:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if ".." in part:
                lo_s, hi_s = part.split("..", 1)
                lo, hi = parse_number(field, lo_s), parse_number(field, hi_s)
                if lo <= 0 or hi < lo:
                    raise InputError(field, f"range {part!r} must be low..high with 0 < low ≤ high")
                x = lo
                while x <= hi:
                    out.append(x)
                    x *= 2
                if out[-1] != hi:
                    out.append(hi)
            else:
                out.append(parse_number(field, part))
    if not out:
        raise InputError(field, "needs at least one value")
    return out
