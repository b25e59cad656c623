"""A profile's error band for an estimate's regime, and the sentence that states it.

A regime is framework × layout family ("data", "tensor", "pipeline"); the bands themselves are
computed by ``planner.calibration.modern`` (RMS of ``dtplan calibrate``'s residuals) and stored
in the hardware profile's ``[efficiency] error_bands``. Kept apart from the calibration code so
that every estimate can print its band without importing the calibration cases' machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareProfile
    from planner.specs.knobs import Layout


def family(lay: Layout) -> str:
    """Layout family of a regime: pipeline (PP > 1), tensor (TP > 1), else data."""
    return "pipeline" if lay.pp > 1 else "tensor" if lay.tp > 1 else "data"


def generation(hw: HardwareProfile) -> str:
    """GPU generation of a profile, from its GPU name (A100, H100, H200, B200, GB200, MI300X…)."""
    name = hw.gpu.name.upper()
    for g in ("GB200", "B200", "H200", "H100", "A100", "MI300X", "L40S"):
        if g in name:
            return g
    return name.split("-")[0]


def regime(framework: str, hw: HardwareProfile, lay: Layout) -> str:
    """'framework/family', the key of a profile's error_bands (the generation is the profile's)."""
    return f"{framework}/{family(lay)}"


def band_for(hw: HardwareProfile, framework: str, lay: Layout) -> Optional[float]:
    """The error band (per cent) the profile states for this regime, None if uncalibrated."""
    return hw.efficiency.error_bands.get(regime(framework, hw, lay))


def shown_band(hw: HardwareProfile, framework: str, lay: Layout) -> float:
    """The band (per cent) printed on step time, tokens/s and MFU: the regime's calibrated band,
    else the profile's wide band for regimes without runs (efficiency.uncalibrated_band). Never
    absent; the search ranks by the calibrated band alone (band_for), since layouts of one
    regime share the constants a missing calibration leaves uncertain."""
    b = band_for(hw, framework, lay)
    return hw.efficiency.uncalibrated_band if b is None else b


def band_note(hw: HardwareProfile, framework: str, lay: Layout) -> str:
    """The sentence every estimate prints about its uncertainty."""
    b = band_for(hw, framework, lay)
    key = regime(framework, hw, lay)
    if b is None:
        return (f"Wide band ± {hw.efficiency.uncalibrated_band:g}% on step time, tokens/s and "
                f"MFU: no published run of regime {key} on {hw.name} in `dtplan calibrate`'s "
                "sets, so the profile's band for regimes without runs applies (the widest "
                "error seen where constants were carried to another GPU or framework).")
    return (f"Error band ± {b:g}% on step time, tokens/s and MFU: RMS of `dtplan calibrate`'s "
            f"residuals for {key} on {hw.name}.")
