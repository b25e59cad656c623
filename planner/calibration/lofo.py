"""Leave-one-family-out residuals of dtplan's step time over every public run it expresses.

Observations: the runs of ``planner/data/calibration_runs.json`` (MLPerf logs, flash-attention's
README) and the shared sets (Megatron-LM papers and torchtitan on A100, ``calibration_cases.json``;
torchtitan on 500 W H100, ``calibration_modern.json``). A family is one source × framework × GPU
generation. Each observation is a step time: a published rate r becomes a step by
step_measured = step_predicted × r_predicted / r_published.

The constants fitted end to end are a profile's ``sustained_matmul_fraction`` (the share of the
kernel-benchmark GEMM ceiling a training step sustains: nothing below the end-to-end step
measures it) and the Megatron profile's host time per step (``step_host_s``, host_fit.py). For
each family F and each profile P its runs used, the share is refitted on P's runs of the *other*
families: the value minimising Σ_families mean_runs (ln predicted/measured)² (each family weighs
the same, however many runs it has). Where no other family ran on P the profile's own value
stands: the family is then predicted from kernel-level constants alone. The host time is refitted
alike on the other families' runs of the public-run set (at the declared shares). Every other
constant is the profile's as declared (hardware and framework TOML, with their sources).

Speed: each observation is evaluated once at the profile's value, and, on profiles that more than
one family ran on, at the shares of ``GRID``; a fold's refit interpolates ln(step) in the share
(piecewise linear), so the whole cross-validation costs one pass of evaluations.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from planner.calibration import host_fit, published
from planner.calibration.modern import MODERN_PROFILE, modern_calibration_rows
from planner.calibration.report import (CalibrationRow, ConstantUse, CrossValidation,
                                        FamilyResidual, MemoryResidual, RegimeBand, RunResidual)
from planner.calibration.runs import PublicRun, evaluate_run, load_runs
from planner.evaluation.error_band import derived_band, regime_basis
from planner.specs.efficiency import Efficiency
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import load_profile

FITTED = "sustained_matmul_fraction"
GRID = (0.5, 0.7, 1.0)    # the share's range: MAMF ceiling × (0.5 .. 1)
FINE = np.linspace(GRID[0], GRID[-1], 501)      # the refit's search, on the interpolated curves
# issue #30's targets, reported as met or not: step time median and worst, peak memory
TARGET_MEDIAN_PCT, TARGET_WORST_PCT, TARGET_MEMORY_PCT = 10.0, 25.0, 10.0
GIB = float(2**30)

# The shared sets' families: case-id prefix -> (source key, citation).
PAPER_SOURCES = {
    "korthikanti-": ("korthikanti2022", "Korthikanti et al. 2022 Table 5 and Sec. 6.3 "
                                        "(planner/data/calibration_cases.json)"),
    "narayanan-": ("narayanan2021", "Narayanan et al. SC21 Table 1 "
                                    "(planner/data/calibration_cases.json)"),
    "torchtitan-": ("torchtitan-docs", "pytorch/torchtitan docs/performance.md, 64 A100 80GB "
                                       "(planner/data/calibration_cases.json)"),
}
MODERN_SOURCE = ("torchtitan-benchmarks", "pytorch/torchtitan benchmarks/, 500 W 96 GB H100 "
                                          "(the bundled modern H100 set)")


@dataclass(frozen=True)
class Obs:
    """One step-time observation: its family, profile, measured and predicted step (s)."""

    id: str
    family: str
    hardware: str
    measured: float
    predicted: float
    optimizer_s: float = 0.0         # the GPU's optimizer update in `predicted` (run set)
    host_s: float | None = None      # the framework's declared host time, where refitted


def with_share(hw: HardwareProfile, share: float) -> HardwareProfile:
    """The profile with another sustained GEMM share (everything else as declared)."""
    return replace(hw, efficiency=replace(hw.efficiency, sustained_matmul_fraction=share))


def _paper_obs(row: CalibrationRow, source: str) -> Obs:
    """A shared-set row as a step: iteration time as is; a rate through the predicted step."""
    pred = row.step_time_s
    meas = row.published if row.metric == "iteration_time_s" else \
        pred * row.predicted / row.published
    if row.metric == "iteration_time_s":
        pred = row.predicted
    fw, gen = row.regime.split("/")[:2]
    return Obs(row.case, f"{source}/{fw}/{gen}", row.hardware, meas, pred)


def _observe(profile: str, hw: HardwareProfile) -> dict[str, Obs]:
    """Every observation that ran on `profile`, evaluated on `hw` (that profile or a variant)."""
    out: dict[str, Obs] = {}
    for run in load_runs().runs:
        if run.hardware == profile:
            step0, update, declared = host_fit.gpu_only(run, hw)
            step = float(host_fit.step_at(step0, update, 0.0, declared))
            assert run.measured.step_time_s is not None, run.id
            # refitted where the profile's host time applies; a run whose settings state its own
            # (no host sync: ON_DEVICE_CLIP_GRAD) keeps it
            host = declared if load_runs().frameworks[run.framework].profile == \
                host_fit.FRAMEWORK and "time.step_host_s" not in run.settings else None
            out[run.id] = Obs(run.id, run.family, profile, run.measured.step_time_s, step,
                              update, host)
    if profile == published.DEFAULT_PROFILE:
        for row in published.paper_rows(hw)[0]:
            src = next(v[0] for k, v in PAPER_SOURCES.items() if row.case.startswith(k))
            out[row.case] = _paper_obs(replace(row, hardware=profile), src)
    if profile == MODERN_PROFILE:
        own = hw == load_profile(profile)
        for row in (_modern_own()[0] if own else modern_calibration_rows(hw, str)[0]):
            out[row.case] = _paper_obs(row, MODERN_SOURCE[0])
    return out


@lru_cache(maxsize=1)
def _modern_own() -> tuple[list[CalibrationRow], list[CalibrationRow]]:
    """The modern rows on their own profile: throughput and memory, evaluated once."""
    return modern_calibration_rows(None, str)


def _profiles() -> list[str]:
    runs = {r.hardware for r in load_runs().runs}
    return sorted(runs | {published.DEFAULT_PROFILE, MODERN_PROFILE})


@dataclass(frozen=True)
class _Curves:
    """ln(predicted/measured) of each observation at the profile's share and on GRID."""

    base: dict[str, Obs]
    shares: np.ndarray                   # sorted shares evaluated (GRID ∪ the profile's)
    log_ratio: dict[str, np.ndarray]     # id -> ln ratio at each share

    def at(self, ids: list[str], share: float | np.ndarray) -> np.ndarray:
        """ln ratio of each id at `share` (rows: ids; columns: shares): the ratio interpolated
        linearly in 1/share (GEMM time goes as 1/share, what does not compute stays: exact while
        no overlap changes which term shows)."""
        inv = 1.0 / np.asarray(share)
        return np.log([np.interp(inv, 1.0 / self.shares[::-1], np.exp(self.log_ratio[i][::-1]))
                       for i in ids])


def _curves(profile: str) -> tuple[dict[str, Obs], _Curves | None]:
    """Observations at the profile's share, and the share curves where ≥ 2 families ran."""
    hw = load_profile(profile)
    base = _observe(profile, hw)
    if len({o.family for o in base.values()}) < 2:
        return base, None
    s0 = getattr(hw.efficiency, FITTED)
    shares = sorted(set(GRID) | {s0})
    at = {s: (base if s == s0 else _observe(profile, with_share(hw, s))) for s in shares}
    log_ratio = {i: np.array([math.log(at[s][i].predicted / at[s][i].measured) for s in shares])
                 for i in base}
    return base, _Curves(base, np.array(shares), log_ratio)


def refit(curves: _Curves, families: set[str]) -> float:
    """The share minimising Σ over `families` of the mean squared ln residual of its runs."""
    loss = np.zeros_like(FINE)
    for fam in families:
        ids = [i for i, o in curves.base.items() if o.family == fam]
        loss += np.mean(curves.at(ids, FINE) ** 2, axis=0)
    return float(FINE[int(np.argmin(loss))])


@lru_cache(maxsize=1)
def cross_validate() -> CrossValidation:
    """Leave-one-family-out: per family, its runs predicted with the fitted constant refitted
    without it; the bands each regime derives from them; the memory rows."""
    data = {p: _curves(p) for p in _profiles()}
    obs = [o for base, _ in data.values() for o in base.values()]
    families = sorted({o.family for o in obs})
    fams: list[FamilyResidual] = [_family(f, obs, data) for f in families]
    fitted_all = {p: refit(c, {o.family for o in c.base.values()})
                  for p, (_, c) in data.items() if c is not None}
    errs = [(abs(r.error_pct), r.run) for f in fams for r in f.residuals]
    worst = max(errs)
    rs = load_runs()
    memory = memory_residuals()
    return CrossValidation(
        runs=len(errs), families=fams,
        generations=sorted({f.family.split("/")[2] for f in fams}),
        median_abs_error_pct=statistics.median(e for e, _ in errs),
        worst_abs_error_pct=worst[0], worst_run=worst[1],
        target_median_pct=TARGET_MEDIAN_PCT, target_worst_pct=TARGET_WORST_PCT,
        refit=(f"efficiency.{FITTED} of each profile a family ran on, refitted on that profile's "
               "runs of the other families (each family weighing the same); the profile's own "
               f"value where no other family ran on it; {host_fit.FRAMEWORK}.{host_fit.KEY} "
               "refitted on the other families' runs"),
        fitted_all=fitted_all, bands=regime_bands(fams), memory=memory,
        memory_target_pct=TARGET_MEMORY_PCT,
        memory_within=sum(abs(m.error_pct) <= TARGET_MEMORY_PCT for m in memory),
        not_expressible={r.id: r.reason for r in rs.not_expressible},
        notes=[f"Sources: {k}: {v}" for k, v in rs.sources.items()] + [
            f"Framework {k}: {v.why}" for k, v in rs.frameworks.items()] + [rs.not_collected])


def _family(fam: str, obs: list[Obs], data: dict[str, tuple[dict[str, Obs], _Curves | None]]
            ) -> FamilyResidual:
    """One family's runs predicted with each profile's share refitted without the family."""
    mine = [o for o in obs if o.family == fam]
    residuals: list[RunResidual] = []
    constants: list[ConstantUse] = []
    for profile in sorted({o.hardware for o in mine}):
        base, curves = data[profile]
        ids = [o.id for o in mine if o.hardware == profile]
        others = {o.family for o in base.values()} - {fam}
        hw = load_profile(profile)
        if curves is None or not others:
            share, source, kind = _fallback(hw)
            at = base if share == getattr(hw.efficiency, FITTED) else \
                _observe(profile, with_share(hw, share))
            ratios = [at[i].predicted / base[i].measured for i in ids]
            constants.append(ConstantUse(key=f"{profile}.{FITTED}", value=share, source=source,
                                         kind=kind))
        else:
            share = refit(curves, others)
            ratios = [math.exp(x) for x in curves.at(ids, share)]
            constants.append(ConstantUse(
                key=f"{profile}.{FITTED}", value=share, source="refitted on " + ", ".join(
                    sorted(others)), kind="fitted end to end, this family left out"))
        constants += _declared(hw)
        ratios = _with_host(fam, obs, [base[i] for i in ids], ratios, constants)
        residuals += [RunResidual(run=i, hardware=profile, measured_step_s=base[i].measured,
                                  predicted_step_s=base[i].measured * r,
                                  error_pct=(r - 1.0) * 100.0) for i, r in zip(ids, ratios)]
    errs = [r.error_pct for r in residuals]
    worst = max(residuals, key=lambda r: abs(r.error_pct))
    return FamilyResidual(
        family=fam, source=_family_source(fam), runs=len(residuals),
        median_abs_error_pct=statistics.median(map(abs, errs)),
        worst_abs_error_pct=abs(worst.error_pct), worst_run=worst.run,
        rms_error_pct=math.sqrt(sum(e * e for e in errs) / len(errs)), constants=constants,
        residuals=residuals)


def _with_host(fam: str, obs: list[Obs], mine: list[Obs], ratios: list[float],
               constants: list[ConstantUse]) -> list[float]:
    """The ratios with the framework's host time per step refitted without the family
    (host_fit.refit_host) on the runs that carry one; the refitted value joins `constants`
    (once per family)."""
    if not any(o.host_s is not None for o in mine):
        return ratios
    others = {o.family for o in obs if o.host_s is not None} - {fam}
    host = host_fit.refit_host(obs, others)
    if host is None:
        return ratios
    key = f"{host_fit.FRAMEWORK}.{host_fit.KEY}"
    if all(c.key != key for c in constants):
        constants.append(ConstantUse(key=key, value=host, source="refitted on " + ", ".join(
            sorted(others)), kind="fitted end to end, this family left out"))
    return [r if o.host_s is None else
            float(host_fit.step_at(o.measured * r, o.optimizer_s, o.host_s, host)) / o.measured
            for o, r in zip(mine, ratios)]


def _fallback(hw: HardwareProfile) -> tuple[float, str, str]:
    """(share, source, kind) for a family no other family shares a profile with. A profile that
    declares its own end-to-end fit (efficiency.calibrated_on) fitted it on this family, the only
    one on it: the family is then predicted with the share profiles without a fit carry (the
    schema's default), so its residual stays out of sample."""
    if hw.efficiency.calibrated_on:
        return (float(getattr(Efficiency(), FITTED)), "specs/efficiency.py default (the share "
                "profiles without an end-to-end fit carry)", f"transferred: {hw.name}'s own "
                "value was fitted on this family")
    return (float(getattr(hw.efficiency, FITTED)), f"hardware profile {hw.name}",
            f"profile value, not refitted: no other family ran on {hw.name}")


def _declared(hw: HardwareProfile) -> list[ConstantUse]:
    """The profile's other time-model constants, as the profile declares them."""
    e = hw.efficiency
    keys = {**published.efficiency_constants(hw),
            "fa3_attention_fraction": e.fa3_attention_fraction,
            "fp8_matmul_ceiling_fraction": e.fp8_matmul_ceiling_fraction}
    why = f"calibrated on {e.calibrated_on}" if e.calibrated_on else "not fitted end to end"
    return [ConstantUse(key=f"{hw.name}.{k}", value=float(v), source=f"hardware profile "
                        f"{hw.name} (cited beside the value)", kind=f"as declared; {why}")
            for k, v in keys.items() if v is not None and k != FITTED]


def _family_source(fam: str) -> str:
    src = fam.split("/")[0]
    cites = dict(PAPER_SOURCES.values()) | {MODERN_SOURCE[0]: MODERN_SOURCE[1]}
    return cites.get(src) or load_runs().sources[src]


def regime_bands(fams: list[FamilyResidual]) -> list[RegimeBand]:
    """Per regime (framework / GPU generation): the band derived from its families' residuals."""
    by: dict[str, list[FamilyResidual]] = {}
    for f in fams:
        _src, fw, gen = f.family.split("/")
        by.setdefault(f"{fw}/{gen}", []).append(f)
    out = []
    for regime, group in sorted(by.items()):
        rms = [f.rms_error_pct for f in group]
        pooled = math.sqrt(sum(r * r for r in rms) / len(rms))
        band = derived_band(rms)
        out.append(RegimeBand(regime=regime, band_pct=band, families=[f.family for f in group],
                              rms_error_pct=pooled, basis=regime_basis(len(group), pooled)))
    return out


def memory_residuals() -> list[MemoryResidual]:
    """Measured peaks against dtplan's: torch max reserved (torchtitan rows) and MLPerf's
    max_memory_usage read as GiB allocated on the first pipeline stage (its logging rank)."""
    out = [MemoryResidual(run=r.case, hardware=r.hardware, measured_gib=r.published,
                          predicted_gib=r.predicted, error_pct=r.error_pct,
                          statistic="torch max reserved")
           for r in _modern_own()[1]]
    for row in load_runs().memory_rows:
        out.append(_mlperf_memory(row))
    return out


def _mlperf_memory(row: PublicRun) -> MemoryResidual:
    allocated = evaluate_run(row).memory.first.allocated
    assert allocated is not None   # evaluate() keeps the detail
    pred = float(allocated[0]) / GIB
    return MemoryResidual(run=row.id, hardware=row.hardware, measured_gib=row.measured.value,
                          predicted_gib=pred, error_pct=(pred / row.measured.value - 1) * 100,
                          statistic="MLPerf max_memory_usage as GiB allocated, first stage "
                                    "(unit and statistic not stated by the log)")


def bands_document(cv: CrossValidation) -> dict:
    """The derived bands as ``planner/data/error_bands.json`` holds them (scripts/error_bands.py
    writes it; tests/test_lofo.py checks it equals this)."""
    return {"description": "Error bands per regime (framework/GPU generation) derived from `dtplan "
                           "calibrate`'s leave-one-family-out residuals (planner/calibration/"
                           "lofo.py, planner/evaluation/error_band.py derived_band). Regenerate "
                           "with python scripts/error_bands.py after a profile's constants change.",
            "regimes": {b.regime: {"band_pct": b.band_pct, "families": b.families,
                                   "rms_error_pct": round(b.rms_error_pct, 2), "basis": b.basis}
                        for b in cv.bands}}
