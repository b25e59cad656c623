"""The public library API, for notebooks and other tools (the CLI renders the same results):

    import planner
    model, hw = planner.get_preset("llama3-70b"), planner.load_profile("h100")
    best = planner.fit(model, hw, 256, seq_len=8192, global_batch=512).layouts[0].layout
    est = planner.estimate(model, hw, 256, best, seq_len=8192, global_batch=512)

Each name lives in its concern's folder; this module only gathers them.
"""

from __future__ import annotations

from planner.advice.shrink import shrink
from planner.errors import InputError
from planner.evaluation.calculators import state_memory
from planner.evaluation.estimate import Estimate, StageMemory, estimate, layout_rules
from planner.evaluation.train import (DEFAULT_GPU_MTBF_S, TimeToTrain, build_layout, problem,
                                      resilience_for, time_to_train)
from planner.search.fit import FitResult, RankedLayout, Rejection, estimate_with_auto, fit
from planner.specs.budget import MemoryBudget
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import list_profiles, load_profile
from planner.specs.hf_config import load_hf_config
from planner.specs.knobs import Layout
from planner.specs.layout import plan_layout
from planner.specs.model import ModelSpec, model_from_params
from planner.specs.presets import get_preset, list_presets

__all__ = ["DEFAULT_GPU_MTBF_S", "Estimate", "FitResult", "HardwareProfile", "InputError",
           "Layout", "MemoryBudget", "ModelSpec", "RankedLayout", "Rejection", "TimeToTrain",
           "build_layout", "estimate", "estimate_with_auto", "fit", "get_preset",
           "layout_rules", "list_presets", "list_profiles", "load_hf_config", "load_profile",
           "memory", "model_from_params", "plan_layout", "problem", "resilience_for", "shrink",
           "state_memory", "time_to_train"]


def memory(model: ModelSpec, hardware: HardwareProfile, gpus: int, layout: Layout, *,
           seq_len: int, global_batch: int,
           budget: MemoryBudget | None = None) -> list[StageMemory]:
    """The per-GPU memory budget per stage (the memory part of `estimate`)."""
    return estimate(model, hardware, gpus, layout, seq_len=seq_len, global_batch=global_batch,
                    budget=budget).stages
