"""Display units: GB = 1e9 bytes (as the seeds and datasheets), GiB = 2**30 where asked."""

from __future__ import annotations

GB = 1e9
GIB = 2.0 ** 30


def gb(n_bytes: float, digits: int = 2, *, gib: bool = False) -> str:
    return f"{n_bytes / (GIB if gib else GB):,.{digits}f}"


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1e3:,.{digits}f}"


def pct(fraction: float, digits: int = 1) -> str:
    return f"{fraction * 100:.{digits}f}%"


def count(n: float) -> str:
    """A parameter or token count with an SI suffix: 7.00B, 124.4M, 1.01T."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return f"{n:g}"


def duration(seconds: float) -> str:
    """Human duration: 42.0 s, 13.5 min, 5.2 h, 3.1 days."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
