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

__version__ = "0.1.0"

_EXPORTS = {
    "fit": "api", "build_layout": "api", "time_to_train": "api", "resilience_for": "api",
    "shrink": "advice.shrink",
    "estimate": "evaluation.estimate", "layout_rules": "evaluation.estimate", "MemoryBudget": "specs.budget",
    "Estimate": "evaluation.estimate", "Layout": "specs.layout", "plan_layout": "specs.layout", "ModelSpec": "specs.model",
    "model_from_params": "specs.model", "get_preset": "specs.presets", "list_presets": "specs.presets",
    "load_hf_config": "specs.hf_config", "load_profile": "specs.hardware", "list_profiles": "specs.hardware",
    "HardwareProfile": "specs.hardware", "state_memory": "evaluation.calculators", "InputError": "errors",
}

__all__ = sorted(_EXPORTS) + ["memory"]


def memory(model, hardware, gpus, layout, *, seq_len, global_batch, budget=None):
    """The per-GPU memory budget per stage (the memory part of `estimate`)."""
    from planner.evaluation.estimate import estimate as _estimate
    e = _estimate(model, hardware, gpus, layout, seq_len=seq_len, global_batch=global_batch,
                  budget=budget)
    return e.stages


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
