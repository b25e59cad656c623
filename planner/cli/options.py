"""Option parsing shared by commands: formats and number lists ("8,64,512", "64..1024")."""

from __future__ import annotations

from enum import Enum

from ..errors import InputError
from ..validate import parse_number  # noqa: F401  (the CLI's number parser lives with the checks)


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


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
