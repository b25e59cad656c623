"""dtplan: a capacity and layout planner for distributed training of large models.

The library under the CLI, for notebooks and other tools:

    import planner
    model = planner.get_preset("llama3-70b")
    hw = planner.load_profile("h100")
    result = planner.fit(model, hw, 256, seq_len=8192, global_batch=512)
    best = result.layouts[0].layout
    est = planner.estimate(model, hw, 256, best, seq_len=8192, global_batch=512)

Names are imported lazily so that `dtplan --help` does not pay for numpy and pydantic.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The public names, each from planner.api (imported on first use, so `dtplan --help` does not
# load numpy and pydantic); a test holds this list equal to planner.api.__all__.
__all__ = ["DEFAULT_GPU_MTBF_S", "Estimate", "FitResult", "HardwareProfile", "InputError",
           "Layout", "MemoryBudget", "ModelSpec", "RankedLayout", "Rejection", "TimeToTrain",
           "build_layout", "estimate", "estimate_with_auto", "fit", "get_preset",
           "layout_rules", "list_presets", "list_profiles", "load_hf_config", "load_profile",
           "memory", "model_from_params", "plan_layout", "problem", "resilience_for", "shrink",
           "state_memory", "time_to_train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from planner import api
        return getattr(api, name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
