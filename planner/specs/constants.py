"""Every efficiency constant of a hardware or framework profile with its value (in the
profile file's units), kind and source: what the assumptions print and the provenance test
lists. A hardware profile's [efficiency] key it does not set is the default's, with the
default's own kind and source (specs/efficiency.py DEFAULT_PROVENANCE)."""

from __future__ import annotations

from dataclasses import fields
from typing import Callable

from planner.specs.efficiency import DEFAULT_PROVENANCE, Efficiency
from planner.specs.framework import PROVENANCED as FRAMEWORK_KEYS
from planner.specs.framework import FrameworkProfile
from planner.specs.hardware import GIB, HOST_RESERVE_PROVENANCE, HardwareProfile
from planner.specs.hardware_toml import PROVENANCED as HARDWARE_KEYS
from planner.specs.provenance import KINDS, Provenance

Constant = tuple[str, float, Provenance]

# A profile built in code (no file) states no source: said so, never invented.
UNSTATED = Provenance(kind="judgement", source="not stated: the profile was built without a file")

# Values in the TOML's units (TFLOP/s, µs), from the record's SI units.
_LINKS: dict[str, Callable[[HardwareProfile], float]] = {
    "gpu.matmul_ceiling_tflops_bf16": lambda h: h.gpu.matmul_ceiling_flops / 1e12,
    "scale_up.latency_us": lambda h: round(h.scale_up.latency_s * 1e6, 9),
    "scale_up.bus_efficiency": lambda h: h.scale_up.bus_efficiency,
    "scale_up.nvls_bus_efficiency": lambda h: h.scale_up.nvls_bus_efficiency or 0.0,
    "scale_out.latency_us": lambda h: round(h.scale_out.latency_s * 1e6, 9),
    "scale_out.bus_efficiency": lambda h: h.scale_out.bus_efficiency,
    "host.reserve_gb": lambda h: h.host.reserve_bytes / GIB,
}


def _efficiency_keys() -> list[str]:
    """The numeric [efficiency] keys: those the file may set, then the record's own (a band)."""
    numeric = [f.name for f in fields(Efficiency)
               if f.name not in ("software_stack", "calibrated_on", "error_bands")]
    return list(HARDWARE_KEYS["efficiency"]) + [k for k in numeric
                                                 if k not in HARDWARE_KEYS["efficiency"]]


def hardware_constants(hw: HardwareProfile) -> list[Constant]:
    """(section.key, value, provenance) for every efficiency constant the profile uses; keys
    whose value is None (no fp8, no FlashAttention-3) are not used and not listed."""
    out: list[Constant] = []
    for dotted, get in _LINKS.items():
        if dotted == "scale_up.nvls_bus_efficiency" and hw.scale_up.nvls_bus_efficiency is None:
            continue   # not set: NVLS (where the domain has it) runs at bus_efficiency
        default = HOST_RESERVE_PROVENANCE if dotted == "host.reserve_gb" else UNSTATED
        out.append((dotted, get(hw), hw.provenance.get(dotted, default)))
    for key in _efficiency_keys():
        value = getattr(hw.efficiency, key)
        if value is None or isinstance(value, dict):   # unused, or a table (fp8 recipe ceilings)
            continue
        dotted = f"efficiency.{key}"
        prov = hw.provenance.get(dotted) or DEFAULT_PROVENANCE.get(key, UNSTATED)
        out.append((dotted, float(value), prov))
    return out


def framework_constants(fw: FrameworkProfile) -> list[Constant]:
    """(time.key, value, provenance) for the framework's speed-setting [time] constants; a key
    its file leaves at the record's default of 0 (a ZeRO-3 prefetch bucket outside DeepSpeed)
    is not used and not listed."""
    out: list[Constant] = []
    for key in FRAMEWORK_KEYS:
        value, prov = float(getattr(fw.time, key)), fw.provenance.get(f"time.{key}")
        if prov is None and fw.source_file and value == 0:
            continue
        out.append((f"time.{key}", value, prov or UNSTATED))
    return out


def constants_note(hw: HardwareProfile, fw: FrameworkProfile) -> str:
    """One line for the assumptions: the profiles' efficiency constants counted by kind
    (`dtplan report` and `dtplan profiles show` print each with its source)."""
    def counts(rows: list[Constant]) -> str:
        return ", ".join(f"{n} {k}" for k in KINDS
                         if (n := sum(1 for _, _, p in rows if p.kind == k)))
    return (f"Efficiency constants by kind: {hw.name} {counts(hardware_constants(hw))}; "
            f"{fw.name} {counts(framework_constants(fw))}. Each has its source beside it in the "
            "profile; `dtplan report` and `dtplan profiles show` print them.")
