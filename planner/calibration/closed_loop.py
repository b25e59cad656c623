"""`calibrate --from` with a job: every fit the evidence allows, in one result, and the
profile values they give. Links first (the compute fit then sees the calibrated links)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from planner.engine.allocator import FRAGMENTATION_SHARE
from planner.specs.hardware import HardwareProfile
from planner.specs.records import dump, validate
from planner.calibration.fit_links import ConstantFit, combine, fit_fragmentation, fit_nccl
from planner.calibration.fit_compute import RunSpec, calibrated_efficiency, fit_compute, predict
from planner.evidence.model import Evidence

# The profile constants evidence can move, and what identifies each.
FITTABLE = {"scale_up.bus_efficiency": "nccl-tests inside one NVLink domain (large messages)",
            "scale_up.latency_us": "nccl-tests inside one NVLink domain (small messages)",
            "scale_out.bus_efficiency": "nccl-tests across nodes (large messages)",
            "scale_out.latency_us": "nccl-tests across nodes (small messages)",
            "efficiency.sustained_matmul_fraction": "a training log or trace plus the job layout",
            "efficiency.flash_attention_fraction": "a training log or trace plus the job layout",
            "efficiency.grouped_gemm_fraction": "a training log or trace plus the job layout"}
DEFAULT_FRAGMENTATION = FRAGMENTATION_SHARE  # specs.budget.MemoryBudget's default share


@dataclass
class Calibration:
    """The fits, the profile values they set ("section.key" -> (value, why)), and the
    constants that stay because nothing here identifies them."""

    base: str
    fits: list[ConstantFit]
    values: dict[str, tuple[float, str]]
    unchanged: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"base_profile": self.base,
                "fits": [f.__dict__ for f in self.fits],
                "calibrated": {k: v for k, (v, _) in self.values.items()},
                "unchanged": self.unchanged, "notes": self.notes}


def apply(hw: HardwareProfile, values: dict[str, tuple[float, str]]) -> HardwareProfile:
    """The profile with calibrated values (human units as in the TOML: latency in µs)."""
    data = dump(hw)
    for dotted, (v, _) in values.items():
        section, key = dotted.split(".", 1)
        if key == "latency_us":
            data[section]["latency_s"] = v * 1e-6
        else:
            data[section][key] = v
    return validate(HardwareProfile, data)


def calibrate_evidence(evidence: list[Evidence], hw: HardwareProfile,
                       run: RunSpec | None = None) -> Calibration:
    """Fit links from nccl-tests, compute speed from a run (when `run` says its layout), and
    fragmentation from memory artifacts."""
    fits: list[ConstantFit] = []
    for e in evidence:
        if e.nccl is not None:
            fits += fit_nccl(e, hw)
    values = {k: (v, "median of " + ", ".join(f.evidence for f in fits
                                              if f.key == k and f.after is not None))
              for k, v in combine(fits).items()}
    calibrated = apply(hw, values)
    notes = []
    rates = [e for e in evidence if e.kind in ("training-log", "profiler-trace") and e.steps]
    if rates and run is None:
        notes.append("training logs read but no job layout given (--plan or options): compute "
                     "efficiency not fitted")
    if rates and run is not None:
        tried = [f for e in rates if (f := fit_compute(e, run, calibrated)) is not None]
        fits += tried
        compute = [(f.after, f.evidence) for f in tried if f.after is not None]
        if compute:
            k = statistics.median(after for after, _ in compute)
            why = (f"compute factor {k:.3f} from " + ", ".join(name for _, name in compute))
            values.update({key: (v, why) for key, v in calibrated_efficiency(calibrated, k).items()})
    states = _estimated_states(run, calibrated) if run is not None else None
    for e in evidence:
        if (f := fit_fragmentation(e, DEFAULT_FRAGMENTATION, states)) is not None:
            fits.append(f)
            notes.append(f"{f.evidence}: allocator fragmentation {f.after:.1%} "
                         f"({f.note.split(';')[0]}); pass --fragmentation {f.after:.3f} to plan "
                         "with it")
    unchanged = {k: f"needs {why}" for k, why in FITTABLE.items() if k not in values}
    if run is not None and rates and not any(k.startswith("efficiency.") for k in values):
        for key in [key for key in FITTABLE if key.startswith("efficiency.")]:
            unchanged[key] = "not fitted: no compute factor within the caps reaches the measurement"
    unchanged["efficiency.overlap_slowdown"] = (
        "not fitted: it needs the same compute kernels timed alone and beside a collective, "
        "which a step's trace does not pair up")
    return Calibration(base=hw.name, fits=fits, values=values, unchanged=unchanged, notes=notes)


def _estimated_states(run: RunSpec, hw: HardwareProfile) -> float:
    """Persistent bytes (weights, gradients, optimizer, fp8 cache) on the estimate's peak stage:
    what does not churn within a step, so fragmentation is fitted over the rest."""
    est = predict(run, hw)
    stage = ("first", "middle", "last")[int(est["peak_stage"])]
    return sum(est[f"mem.{stage}.{k}"] for k in
               ("weights", "gradients", "optimizer", "fp8_weight_cache", "frozen_weights"))
