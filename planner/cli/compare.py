"""`dtplan compare RUN... --plan FILE`: a measured run beside the plan's estimate."""

from __future__ import annotations

from typing import List, Optional

import typer

from planner.cli import app
from planner.cli.options import Format, opt


@app.command("compare")
def compare_cmd(
    runs: List[str] = typer.Argument(..., help="measured files or directories: profiler traces "
                                     "(one per rank), training logs, memory summaries"),
    plan: str = opt("plan"),
    hardware: Optional[str] = opt("hardware", "plan"),
    hardware_file: Optional[str] = opt("hardware_file"),
    fmt: Format = opt("fmt"),
    warmup_steps: int = opt("warmup_steps"),
) -> int:
    """Measured step vs estimate term by term, memory per view, and the largest discrepancy."""
    from planner.cli.evidence_cmds import compare_cmd_body

    return compare_cmd_body(runs, plan, hardware, hardware_file, fmt.value, warmup_steps)
