"""The job a measured run executed, from the same files `dtplan check` reads: a plan file or
an engine config (Megatron arguments, DeepSpeed JSON, torchtitan TOML)."""

from __future__ import annotations

from pathlib import Path

from ..specs.hardware import HardwareProfile
from .compute_fit import RunSpec


def run_from_file(path: str, hardware: HardwareProfile | None = None
                  ) -> tuple[RunSpec, HardwareProfile]:
    """(RunSpec, the plan's hardware or `hardware` when given); bad input -> InputError."""
    from .. import engines as ec
    from ..gate import resolve_plan
    from ..specs.job import CheckOptions
    from ..plan import validate_plan

    text, fmt, data = ec.load_any(path, None)
    kind = ec.detect(path, fmt, data, text)
    if kind == "plan":
        inp = resolve_plan(validate_plan(data, path), Path(path).parent, path, hardware=hardware)
    else:
        inp = ec.read_engine(kind, path, text, data, CheckOptions())
        if hardware is not None:
            inp.hardware = hardware
    from ..specs.framework import current_framework

    run = RunSpec(model=inp.model, gpus=inp.gpus, seq_len=inp.seq_len,
                  global_batch=inp.global_batch, layout=inp.layout,
                  framework=current_framework())  # the plan's framework: key or --framework
    return run, inp.hardware
