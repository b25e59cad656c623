"""The error band printed on step time, tokens/s and MFU, and the sentence that states its basis.

A band belongs to a regime, framework × GPU generation ("megatron/H100"). It is derived from
`dtplan calibrate`'s leave-one-family-out residuals (planner/calibration/lofo.py): the families
(source × framework × generation) that ran in the regime, each predicted with the end-to-end
constant refitted without it. The derived bands ship in ``planner/data/error_bands.json``
(tests/test_lofo.py keeps the file equal to what `dtplan calibrate` computes); a regime without
runs prints the profile's wide band (``efficiency.uncalibrated_band``) with its reason. Kept apart
from the calibration code so that every estimate prints its band without evaluating the runs.

The band of n families with per-family RMS residuals r_1..r_n (per cent):
    D    = t(n) × sqrt(mean r_i²)       t(n): Student's t, 95th percentile, n degrees of freedom —
                                         a two-sided 90 % prediction bound for a new family's error
    T(n) = W × t(n + 1) / t(1)          the narrowest band n families can earn (T(0) = W, the wide
                                         band; T(∞) = W × 1.645 / 6.314)
    band = min(max(D, T(n)), T(n − 1)), rounded up to 0.5 %
so the band comes from the residuals, is wider where families are fewer, and never narrows when
a family is removed (band(n − 1 families) ≥ T(n − 1) ≥ band(n families)).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareProfile
    from planner.specs.knobs import Layout

BANDS_FILE = "error_bands.json"
# Student's t, 95th percentile, 1..30 degrees of freedom (any statistics table, e.g. NIST/SEMATECH
# e-Handbook 1.3.6.7.2); beyond 30 the normal quantile 1.645.
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782,
       1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711,
       1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
# The wide band W of a regime without runs (specs/efficiency.py uncalibrated_band's default: the
# spread of dtplan's own uncalibrated MFU across framework × H100 profiles, a judgement).
WIDE_BAND_PCT = 45.0


def t95(n: int) -> float:
    """Student's t 95th percentile with n ≥ 1 degrees of freedom."""
    return T95[n - 1] if n <= len(T95) else 1.645


def floor_band(n: int, wide: float = WIDE_BAND_PCT) -> float:
    """T(n): the narrowest band n families can earn; T(0) = the wide band."""
    return wide * t95(n + 1) / t95(1)


def derived_band(family_rms: Sequence[float], wide: float = WIDE_BAND_PCT) -> float:
    """The band (per cent) of a regime whose families' RMS residuals are `family_rms`."""
    n = len(family_rms)
    if n == 0:
        return wide
    pooled = math.sqrt(sum(r * r for r in family_rms) / n)
    band = min(max(t95(n) * pooled, floor_band(n, wide)), floor_band(n - 1, wide))
    return math.ceil(round(band * 2.0, 9)) / 2.0


def regime_basis(n: int, pooled_rms: float, wide: float = WIDE_BAND_PCT) -> str:
    """How a derived band was reached, in one sentence."""
    whose = "1 family's" if n == 1 else f"{n} families'"
    return (f"{whose} leave-one-family-out residuals: RMS {pooled_rms:.1f}% × t {t95(n):.2f} "
            f"(90% for a new family), kept within {floor_band(n, wide):.1f}-"
            f"{floor_band(n - 1, wide):.1f}% for {n} {'family' if n == 1 else 'families'}")


@lru_cache(maxsize=1)
def _bands() -> dict[str, dict]:
    text = (Path(__file__).parents[1] / "data" / BANDS_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text)["regimes"])


def family(lay: Layout) -> str:
    """Layout family: pipeline (PP > 1), tensor (TP > 1), else data (a calibration row's tag)."""
    return "pipeline" if lay.pp > 1 else "tensor" if lay.tp > 1 else "data"


def generation(hw: HardwareProfile) -> str:
    """GPU generation of a profile, from its GPU name (A100, H100, H200, B200, GB200, MI300X…)."""
    name = hw.gpu.name.upper()
    for g in ("GB200", "B200", "H200", "H100", "A100", "MI355X", "MI300X", "L40S"):
        if g in name:
            return g
    return hw.name.upper()   # the profile's own name: GPU names carry vendor words and spaces


def regime(framework: str, hw: HardwareProfile, lay: Optional[Layout] = None,
           moe: bool = False) -> str:
    """'framework/generation', the key of a derived band (the same for every layout: the
    runs are too few to split a regime by layout family); '…/moe' for a mixture of experts,
    a regime of its own: the calibration runs are dense, and the model-family validation rows
    (calibration.model_runs), which miss MoE steps by more, set no band."""
    return f"{framework}/{generation(hw)}" + ("/moe" if moe else "")


def band_for(hw: HardwareProfile, framework: str, lay: Optional[Layout] = None,
             moe: bool = False) -> Optional[float]:
    """The band (per cent) derived for this regime from calibration runs, None if it has none."""
    got = _bands().get(regime(framework, hw, lay, moe))
    return None if got is None else float(got["band_pct"])


def ranking_band(hw: HardwareProfile, framework: str, lay: Layout) -> Optional[float]:
    """The tolerance (per cent) within which the search orders near-tied layouts by headroom:
    the profile's in-sample RMS per framework / layout family ([efficiency] error_bands; the
    offset shared by a regime's layouts is fitted away, so this is how finely the model orders
    two layouts of one regime, not the band of one figure). None: order by time alone."""
    return hw.efficiency.error_bands.get(f"{framework}/{family(lay)}")


def shown_band(hw: HardwareProfile, framework: str, lay: Optional[Layout] = None,
               moe: bool = False) -> float:
    """The band printed on step time, tokens/s and MFU: the regime's derived band, else the
    profile's wide band for regimes without runs (efficiency.uncalibrated_band). Never absent."""
    b = band_for(hw, framework, lay, moe)
    return hw.efficiency.uncalibrated_band if b is None else b


def band_note(hw: HardwareProfile, framework: str, lay: Optional[Layout] = None,
              moe: bool = False) -> str:
    """The sentence every estimate prints about its uncertainty."""
    key = regime(framework, hw, lay, moe)
    got = _bands().get(key)
    if got is None:
        what = (f"no published run of a mixture of experts ({key}) among `dtplan calibrate`'s "
                "calibration runs, which are dense (its model-family rows validate MoE runs, "
                "missing most by 10-60%, and set no band)" if moe else
                f"no published run of regime {key} in `dtplan calibrate`'s sets")
        return (f"Wide band ± {hw.efficiency.uncalibrated_band:g}% on step time, tokens/s and "
                f"MFU: {what}, so the profile's band for regimes without runs applies (a "
                "judgement: the spread of dtplan's own MFU across framework × H100 profiles "
                "before calibration).")
    return (f"Error band ± {float(got['band_pct']):g}% on step time, tokens/s and MFU for "
            f"{key}, from `dtplan calibrate`'s {got['basis']}.")
