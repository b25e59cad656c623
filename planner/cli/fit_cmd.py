"""`dtplan fit`: search every layout, rank, explain the winner and the losers."""

from __future__ import annotations

import sys
from typing import Annotated, Callable, Optional

from planner.cli import settled
from planner.cli import options as o
from planner.cli.common import JOB, emit_job
from planner.cli.knob_options import (CpSearch, EpSearch, MicroBatchSearch, Optimizer, PpSearch,
                                      Precision, RecomputeSearch, TpSearch, ZeroSearch)
from planner.cli.options import (MAX_FIT_COUNTS, MAX_WHOLE, Format, option, parse_list, real,
                                 switch, whole)
from planner.cli.root import EXIT_FAIL, EXIT_OK, LAYOUT, OUTPUT, SEARCH, command
from planner.resolve.job import Flags
from planner.specs.knobs import KNOB


@command("fit", "dtplan fit --model llama3-70b --gpus 256",
         "dtplan fit --model-config ./config.json --gpus 64..1024 --seq-len 8192",
         "dtplan fit --from-plan plan.yaml --gpus 240      # lost two nodes")
@JOB
def fit_cmd(
    job: Flags,
    gpus: o.GpusList,
    micro_batch: MicroBatchSearch = None,
    precision: Precision = KNOB["precision"].default,
    optimizer: Optimizer = KNOB["optimizer"].default,
    tp: TpSearch = None, pp: PpSearch = None, cp: CpSearch = None, ep: EpSearch = None,
    zero: ZeroSearch = None,
    recompute: RecomputeSearch = None,
    allow_offload: Annotated[bool, switch("--allow-offload", "also consider CPU offload",
                                          LAYOUT)] = False,
    objective: Annotated[str, option("--objective", help="time, headroom, cost or gpus",
                                     panel=SEARCH, metavar="GOAL")] = "time",
    from_plan: Annotated[Optional[str], option(
        "--from-plan", help="a running plan file: which layouts remain on --gpus GPUs (elastic "
        "shrink)", panel=SEARCH, metavar="PATH")] = None,
    top: Annotated[int, whole("--top", "how many layouts to show", SEARCH)] = 10,
    show_all: Annotated[bool, switch("--all", "also rank layouts another valid layout beats on "
                                     "step time and peak memory (hidden by default)",
                                     SEARCH)] = False,
    batch_tolerance: Annotated[float, real(
        "--batch-tolerance", "with --from-plan: the share the global batch may change for a "
        "faster layout (0 keeps it exact)", SEARCH, within=(None, MAX_WHOLE))] = 0.01,
    gib: o.Gib = False,
    wide: Annotated[bool, switch("--wide", "every column of the layouts table (tok/s, CP, EP, "
                                 "checkpoint interval, goodput), even past 80 columns",
                                 OUTPUT)] = False,
    fmt: o.Fmt = Format.table,
) -> int:
    """Search every DP x TP x PP x CP x EP x ZeRO x micro-batch x schedule x recompute layout,
    rank the ones that fit, and say why the rest were rejected. One fit prices at most
    16,000,000 structurally valid layouts over all its GPU counts; a larger space is refused
    up front, naming the options that narrow it."""
    from planner.io import validate as v
    from planner.render.fit import fit_doc
    from planner.search.fast import SearchSpace

    counts = [v.positive_int("--gpus", x) for x in parse_list("--gpus", gpus)]
    if len(counts) > MAX_FIT_COUNTS:
        from planner.errors import InputError
        raise InputError("--gpus", f"at most {MAX_FIT_COUNTS} GPU counts in one fit (each is a "
                                   f"whole search), got {len(counts)}; split the sweep")
    if from_plan is not None:
        return _shrink(from_plan, counts, top, fmt.value, batch_tolerance)
    spec = job.model_spec()
    prof = job.hardware_profile()
    s, gbatch, batch_note = job.batch(counts[0] if len(counts) == 1 else None)
    if recompute is not None:
        v.choice("--recompute", recompute, ("none", "selective", "full"))
    if zero is not None:
        v.zero_stage("--zero", zero)
    v.positive_int("--top", top, upper=1000)
    space = SearchSpace(tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, micro_batch=micro_batch,
                        recompute=recompute, allow_offload=allow_offload)
    from planner.search.sweep import fit_counts
    settled()   # what the search computes with is imported: out of the collector's sight
    shown = len(counts) > 3 and sys.stderr.isatty()
    results = fit_counts(spec, prof, counts, seq_len=s, global_batch=gbatch,
                         precision=precision, optimizer=optimizer, space=space,
                         objective=objective, top=top, dominated=show_all,
                         progress=_progress(len(counts)) if shown else None)
    if shown:
        sys.stderr.write("\n")
    if len(results) == 1:
        from planner.advice.batch import advise_fit_result
        advice = advise_fit_result(results[0], spec, prof, space, precision=precision,
                                   optimizer=optimizer)
        doc = fit_doc(results[0], gib=gib, wide=wide, batch_advice=advice)
    else:
        from planner.render.fit import sweep_doc
        doc = sweep_doc(results)
    if batch_note:
        doc.notes.insert(1, batch_note)
    if not show_all and any(r.layouts for r in results):
        doc.notes.append("Listed: the layouts no other valid layout beats on both step time and "
                         "peak memory (steps within 0.1 % or the error band count as equal); "
                         "--all ranks every valid layout")
    emit_job(doc, fmt.value, job)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _progress(total: int) -> Callable[[int, int], None]:
    def progress(i: int, n: int) -> None:
        sys.stderr.write(f"\rsearching {n} GPUs ({i + 1}/{total})")
    return progress


def _shrink(path: str, counts: list[int], top: int, fmt: str, batch_tolerance: float = 0.01) -> int:
    from pathlib import Path

    from planner.advice.shrink import shrink
    from planner.errors import InputError
    from planner.resolve.job import resolve_plan
    from planner.resolve.plan_file import load_plan, plan_where
    from planner.render import emit
    from planner.render.fit import shrink_doc

    if len(counts) != 1:
        raise InputError("--gpus", "give one GPU count with --from-plan")
    plan, text = load_plan(path, option="--from-plan")
    inp = resolve_plan(plan, Path(path).resolve().parent, plan_where(path, "--from-plan"),
                       text=text)
    r = shrink(inp.model, inp.hardware, inp.layout, inp.gpus, counts[0], seq_len=inp.seq_len,
               global_batch=inp.global_batch, budget=inp.budget, top=top,
               batch_tolerance=batch_tolerance)
    doc = shrink_doc(r)
    emit(doc, fmt)
    return EXIT_OK if doc.ok else EXIT_FAIL
