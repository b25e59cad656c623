"""`dtplan check` (CI gate over plan files and engine configs) and `dtplan schema`."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, List, Optional

import typer

from planner.cli import options as o
from planner.cli.knob_options import (EpCheck, MicroBatchOverride, PpCheck, PrecisionOverride,
                                      RecomputeOverride, TpCheck)
from planner.cli.options import GateFormat, switch
from planner.cli.root import EXIT_OK, LAYOUT, OUTPUT, command
from planner.errors import InputError, Problems
from planner.io import validate as v
from planner.io.numbers import parse_number
from planner.io.stdout import say, write_stdout
from planner.render.terminal import width
from planner.specs.knobs import KNOB


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


@command("check", "dtplan check plan.yaml", "dtplan check --format github plans/*.yaml",
         "dtplan check ds_config.json --engine deepspeed --gpus 64 --model llama3-8b")
def check_cmd(
    files: Annotated[List[str], typer.Argument(
        metavar="FILE", help="plan files (YAML/TOML/JSON) or engine configs; a directory: the "
        "plan and engine files under it; - for stdin")],
    model: o.Model = None,
    model_config: o.ModelConfig = None,
    params: o.Params = None,
    gpus: o.GpusCheck = None,
    hardware: o.HardwarePlan = None,
    seq_len: o.SeqLenCheck = None,
    micro_batch: MicroBatchOverride = None,
    global_batch: o.GlobalBatch = None,
    engine: Annotated[Optional[Engine], typer.Option(
        "--engine", help="input kind; detected from content if omitted",
        rich_help_panel=LAYOUT)] = None,
    tp: TpCheck = None,
    pp: PpCheck = None,
    ep: EpCheck = None,
    recompute: RecomputeOverride = None,
    precision: PrecisionOverride = None,
    fmt: o.FmtCheck = GateFormat.table,
    strict: Annotated[bool, switch("--strict", "treat warnings as failures", OUTPUT)] = False,
    gib: o.Gib = False,
) -> int:
    """Gate proposed training configs: every rule pass/fail/warn; exit 0 pass, 1 fail, 2 bad input.
    On a failure, the cheapest change that passes (micro-batch / recompute, another layout,
    more nodes)."""
    from planner.gate.check import check_paths
    from planner.specs.job import CheckOptions
    from planner.render import emit
    from planner.render.gate import (file_document, render_github, render_json_verdict,
                               render_markdown_verdict, skipped_line)

    named = [f for f, x in (("--model", model), ("--model-config", model_config),
                            ("--params", params)) if x is not None]
    if len(named) > 1:
        raise InputError(named[1], f"give one of --model, --model-config and --params, not "
                         f"{' and '.join(named)}")
    opts = _options(engine=engine.value if engine else None, gpus=gpus, hardware=hardware,
                    model=model_config or model, params=params, seq_len=seq_len, tp=tp, pp=pp,
                    ep=ep, strict=strict, micro_batch=micro_batch, global_batch=global_batch, recompute=recompute,
                    precision=precision)
    verdict = check_paths(files, CheckOptions(**opts))
    for judged in verdict.files:
        for line in judged.errors or ([judged.error] if judged.error else []):
            say("error", line)
    if fmt is GateFormat.json:
        write_stdout(render_json_verdict(verdict) + "\n")
    elif fmt is GateFormat.github:
        write_stdout(render_github(verdict) + "\n")
    elif fmt is GateFormat.markdown:
        write_stdout(render_markdown_verdict(verdict, gib=gib) + "\n")
    else:
        for judged in verdict.files:
            if not judged.error:
                emit(file_document(judged, gib=gib, width=width()), "table")
        if verdict.skipped:
            write_stdout(skipped_line(verdict) + "\n")
    return verdict.exit_code


def _params(text: str) -> float:
    """--params N (K/M/B/T suffixes), as fit reads it."""
    return v.positive("--params", parse_number("--params", text), upper=v.MAX_PARAMS)


def _options(**given: Any) -> dict:
    """check's options, each checked against what it allows (every bad one reported at once)."""
    found = Problems()
    for name in ("gpus", "seq_len", "tp", "pp", "ep", "micro_batch", "global_batch"):
        if given[name] is not None:
            found.run(v.positive_int, "--" + name.replace("_", "-"), given[name],
                      upper=v.MAX_SEQ_LEN if name == "seq_len" else v.MAX_GLOBAL_BATCH
                      if name == "global_batch" else v.MAX_GPUS)
    if given["params"] is not None:
        given["params"] = found.run(_params, given["params"])
    if given["recompute"] is not None:
        found.run(v.choice, "--recompute", given["recompute"], KNOB["recompute"].choices)
    if given["precision"] is not None:
        found.run(v.precision_recipe, "--precision", given["precision"])
    found.check()
    return given


@command("schema", "dtplan schema plan > plan.schema.json", "dtplan schema fit")
def schema_cmd(
    kind: Annotated[SchemaKind, typer.Argument(
        metavar="[plan|COMMAND]", help="plan (plan files), or a command whose --format json "
        "output to describe: check, fit, estimate, memory, calibrate, models, profiles, layout, "
        "comm, bubble, batch, scaling, checkpoint, compare")] = SchemaKind.plan,
) -> int:
    """Print the JSON Schema of plan files, or of a command's `--format json` output
    (`dtplan schema fit`, `dtplan schema check`)."""
    from planner.resolve.plan_file import json_schema
    from planner.render.json_schema import check_schema, output_schema

    if kind is SchemaKind.plan:
        schema = json_schema()
    elif kind in (SchemaKind.verdict, SchemaKind.check):
        schema = check_schema()
    else:
        schema = output_schema(kind.value)
    write_stdout(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK
