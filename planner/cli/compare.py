"""`dtplan compare RUN... --plan FILE`: a measured run beside the plan's estimate."""

from __future__ import annotations

from typing import Annotated, List

import typer

from planner.cli import options as o
from planner.cli.options import Format
from planner.cli.root import command


@command("compare", "dtplan compare trace_rank0.json train.log --plan plan.yaml")
def compare_cmd(
    runs: Annotated[List[str], typer.Argument(help="measured files or directories: profiler "
                                              "traces (one per rank), training logs, memory "
                                              "summaries")],
    plan: o.Plan,
    warmup_steps: o.WarmupSteps = 1,
    hardware: o.HardwarePlan = None,
    hardware_file: o.HardwareFile = None,
    fmt: o.Fmt = Format.table,
) -> int:
    """Measured step vs estimate term by term, memory per view, and the largest discrepancy."""
    from planner.cli.evidence_cmds import compare_cmd_body

    return compare_cmd_body(runs, plan, hardware, hardware_file, fmt.value, warmup_steps)
