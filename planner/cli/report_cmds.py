"""`dtplan report` (design-review printout) and `dtplan export` (engine configs).

Both take either a plan file (its layout is the one reviewed / exported) or the same model,
hardware and batch options as `dtplan fit` (the search's winner).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from planner.cli import options as o
from planner.cli.common import JOB, offer_line
from planner.cli.knob_options import Optimizer, Precision
from planner.cli.options import given, option, switch
from planner.cli.root import EXIT_FAIL, EXIT_OK, OUTPUT, command
from planner.errors import InputError
from planner.io import validate as v
from planner.io import write as files
from planner.io.stdout import say
from planner.resolve.job import Flags
from planner.specs.knobs import KNOB

if TYPE_CHECKING:
    from planner.search.fit import FitResult
    from planner.specs.job import Job

Plan = Annotated[Optional[str], typer.Argument(
    metavar="[PLAN]", help="plan file (YAML/TOML/JSON); omit to use the fit options and the "
    "search's winner")]


def _model_words(job: Flags, plan: Optional[str], name: Optional[str]) -> list[str]:
    """The model as `check` reads it back: the config.json path given (its _name_or_path is
    no preset `--model` resolves), else the preset's or the plan model's name; a plan's inline
    shape has none, so MODEL stands for it (as FILE for stdout)."""
    if plan is None and job.model_config is not None:
        return ["--model-config", job.model_config]
    if plan is None and job.params is not None:   # the inferred shape: check infers the same
        return ["--params", job.params]
    return ["--model", name if name is not None else "MODEL"]


def _offer_note(job: Flags) -> None:
    """With --params: name the nearest preset on stderr (these documents have no JSON field to
    carry it), once the command has succeeded, so an input error stays the one stderr line."""
    offer = job.offer()
    if offer is not None:
        say("note", offer_line(offer))


def _inputs(plan: Optional[str], job: Flags, gpus: Optional[int], precision: str, optimizer: str
            ) -> tuple[Job | None, str, FitResult | None]:
    """(Job or None, source text, FitResult or None)."""
    from planner.review.build import inputs_from_fit, inputs_from_plan

    if plan is not None:
        given = job.given()
        if given:
            raise InputError(given[0], "give a plan file or the fit options, not both")
        from planner.framework_configs import detect, load_any
        text, fmt, data = load_any(plan, None)
        kind = detect(plan, fmt, data, text)
        if kind != "plan":   # an engine config: read as check reads it (--gpus if it needs one)
            from planner.resolve.job import resolve_file
            from planner.specs.job import CheckOptions
            return resolve_file(plan, CheckOptions(gpus=gpus))[0], f"{kind} config {plan}", None
        if gpus is not None:
            raise InputError("--gpus", "give a plan file or the fit options, not both")
        return inputs_from_plan(plan), f"plan file {plan}", None
    if gpus is None:
        raise InputError("--gpus", "needed without a plan file (or give a plan file)")
    n = v.positive_int("--gpus", gpus)
    s, gbatch, _note = job.batch(n)
    inp, res = inputs_from_fit(job.model_spec(), job.hardware_profile(), n, seq_len=s,
                               global_batch=gbatch, precision=precision, optimizer=optimizer,
                               framework=job.framework_profile())
    return inp, f"fit search over {n} GPUs (the winner)", res


@command("report", "dtplan report plan.yaml -o review.html",
         "dtplan report --model llama3-8b --gpus 64 -o review.md")
@JOB
def report_cmd(
    job: Flags,
    plan: Plan = None,
    compare: Annotated[Optional[List[str]], option(
        "--compare", help="measured run files (traces, logs): add a measured-vs-estimate "
        "section", metavar="N|LIST")] = None,
    gpus: o.GpusPlan = None,
    precision: Precision = KNOB["precision"].default,
    optimizer: Optimizer = KNOB["optimizer"].default,
    train_tokens: o.TrainTokens = None,
    gpu_hour_cost: o.GpuHourCost = None, price_per_gpu_hour: o.PricePerGpuHour = None,
    output: o.Output = "-", force: o.Force = False,
    html: Annotated[bool, switch("--html", "HTML even on stdout (default: by -o suffix)",
                                 OUTPUT)] = False,
    charts: Annotated[bool, switch("--charts/--no-charts", "draw charts (needs matplotlib)",
                                   OUTPUT)] = True,
) -> int:
    """Write a design-review document: inputs and assumptions, the layout and its alternatives,
    memory item by item, step time and communication, bubble, batch arithmetic, checkpoints,
    time and cost to train, rejections and rules. -o review.md (charts in review_files/),
    -o review.html (self-contained), -o - (Markdown on stdout)."""
    from planner.review.render import render_review_html, render_review_markdown
    from planner.review.build import build_review, train_tokens_value

    as_html = html or output.lower().endswith((".html", ".htm"))
    to_stdout = files.is_stdout(output)
    files.check_targets([output], force=force)
    suffix = Path(output).suffix.lower()
    if not to_stdout and suffix not in (".md", ".markdown", ".html", ".htm"):
        raise InputError("--output", f"must end in .md or .html (or be - for stdout), got "
                         f"{suffix or 'no suffix'}; for a PDF, print the HTML review from a browser")
    chart_dir = None if to_stdout or as_html else Path(output).with_name(Path(output).stem + "_files")
    gpu_hour_cost = given(gpu_hour_cost, price_per_gpu_hour)
    if gpu_hour_cost is not None and not gpu_hour_cost > 0:
        raise InputError("--gpu-hour-cost", f"must be > 0, got {gpu_hour_cost}")
    tokens = train_tokens_value(train_tokens)
    inp, source, res = _inputs(plan, job, gpus, precision, optimizer)
    draw = charts and (as_html or chart_dir is not None)
    review = build_review(inp, source=source, fit_result=res, train_tokens=tokens,
                          gpu_hour_cost=gpu_hour_cost, charts=draw)
    if compare and inp is not None:
        from planner.review.measured import compare_section
        review.sections.append(compare_section(inp, list(compare)))
    if charts and not draw and review.charts_note is None:
        review.charts_note = "Charts are written with -o FILE.md (as SVG files) or -o FILE.html."
    if as_html:
        files.write_text(output, render_review_html(review), force=force)
    else:
        if chart_dir is not None and review.charts:
            svgs = {chart_dir / f"{name}.svg": svg for name, svg in review.charts.items()}
            files.check_targets(list(svgs), force=force)
            for path, svg in svgs.items():
                files.write_text(path, svg, force=force, make_dirs=True)
        files.write_text(output, render_review_markdown(review, chart_dir.name if chart_dir else None),
                         force=force)
    if not to_stdout:
        say("wrote", f"{output}" + (f" and {len(review.charts)} charts in {chart_dir}/"
                                    if chart_dir and review.charts else "")
            + f" — {review.verdict}")
    _offer_note(job)
    return EXIT_OK if review.ok else EXIT_FAIL


@command("export", "dtplan export plan.yaml --to deepspeed -o ds_config.json",
         "dtplan export --model llama3-8b --gpus 64 --to torchtitan -o train.sh")
@JOB
def export_cmd(
    job: Flags,
    to: Annotated[str, option("--to", help="deepspeed, megatron, torchtitan or accelerate",
                              metavar="ENGINE")],
    plan: Plan = None,
    allow_failing: Annotated[bool, switch("--allow-failing", "export a plan that fails a rule "
                                          "(it will fail check too)")] = False,
    torchtitan_version: Annotated[str, option(
        "--torchtitan-version", help="the torchtitan release to write for: 0.3 (a command "
        "line: --module/--config and overrides) or 0.2 (a job TOML)",
        metavar="0.3|0.2")] = "0.3",
    gpus: o.GpusPlan = None,
    precision: Precision = KNOB["precision"].default,
    optimizer: Optimizer = KNOB["optimizer"].default,
    output: o.Output = "-", force: o.Force = False,
) -> int:
    """Write an engine config (DeepSpeed JSON, Megatron-LM launch flags, torchtitan 0.3 command
    line or v0.2 TOML, Accelerate YAML) for a plan's layout or the search's winner; `dtplan
    check` reads it back to the same verdict."""
    from planner.framework_configs import TARGETS, TITAN_VERSIONS, as_run, export
    from planner.gate.check import evaluate_inputs

    if to not in TARGETS:
        raise InputError("--to", f"must be one of {', '.join(TARGETS)}, got {to!r}")
    if torchtitan_version not in TITAN_VERSIONS:
        raise InputError("--torchtitan-version", f"must be one of {', '.join(TITAN_VERSIONS)}, "
                         f"got {torchtitan_version!r}")
    if to == "torchtitan" and torchtitan_version != "0.2" and output.lower().endswith(".toml"):
        raise InputError("--output", f"torchtitan {torchtitan_version} reads no TOML (it takes a "
                         "command line: write .sh); for a v0.2.x job TOML pass "
                         "--torchtitan-version 0.2")
    files.check_targets([output], force=force)
    inp, source, res = _inputs(plan, job, gpus, precision, optimizer)
    if inp is None:
        assert res is not None   # a plan or engine config always gives a Job; a search may not
        sys.stderr.write(f"dtplan: error: no layout of {res.gpus} GPUs fits; nothing to export "
                         "(see dtplan fit)\n")
        return EXIT_FAIL
    result = export(to, inp, torchtitan_version)   # what the engine cannot express is refused first
    # Judged as the engine will run it: under the target's framework profile, as `dtplan check`
    # of the written file judges it (Accelerate runs PyTorch FSDP2).
    from dataclasses import replace

    from planner.specs.framework import load_framework
    fw = load_framework("fsdp" if to == "accelerate" else to)
    inp = as_run(replace(inp, framework=fw), fw)
    failed = [r.name for r in evaluate_inputs(inp, source).rules if r.status == "fail"]
    if failed and not allow_failing:
        sys.stderr.write(f"dtplan: error: the plan fails {', '.join(failed)} under the {fw.name} "
                         "framework profile; the export would fail `dtplan check` too (pass "
                         "--allow-failing to write it anyway)\n")
        return EXIT_FAIL
    files.write_text(output, result.text, force=force)
    read = inp.notes if source.endswith(f" config {plan}") else []  # what reading an engine config noted
    for n in [*read, *result.notes]:
        say("note", n)
    if to != "accelerate":
        name = output if not files.is_stdout(output) else "FILE"
        words = [name, "--engine", to, *result.check_args, "--hardware", inp.hardware.name]
        if "--model" not in result.check_args and to != "megatron":
            words += _model_words(job, plan, inp.model.name)
        # every word quoted for the shell: a model name from a file is the user's text
        sys.stderr.write("dtplan: check it with: dtplan check "
                         + " ".join(w if w == "FILE" else shlex.quote(str(w)) for w in words)
                         + "\n")
    _offer_note(job)
    return EXIT_OK
