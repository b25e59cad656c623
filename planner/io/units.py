"""Display units: GB = 1e9 bytes (as the seeds and datasheets), GiB = 2**30 where asked."""

from __future__ import annotations

GB = 1e9
GIB = 2.0 ** 30


def gb(n_bytes: float, digits: int = 2, *, gib: bool = False) -> str:
    return f"{n_bytes / (GIB if gib else GB):,.{digits}f}"


def size(n_bytes: float, big: bool = False, *, gib: bool = False) -> str:
    """Bytes with their unit: GB (or GiB), TB (or TiB) with `big`, two decimals."""
    unit, scale = (("TiB", 2.0 ** 40) if gib else ("TB", 1e12)) if big else \
        (("GiB", GIB) if gib else ("GB", GB))
    return f"{n_bytes / scale:,.2f} {unit}"


def capacity(n_bytes: float, *, gib: bool = False) -> str:
    """A GPU's memory as the vendor states it, with the other unit beside: HBM sizes are whole
    GiB ("80 GB" on an H100 datasheet is 80 GiB = 85.9e9 bytes), so "80 GiB (85.9 GB)";
    with `gib` the GiB figure leads either way. A size that is not whole GiB prints in GB
    first ("40.0 GB (37.3 GiB)")."""
    g, gi = n_bytes / GB, n_bytes / GIB
    if gib or abs(gi - round(gi)) < 1e-6:
        return f"{gi:,.{0 if abs(gi - round(gi)) < 1e-6 else 1}f} GiB ({g:,.1f} GB)"
    return f"{g:,.1f} GB ({gi:,.1f} GiB)"


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


def hours(seconds: float) -> str:
    """A long mean time (an MTBF) in whole hours: 50,677 h."""
    return f"{seconds / 3600:,.0f} h"


def duration(seconds: float) -> str:
    """Human duration: 42.0 s, 13.5 min, 5.2 h, 3.1 days."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def rule_cells(name: str, measured: str, limit: str, peak: float, usable: float,
               gib: bool) -> tuple[str, str]:
    """(measured, limit) of a rule as shown: the memory rule's in GiB under ``--gib`` (its text
    is in GB, from the same two byte counts)."""
    if not gib or name != "fits-in-memory":
        return measured, limit
    return f"{gb(peak, gib=True)} GiB", f"≤ {gb(usable, gib=True)} GiB"
