"""The framework's host time per optimizer step (FrameworkProfile.time.step_host_s), refitted per
leave-one-family-out fold like the GEMM share (lofo.py).

What it is: Megatron-Core's optimizer step runs eagerly after a host sync (the gradient norm read
back, NVIDIA/Megatron-LM core_v0.15.3 megatron/core/optimizer/clip_grads.py:133); the host then
issues the per-parameter kernels of the update and the loop's next step while the GPU, done with
its queue, waits. The step's optimizer term is max(GPU update, host time)
(engine.step_time.optimizer_phase_time). No kernel-level figure measures the host's share, so it
is fitted end to end: on the run set's Megatron families (each family weighing the same), and in
each fold on the families other than the one left out.

Each run is evaluated once with the host time at 0 (its step and its GPU update); the step at
any host time h is then exact: step₀ − u + max(u, h), the optimizer being one additive term.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, Sequence

import numpy as np

from planner.calibration.runs import PublicRun, run_layout, run_problem
from planner.engine.step_time import optimizer_phase_time
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware import HardwareProfile

HOST_GRID = np.linspace(0.0, 0.2, 2001)   # 0 .. 200 ms in 0.1 ms steps
KEY = "step_host_s"
FRAMEWORK = "megatron"    # the profile that declares it (framework_profiles/megatron.toml)


class HostObs(Protocol):
    """What the refit reads of an observation (lofo.Obs)."""

    @property
    def family(self) -> str: ...
    @property
    def measured(self) -> float: ...
    @property
    def predicted(self) -> float: ...
    @property
    def optimizer_s(self) -> float: ...
    @property
    def host_s(self) -> float | None: ...


def gpu_only(run: PublicRun, hw: HardwareProfile) -> tuple[float, float, float]:
    """(step with no host time, its GPU optimizer update, the framework's declared host time)
    of one run on `hw` (s)."""
    p = run_problem(run, hw)
    assert p.framework is not None   # run_problem names the run's framework
    declared = p.framework.time.step_host_s
    fw = replace(p.framework, time=replace(p.framework.time, step_host_s=0.0))
    t = evaluate(replace(p, framework=fw), Candidates.from_layouts([run_layout(run)])).time
    return float(t.step[0]), float(t.optimizer[0]), declared


def step_at(predicted: float, optimizer_s: float, declared: float, host: float | np.ndarray
            ) -> np.ndarray:
    """The step at host time `host`, from the step predicted at the declared one."""
    return np.asarray(predicted - optimizer_phase_time(optimizer_s, declared)
                      + np.asarray(optimizer_phase_time(optimizer_s, host)), dtype=float)


def refit_host(obs: Sequence[HostObs], families: set[str]) -> float | None:
    """The host time minimising Σ over `families` of the mean squared ln residual of their runs
    that carry one (None: no such run)."""
    loss = np.zeros_like(HOST_GRID)
    seen = False
    for fam in sorted(families):
        mine = [o for o in obs if o.family == fam and o.host_s is not None]
        if not mine:
            continue
        seen = True
        loss += np.mean([np.log(step_at(o.predicted, o.optimizer_s, float(o.host_s or 0.0),
                                        HOST_GRID) / o.measured) ** 2 for o in mine], axis=0)
    return float(HOST_GRID[int(np.argmin(loss))]) if seen else None
