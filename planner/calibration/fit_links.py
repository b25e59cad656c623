"""Closed loop, part 1: fit the constants the evidence speaks to, with before/after residuals.

- nccl-tests tables -> the bus efficiency and per-step latency of the link the tested group
  crosses (NVLink domain or network), with the planner's own collective model (engine.fit).
- step times / tokens per second of a run whose layout is known -> one compute-speed factor
  applied to the GEMM and attention efficiencies together (a step time cannot tell them apart).
- peak reserved vs peak allocated memory -> the allocator's fragmentation share.
Everything else in the profile stays as it was; the result says which constants moved.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.engine.fit import fit_link, link_times
from planner.engine.topology import fabric
from planner.specs.hardware import HardwareProfile
from planner.evidence.model import Evidence

KIND = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
        "alltoall": "all-to-all", "sendrecv": "send-recv"}
IDENTIFIED_SHARE = 0.5   # a term must be at least half of some row's time to be identified
BIG_ROWS = 8.0           # bandwidth from rows within 8x of the largest message
SMALL_ROWS = 8.0         # latency from rows within 8x of the smallest


@dataclass
class ConstantFit:
    """One constant: profile value, fitted value (None = not identified), the residual of the
    evidence under each (median |time error| %), and where it came from."""

    key: str
    before: float
    after: float | None
    residual_before_pct: float | None
    residual_after_pct: float | None
    evidence: str
    note: str = ""


def _pct(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.median(np.abs(pred / meas - 1.0)) * 100.0)


def _group(n: int, nodes: int, hw: HardwareProfile) -> tuple[float, float, str, float, float]:
    """(n, members per NVLink domain, domain, datasheet bandwidth, oversubscription) of a group
    of n ranks on `nodes` nodes."""
    su, so = hw.scale_up, hw.scale_out
    on_nvlink = n <= su.gpus_per_domain and (nodes == 1 or su.gpus_per_domain > su.gpus_per_node)
    if on_nvlink:
        return float(n), float(n), "scale_up", su.bandwidth_bytes_per_s, 1.0
    per_node = max(1.0, n / nodes)
    return float(n), per_node, "scale_out", so.nic_bytes_per_s, so.oversubscription


def _profile_link(hw: HardwareProfile, domain: str) -> tuple[float, float]:
    link = hw.scale_up if domain == "scale_up" else hw.scale_out
    return link.bus_efficiency, link.latency_s


def fit_nccl(e: Evidence, hw: HardwareProfile) -> list[ConstantFit]:
    """Bus efficiency and latency of the link one nccl-tests file measured."""
    name, table = Path(e.path).name, e.nccl
    kind = KIND.get(table.collective or "") if table is not None else None
    if table is None or kind is None or not e.ranks or e.ranks < 2:
        why = "collective not named" if kind is None else "ranks not stated"
        return [ConstantFit("link", 0.0, None, None, None, name, f"not fitted: {why}")]
    n, per_domain, domain, raw_bw, oversub = _group(e.ranks, e.nodes or 1, hw)
    rows = [r for r in table.rows if r.size_bytes > 0 and r.time_us > 0]
    sizes = np.array([r.size_bytes for r in rows], float)
    times = np.array([r.time_us for r in rows], float) * 1e-6
    fab = fabric(hw)
    eff0, lat0 = _profile_link(hw, domain)
    before = link_times(kind, sizes, n, per_domain, fab, domain, raw_bw, eff0, lat0, oversub)
    big = sizes >= sizes.max() / BIG_ROWS   # the bandwidth plateau
    small = sizes <= sizes.min() * SMALL_ROWS  # the latency floor

    def fitted(sel: np.ndarray, eff: float | None = None,
               lat: float | None = None) -> tuple[float, float]:
        """(eff, lat) fitted on the rows `sel`, the one given held fixed."""
        e_, l_, _ = fit_link(kind, sizes[sel], times[sel], n, per_domain, fab, domain, raw_bw,
                             oversub, eff=eff, lat=lat)
        return e_, l_

    eff, _ = fitted(big, lat=lat0)
    _, lat = fitted(small, eff=eff)
    eff, _ = fitted(big, lat=lat)  # once more with the new α
    after = link_times(kind, sizes, n, per_domain, fab, domain, raw_bw, eff, lat, oversub)
    bw_only = link_times(kind, sizes, n, per_domain, fab, domain, raw_bw, eff, 0.0, oversub)
    bw_share = float(np.max(bw_only / after))
    lat_share = float(np.max(1.0 - bw_only / after))
    b, a = _pct(before, times), _pct(after, times)
    shape = f"{int(n)} ranks, {per_domain:g} per NVLink domain"
    fits = [ConstantFit(f"{domain}.bus_efficiency", eff0,
                        eff if bw_share >= IDENTIFIED_SHARE else None, b, a, name,
                        f"{table.collective}, {shape}" + (
                            "" if bw_share >= IDENTIFIED_SHARE else
                            "; messages too small to see the bandwidth")),
            ConstantFit(f"{domain}.latency_us", lat0 * 1e6,
                        lat * 1e6 if lat_share >= IDENTIFIED_SHARE else None, b, a, name,
                        f"{table.collective}, {shape}" + (
                            "" if lat_share >= IDENTIFIED_SHARE else
                            "; no latency-bound rows"))]
    if eff >= 0.999 and fits[0].after is not None:
        fits[0].note += "; at the cap of 1.0 (in-switch reduction or a low datasheet figure)"
    return fits


def combine(fits: list[ConstantFit]) -> dict[str, float]:
    """One value per constant: the median over the files that identified it."""
    by_key: dict[str, list[float]] = {}
    for f in fits:
        if f.after is not None:
            by_key.setdefault(f.key, []).append(f.after)
    return {k: statistics.median(v) for k, v in by_key.items()}


def fit_fragmentation(e: Evidence, default: float,
                      states: float | None = None) -> ConstantFit | None:
    """reserved = allocated + f × (allocated − states) (engine.allocator.reserved_bytes): f from
    the peaks a memory artifact states. `states` is the estimate's persistent bytes (weights,
    gradients, optimizer) when the job is known; without it f is taken over all allocated bytes,
    a lower bound on the share of the bytes freed within a step."""
    m = e.memory
    if m is None or not m.peak_reserved_bytes or not m.peak_allocated_bytes:
        return None
    alloc, res = m.peak_allocated_bytes, m.peak_reserved_bytes
    churn = alloc - states if states is not None and states < alloc else alloc
    f = max(0.0, (res - alloc) / churn)
    before = abs((alloc + default * churn) / res - 1.0) * 100.0
    over = "the bytes freed within a step" if churn < alloc else \
        "all allocated bytes (a lower bound: give the job to subtract its states)"
    return ConstantFit("budget.fragmentation_fraction", default, f, before, 0.0,
                       Path(e.path).name,
                       f"(peak reserved - peak allocated) over {over}; pass --fragmentation "
                       f"{f:.3f} (a budget option, not a hardware constant)")