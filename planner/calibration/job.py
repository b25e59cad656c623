"""The job a measured run executed, from the same files `dtplan check` reads: a plan file or
an engine config (Megatron arguments, DeepSpeed JSON, torchtitan TOML)."""

from __future__ import annotations

from planner.specs.hardware import HardwareProfile
from planner.calibration.fit_compute import RunSpec


def run_from_file(path: str, hardware: HardwareProfile | None = None
                  ) -> tuple[RunSpec, HardwareProfile]:
    """(RunSpec, the plan's hardware or `hardware` when given); bad input -> InputError."""
    from planner.resolve.job import resolve_file
    from planner.specs.job import CheckOptions

    inp, _text, _kind = resolve_file(path, CheckOptions(), hardware=hardware)
    from planner.specs.framework import load_framework

    run = RunSpec(model=inp.model, gpus=inp.gpus, seq_len=inp.seq_len,
                  global_batch=inp.global_batch, layout=inp.layout,   # the file's framework
                  framework=inp.framework or load_framework(None))
    return run, inp.hardware
