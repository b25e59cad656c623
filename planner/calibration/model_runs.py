"""One published run per model family (the run set's ``validation`` rows), predicted with the
shipped profiles and reported as they are: no constant is refitted on them and no band derived
from them (issue #27, Must-show 5).

A run published as a whole-run figure (GPU-hours for a token count: ``measured.metric``
"gpu_hours") carries the step time it implies for its stated global batch, step = hours × 3600 /
GPUs × batch tokens / tokens; its prediction is dtplan's time to train as `dtplan estimate
--train-tokens` prints it: the step over the goodput at the Young/Daly checkpoint interval
(checkpoint writes, failures and restarts at the hardware profile's MTBF).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from planner.calibration.report import ModelTypeRun
from planner.calibration.runs import PublicRun, evaluate_run, load_runs, run_layout, run_model
from planner.evaluation.train import resilience_plan
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile

WHOLE_RUN = "gpu_hours"     # a whole-run figure: predicted with dtplan's goodput


def model_type_runs(framework: Optional[str] = None) -> list[ModelTypeRun]:
    """Every validation row of the run set, predicted at the shipped profiles; with `framework`,
    the rows whose run is evaluated under that framework profile (as `calibrate --framework`)."""
    runs = load_runs()
    keep = None if framework is None else load_framework(framework).name
    return [_predict(r) for r in runs.validation
            if keep is None or runs.frameworks[r.framework].profile == keep]


def _predict(run: PublicRun) -> ModelTypeRun:
    hw = load_profile(run.hardware)
    ev = evaluate_run(run, hw)
    step = float(ev.time.step[0])
    if run.measured.metric == WHOLE_RUN:
        res = resilience_plan(run_model(run), hw, run.gpus, run_layout(run),
                              tokens_per_s=float(ev.throughput.tokens_per_s[0]))
        step /= res.optimum.goodput_fraction
    measured = run.measured.step_time_s
    assert run.model_type is not None and measured is not None, run.id   # the test holds them
    return ModelTypeRun(
        model_type=run.model_type, run=run.id, source=run.source.cite(), hardware=run.hardware,
        gpus=run.gpus, layout=asdict(run.layout), measured_step_s=measured, predicted_step_s=step,
        error_pct=(step / measured - 1.0) * 100.0, mfu=float(ev.throughput.mfu[0]),
        fits=bool(ev.rules.passes["fits-in-memory"][0]),
        measured_as=f"{run.measured.metric} {run.measured.value:g}: {run.measured.definition}",
        not_modelled=list(run.not_modelled))
