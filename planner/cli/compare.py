"""`dtplan compare RUN... --plan FILE`: a measured run beside the plan's estimate."""

from __future__ import annotations

from typing import List, Optional

import typer

from . import app
from .options import Format


@app.command("compare")
def compare_cmd(
    runs: List[str] = typer.Argument(..., help="measured files or directories: profiler traces "
                                     "(one per rank), training logs, memory summaries"),
    plan: str = typer.Option(..., "--plan", help="the job: plan file or engine config"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="profile (default: the plan's)"),
    hardware_file: Optional[str] = typer.Option(None, "--hardware-file", help="profile TOML"),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="table, json or markdown"),
    warmup_steps: int = typer.Option(1, "--warmup-steps", min=0, help="warm-up steps dropped"),
) -> int:
    """Measured step vs estimate term by term, memory per view, and the largest discrepancy."""
    from .evidence_cmds import compare_cmd_body

    return compare_cmd_body(runs, plan, hardware, hardware_file, fmt.value, warmup_steps)
