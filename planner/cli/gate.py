"""`dtplan check` (CI gate over plan files and engine configs) and `dtplan schema`."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import List, Optional

import typer

from planner.render.terminal import width

from planner.io.stdout import write_stdout
from planner.cli import EXIT_OK, app
from planner.cli.options import opt


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
    compare = "compare"


@app.command("check")
def check_cmd(
    files: List[str] = typer.Argument(..., metavar="FILE",
                                      help="plan files (YAML/TOML/JSON) or engine configs; a "
                                      "directory: the plan and engine files under it; - for stdin"),
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
    micro_batch: Optional[int] = opt("micro_batch", "override"),
    global_batch: Optional[int] = opt("global_batch"),
    recompute: Optional[str] = opt("recompute", "override"),
    precision: Optional[str] = opt("precision", "override"),
    gib: bool = opt("gib"),
) -> int:
    """Gate proposed training configs: every rule pass/fail/warn; exit 0 pass, 1 fail, 2 bad input.
    On a failure, the cheapest change that passes (micro-batch / recompute, another layout,
    more nodes)."""
    from planner.gate.check import CheckOptions, check_paths
    from planner.render import emit
    from planner.render.gate import (file_document, render_github, render_json_verdict,
                               render_markdown_verdict, skipped_line)

    if model is not None and model_config is not None:
        from planner.errors import InputError
        raise InputError("--model-config", "give --model PRESET or --model-config PATH, not both")
    opts = _options(engine=engine.value if engine else None, gpus=gpus, hardware=hardware,
                    model=model_config or model, seq_len=seq_len, tp=tp, pp=pp, strict=strict,
                    micro_batch=micro_batch, global_batch=global_batch, recompute=recompute,
                    precision=precision)
    verdict = check_paths(files, CheckOptions(**opts))
    for v in verdict.files:
        for line in v.errors or ([v.error] if v.error else []):
            sys.stderr.write(f"dtplan: error: {line}\n")
    if fmt is GateFormat.json:
        write_stdout(render_json_verdict(verdict) + "\n")
    elif fmt is GateFormat.github:
        write_stdout(render_github(verdict) + "\n")
    elif fmt is GateFormat.markdown:
        write_stdout(render_markdown_verdict(verdict, gib=gib) + "\n")
    else:
        for v in verdict.files:
            if not v.error:
                emit(file_document(v, gib=gib, width=width()), "table")
        if verdict.skipped:
            write_stdout(skipped_line(verdict) + "\n")
    return verdict.exit_code


def _options(**given) -> dict:
    """check's options, each checked against what it allows (every bad one reported at once)."""
    from planner.io import validate as v
    from planner.errors import Problems
    from planner.specs.knobs import KNOB

    found = Problems()
    for name in ("gpus", "seq_len", "tp", "pp", "micro_batch", "global_batch"):
        if given[name] is not None:
            found.run(v.positive_int, "--" + name.replace("_", "-"), given[name],
                      upper=v.MAX_SEQ_LEN if name == "seq_len" else v.MAX_GLOBAL_BATCH
                      if name == "global_batch" else v.MAX_GPUS)
    if given["recompute"] is not None:
        found.run(v.choice, "--recompute", given["recompute"], KNOB["recompute"].choices)
    if given["precision"] is not None:
        found.run(v.precision_recipe, "--precision", given["precision"])
    found.check()
    return given


@app.command("schema")
def schema_cmd(
    kind: SchemaKind = typer.Argument(SchemaKind.plan, metavar="[plan|COMMAND]",
                                      help="plan (plan files), or a command whose --format json "
                                      "output to describe: check, fit, estimate, memory, "
                                      "calibrate, models, profiles, layout, comm, bubble, batch, "
                                      "scaling, checkpoint, compare"),
) -> int:
    """Print the JSON Schema of plan files, or of a command's `--format json` output
    (`dtplan schema fit`, `dtplan schema check`)."""
    from planner.resolve.plan_file import json_schema
    from planner.render.json_out import check_schema, output_schema

    if kind is SchemaKind.plan:
        schema = json_schema()
    elif kind in (SchemaKind.verdict, SchemaKind.check):
        schema = check_schema()
    else:
        schema = output_schema(kind.value)
    write_stdout(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK
