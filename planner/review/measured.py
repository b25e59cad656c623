"""The design review's section "Measured run versus the estimate" (`dtplan report --compare`)."""

from __future__ import annotations

from pathlib import Path

from planner.calibration.compare import compare_run
from planner.calibration.fit_compute import RunSpec
from planner.evidence import read_evidence
from planner.evidence.stats import WARMUP_STEPS
from planner.render.evidence import comparison_tables
from planner.review.doc import Section
from planner.specs.framework import current_framework
from planner.specs.job import Job

TITLE = "Measured run versus the estimate"


def compare_section(inp: Job, paths: list[str], warmup_steps: int = WARMUP_STEPS) -> Section:
    """A report Section comparing the measured files with the reviewed layout's estimate."""
    run = RunSpec(model=inp.model, gpus=inp.gpus, seq_len=inp.seq_len,
                  global_batch=inp.global_batch, layout=inp.layout, framework=current_framework())
    cmp = compare_run(read_evidence(paths, warmup_steps, option="--compare"), run, inp.hardware)
    text = [f"Measured: {', '.join(f'`{Path(p).name}`' for p in cmp.sources)} against the "
            f"estimate on `{inp.hardware.name}`.", f"**Largest discrepancy:** {cmp.largest}."]
    return Section(TITLE, text + cmp.notes, comparison_tables(cmp))
