"""Fitting a link's α–β constants to measured collective times (nccl-tests rows).

The model is the planner's own (topology.topo_collective_time on a two-level fabric); the fit
searches the link's bus efficiency (achieved ÷ datasheet bandwidth) or per-step latency that
minimises the mean squared log ratio of predicted to measured time over the rows given (Hockney
α–β; nccl-tests doc/PERFORMANCE.md for the bus-bandwidth volumes). The caller fits bandwidth on
the largest messages and latency on the smallest: NCCL switches protocol (LL, LL128, Simple) in
between, which no single α–β line follows. A coarse log grid, then finer ones around the best.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from planner.engine.arrays import FloatArray, Num
from planner.engine.topology import Fabric, topo_collective_time

EFF_RANGE = (0.01, 1.0)          # bus efficiency is a share of the datasheet link rate
LAT_RANGE = (1e-7, 5e-4)         # 0.1 µs .. 500 µs per ring step (plus exactly 0)


def log_rms(predicted: ArrayLike, measured: ArrayLike) -> float:
    """sqrt(mean(ln(pred/meas)^2)) over rows: the typical factor error, in log units."""
    r = np.log(np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float))
    return float(np.sqrt(np.mean(r * r)))


def _fabric(fab: Fabric, domain: str, raw_bw: float, eff: Num, lat: Num,
            oversub: float) -> Fabric:
    if domain == "scale_up":
        return Fabric(raw_bw * eff, lat, fab.inter_bytes_per_s, fab.inter_latency_s)
    return Fabric(fab.intra_bytes_per_s, fab.intra_latency_s, raw_bw * eff / oversub, lat)


def link_times(kind: str, sizes: FloatArray, n: float, per_domain: float, fab: Fabric,
               domain: str, raw_bw: float, eff: float, lat: float,
               oversub: float = 1.0) -> FloatArray:
    """Predicted time (s) of each message size with the `domain` link set to (eff, lat)."""
    # numpy scalars (inf, not ZeroDivisionError, downstream); the cast because numpy < 2's stubs
    # (the engines extra pins numpy 1.26 for megatron-core 0.15) do not make float64 a float
    f = _fabric(fab, domain, raw_bw, cast(Num, np.float64(eff)), cast(Num, np.float64(lat)),
                oversub)
    return np.asarray(topo_collective_time(kind, np.asarray(sizes, float), n, per_domain, f))


def fit_link(kind: str, sizes: FloatArray, times: FloatArray, n: float, per_domain: float,
             fab: Fabric, domain: str, raw_bw: float, oversub: float = 1.0,
             eff: float | None = None, lat: float | None = None) -> tuple[float, float, float]:
    """(bus efficiency, latency s, log_rms) of the `domain` link ("scale_up" or "scale_out")
    that best reproduces `times` (s) for `sizes` (bytes) of collective `kind` over n ranks.
    A given `eff` or `lat` is held fixed and only the other is searched."""
    sizes, times = np.asarray(sizes, float), np.asarray(times, float)
    effs = np.array([eff]) if eff is not None else np.geomspace(*EFF_RANGE, 120)
    lats = np.array([lat]) if lat is not None else np.concatenate(([0.0],
                                                                   np.geomspace(*LAT_RANGE, 120)))
    best = (1.0, 0.0, np.inf)
    for _ in range(3):  # coarse grid, then twice a finer grid around the best point
        E, L = np.meshgrid(effs, lats, indexing="ij")
        f = _fabric(fab, domain, raw_bw, E[..., None], L[..., None], oversub)
        pred = np.asarray(topo_collective_time(kind, sizes[None, None, :], n, per_domain, f))
        err = np.mean(np.log(pred / times[None, None, :]) ** 2, axis=-1)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        if err[i, j] < best[2]:
            best = (float(effs[i]), float(lats[j]), float(err[i, j]))
        e0, l0 = best[0], max(best[1], LAT_RANGE[0])
        if eff is None:
            effs = np.clip(np.geomspace(e0 / 1.15, e0 * 1.15, 41), *EFF_RANGE)
        if lat is None:
            lats = np.concatenate(([0.0], np.geomspace(l0 / 1.5, l0 * 1.5, 41)))
    return best[0], best[1], float(np.sqrt(best[2]))
