"""`dtplan check` (CI gate over plan files and engine configs) and `dtplan schema`."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import List, Optional

import typer

from ..render.terminal import write_stdout
from . import EXIT_OK, app
from .options import opt


class GateFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    github = "github"


class Engine(str, Enum):
    plan = "plan"
    deepspeed = "deepspeed"
    megatron = "megatron"
    torchtitan = "torchtitan"


class SchemaKind(str, Enum):
    """What `dtplan schema` describes: plan files, or a command's --format json output."""
    plan = "plan"
    verdict = "verdict"
    check = "check"
    fit = "fit"
    estimate = "estimate"
    memory = "memory"
    calibrate = "calibrate"
    models = "models"
    profiles = "profiles"
    layout = "layout"
    comm = "comm"
    bubble = "bubble"
    batch = "batch"
    scaling = "scaling"
    checkpoint = "checkpoint"


@app.command("check")
def check_cmd(
    files: List[str] = typer.Argument(..., metavar="FILE",
                                      help="plan files (YAML/TOML/JSON) or engine configs"),
    fmt: GateFormat = opt("fmt", "check"),
    strict: bool = typer.Option(False, "--strict", help="treat warnings as failures"),
    engine: Optional[Engine] = typer.Option(None, "--engine",
                                            help="input kind; detected from content if omitted"),
    gpus: Optional[int] = opt("gpus", "check"),
    hardware: Optional[str] = opt("hardware", "plan"),
    model: Optional[str] = opt("model"),
    model_config: Optional[str] = opt("model_config"),
    seq_len: Optional[int] = opt("seq_len", "check"),
    tp: Optional[int] = opt("tp", "check"),
    pp: Optional[int] = opt("pp", "check"),
) -> int:
    """Gate proposed training configs: every rule pass/fail/warn; exit 0 pass, 1 fail, 2 bad input."""
    from ..errors import InputError
    from ..gate import CheckOptions, check_paths
    from ..render import emit
    from ..render.gate import (file_document, render_github, render_json_verdict,
                               render_markdown_verdict)

    for name, value in (("--gpus", gpus), ("--seq-len", seq_len), ("--tp", tp), ("--pp", pp)):
        if value is not None and value < 1:
            raise InputError(name, f"must be an integer >= 1, got {value}")
    if model is not None and model_config is not None:
        raise InputError("--model-config", "give --model PRESET or --model-config PATH, not both")
    opts = CheckOptions(engine=engine.value if engine else None, gpus=gpus, hardware=hardware,
                        model=model_config or model, seq_len=seq_len, tp=tp, pp=pp, strict=strict)
    verdict = check_paths(files, opts)
    for v in verdict.files:
        if v.error:
            sys.stderr.write(f"dtplan: error: {v.error}\n")
    if fmt is GateFormat.json:
        write_stdout(render_json_verdict(verdict) + "\n")
    elif fmt is GateFormat.github:
        write_stdout(render_github(verdict) + "\n")
    elif fmt is GateFormat.markdown:
        write_stdout(render_markdown_verdict(verdict) + "\n")
    else:
        for v in verdict.files:
            if not v.error:
                emit(file_document(v), "table")
    return verdict.exit_code


@app.command("schema")
def schema_cmd(
    kind: SchemaKind = typer.Argument(SchemaKind.plan, metavar="[plan|COMMAND]",
                                      help="plan (plan files), or a command whose --format json "
                                      "output to describe: check, fit, estimate, memory, "
                                      "calibrate, models, profiles, layout, comm, bubble, batch, "
                                      "scaling, checkpoint"),
) -> int:
    """Print the JSON Schema of plan files, or of a command's `--format json` output
    (`dtplan schema fit`, `dtplan schema check`)."""
    from ..plan import json_schema
    from ..render.json_out import check_schema, output_schema

    if kind is SchemaKind.plan:
        schema = json_schema()
    elif kind in (SchemaKind.verdict, SchemaKind.check):
        schema = check_schema()
    else:
        schema = output_schema(kind.value)
    write_stdout(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK
