"""Published H100-class runs (``planner/data/calibration_modern.json``), regimes, error bands.

The modern cases are torchtitan runs on Meta's 500 W 96 GB H100s with their full configs: eight
throughput rows (tokens/s per GPU) and eighteen memory rows (torch max reserved), each citing its
public source. They ship inside the package beside ``calibration_cases.json``, so `dtplan
calibrate` evaluates the same rows wherever dtplan is installed.

Every calibration row belongs to a regime: framework × GPU generation × layout family
(`family`: "data" = data parallel / FSDP only, "tensor" = with TP, "pipeline" = with PP). The
spread of a regime's throughput residuals, RMS of the per-row errors, is its in-sample spread,
stored in the hardware profile ([efficiency] error_bands, tests/test_calibration_modern.py checks
they equal what calibrate computes): the search's near-tie tolerance. The band printed with every
step time, tokens/s and MFU is the leave-one-family-out one (planner/calibration/lofo.py).
"""

from __future__ import annotations

import json
import statistics
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import load_profile
from planner.specs.hf_config import model_from_config
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec
from planner.specs.presets import get_preset
from planner.specs.budget import MemoryBudget
from planner.specs.framework import FrameworkProfile, load_framework
from planner.calibration.report import CalibrationRow, RegimeStat
from planner.evaluation.error_band import family, generation, regime

MODERN_FILE = "calibration_modern.json"
MODERN_PROFILE = "h100-96gb-500w"
MODERN_TOLERANCE_PCT = 15.0
GIB = float(2**30)


@lru_cache(maxsize=1)
def _modern_cases() -> tuple[dict, ...]:
    # Read beside this package's modules (pyproject ships planner/data/*.json), as
    # published.load_cases reads calibration_cases.json.
    text = (Path(__file__).parents[1] / "data" / MODERN_FILE).read_text(encoding="utf-8")
    return tuple(json.loads(text)["cases"])


def load_modern() -> list[dict]:
    """The modern cases shipped with the package (a fresh list of the cached rows)."""
    return list(_modern_cases())


def band_pct(errors_pct: list[float]) -> float:
    """A regime's band: RMS of its rows' errors, rounded up to 0.5 %."""
    rms = math.sqrt(sum(e * e for e in errors_pct) / len(errors_pct))
    return math.ceil(rms * 2.0) / 2.0


def _model(inp: dict) -> ModelSpec:
    m = inp["model"]
    if "preset" in m:
        return get_preset(m["preset"])
    return model_from_config(m["hf_config"], where=m.get("name", "hf_config"))


def case_framework(case: dict) -> FrameworkProfile:
    """The profile the case ran on, with its kernel class (eager unless torch.compile)."""
    fw = load_framework(case.get("framework_name") or "torchtitan")
    return replace(fw, time=replace(
        fw.time, kernel_class="eager" if "eager" in case["tags"] else "compiled"))


def case_layout(inp: dict) -> Layout:
    """The published layout; torchtitan's 'selective' is its op save list (the profile's)."""
    return Layout(tp=inp["tp"], pp=inp["pp"], dp=inp["dp"], cp=inp.get("cp", 1),
                  ep=inp.get("ep", 1), zero=inp["zero"], micro_batch=inp["micro_batch"],
                  recompute=inp["recompute"], precision=inp["precision"],
                  optimizer=inp.get("optimizer", "adamw"),
                  schedule=inp.get("schedule") or "1f1b", sp=inp["tp"] > 1)


def evaluate_case(case: dict, hw: Optional[HardwareProfile] = None,
                  framework: Optional[FrameworkProfile] = None) -> dict:
    """Predicted tokens/s/GPU, max-reserved GiB, step time, MFU and the layout of one case."""
    inp = case["inputs"]
    hw = hw or load_profile(MODERN_PROFILE)
    lay = case_layout(inp)
    # max reserved: PyTorch's allocator only (calibration_modern.json memory_budget_rule)
    budget = MemoryBudget(context_bytes=0.0, comm_buffer_bytes=0.0)
    p = Problem(model=_model(inp), hardware=hw, gpus=inp["gpus"], seq_len=inp["seq_len"],
                global_batch=inp["global_batch"], precision=lay.precision,
                optimizer=lay.optimizer, budget=budget,
                framework=framework or case_framework(case))
    r = evaluate(p, Candidates.from_layouts([lay]))
    return {"tokens_per_s_per_gpu": float(r.throughput.tokens_per_s_per_gpu[0]),
            "peak_memory_gib": float(r.memory.peak[0]) / GIB, "step": float(r.time.step[0]),
            "mfu": float(r.throughput.mfu[0]), "hfu": float(r.throughput.hfu[0]),
            "fits": bool(r.rules.passes["fits-in-memory"][0]), "layout": lay,
            "framework": p.fw.name}


def modern_rows(hw: Optional[HardwareProfile] = None,
                framework: Optional[FrameworkProfile] = None) -> list[dict]:
    """Every modern case: published vs predicted in the view it measures (tokens/s per GPU, or
    max-reserved GiB), with its regime. hw / framework override the cases' own."""
    out = []
    for case in load_modern():
        pub = case["published"]
        got = evaluate_case(case, hw, framework)
        metric = pub["metric"]
        pred = got[metric]
        out.append({"case": case["id"], "source": case["source"]["repo"] + " "
                    + case["source"]["path"], "metric": metric, "published": pub["value"],
                    "predicted": pred, "error_pct": (pred / pub["value"] - 1.0) * 100.0,
                    "got": got, "regime": regime(got["framework"], hw or
                                                 load_profile(MODERN_PROFILE), got["layout"])})
    return out


def modern_calibration_rows(hw: Optional[HardwareProfile], describe: Callable[[Layout], str]
                            ) -> tuple[list[CalibrationRow], list[CalibrationRow]]:
    """(throughput rows, memory rows) of the modern H100 cases as CalibrationRows, on their own
    profile unless `hw` is given; `describe` spells a layout."""
    prof = hw or load_profile(MODERN_PROFILE)
    thr: list[CalibrationRow] = []
    mem: list[CalibrationRow] = []
    for r in modern_rows(prof):
        g = r["got"]
        row = CalibrationRow(
            case=r["case"], source=r["source"], metric=r["metric"], published=float(r["published"]),
            predicted=r["predicted"], error_pct=r["error_pct"], layout=describe(g["layout"]),
            step_time_s=g["step"], mfu=g["mfu"], hfu=g["hfu"], fits=g["fits"],
            regime=f"{g['framework']}/{generation(prof)}/{family(g['layout'])}",
            hardware=prof.name)
        (thr if r["metric"] == "tokens_per_s_per_gpu" else mem).append(row)
    return thr, mem


def regimes(rows: list[CalibrationRow]) -> dict[str, RegimeStat]:
    """Per regime: rows, median and worst |error|, and the band (RMS, rounded up to 0.5 %)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.regime, []).append(r.error_pct)
    return {k: RegimeStat(rows=len(v), median_abs_error_pct=statistics.median(map(abs, v)),
                          worst_abs_error_pct=max(map(abs, v)), band_pct=band_pct(v))
            for k, v in sorted(by.items())}
