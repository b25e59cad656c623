"""`dtplan fit`: search every layout, rank, explain the winner and the losers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Callable, Optional

from planner.cli import settled
from planner.cli import options as o
from planner.cli.common import JOB, emit_job
from planner.cli.knob_options import (ActivationOffload, BaseFormat, CpSearch, EpSearch, Finetune,
                                      DocTokens, Fp8, LoraAlpha, OptimizerInBackward,
                                      LoraDropout, LoraRank, LoraTargets, MicroBatchSearch, Optimizer,
                                      PpSearch, Precision, RecomputeSearch, TpSearch, ZeroSearch)
from planner.cli.options import (MAX_FIT_COUNTS, MAX_WHOLE, Format, option, parse_list, real,
                                 switch, whole)
from planner.cli.root import EXIT_FAIL, EXIT_OK, LAYOUT, OUTPUT, SEARCH, command
from planner.resolve.job import Flags
from planner.specs.knobs import KNOB

if TYPE_CHECKING:  # built when the command runs
    from planner.specs.budget import MemoryBudget
    from planner.specs.finetune import Tuning
    from planner.specs.framework import FrameworkProfile


# the headroom rule as a floor in GB (specs.budget.MemoryBudget.required_headroom)
MinHeadroomGb = Annotated[Optional[float], real(
    "--min-headroom-gb", "free memory per GPU the #1 must leave, GB (default: 6.6 % of its "
    "peak, the memory model's own error); layouts short of it are flagged and ranked after",
    SEARCH, within=(0, 10_000))]

# fit's fine-tuning options: the layout knobs' defaults (not search axes)
FT = {n: KNOB[n].default for n in ("finetune", "lora_rank", "lora_alpha", "lora_targets",
                                   "base_format", "lora_dropout")}


@command("fit", "dtplan fit --model llama3-70b --gpus 256",
         "dtplan fit --model-config ./config.json --gpus 64..1024 --seq-len 8192",
         "dtplan fit --from-plan plan.yaml --gpus 240      # lost two nodes")
@JOB
def fit_cmd(
    job: Flags,
    gpus: o.GpusList,
    micro_batch: MicroBatchSearch = None,
    precision: Precision = KNOB["precision"].default,
    optimizer: Optimizer = KNOB["optimizer"].default, fp8: Fp8 = KNOB["fp8"].default,
    finetune: Finetune = FT["finetune"], lora_rank: LoraRank = FT["lora_rank"],
    lora_alpha: LoraAlpha = FT["lora_alpha"], lora_targets: LoraTargets = FT["lora_targets"],
    base_format: BaseFormat = FT["base_format"], lora_dropout: LoraDropout = FT["lora_dropout"],
    tp: TpSearch = None, pp: PpSearch = None, cp: CpSearch = None, ep: EpSearch = None,
    zero: ZeroSearch = None, recompute: RecomputeSearch = None,
    act_offload: ActivationOffload = False, opt_in_bwd: OptimizerInBackward = False,
    doc_tokens: DocTokens = None,
    allow_offload: Annotated[bool, switch("--allow-offload", "also consider CPU offload",
                                          LAYOUT)] = False,
    objective: Annotated[str, option("--objective", help="time, headroom, cost or gpus",
                                     panel=SEARCH, metavar="GOAL")] = "time",
    from_plan: Annotated[Optional[str], option(
        "--from-plan", help="a running plan file: which layouts remain on --gpus GPUs (elastic "
        "shrink)", panel=SEARCH, metavar="PATH")] = None,
    min_headroom_gb: MinHeadroomGb = None,
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
    rank the ones that fit, and say why the rest were rejected. One fit prices at most 16,000,000
    structurally valid layouts in all (600,000 with --all, which keeps each); a larger space
    is refused up front, naming the options that narrow it."""
    from planner.render.fit import fit_doc
    from planner.search.fast import SearchSpace

    tuning = _tuning(precision, fp8, finetune, lora_rank, lora_alpha, lora_targets, base_format,
                     lora_dropout, act_offload, opt_in_bwd, doc_tokens)
    counts = _counts(gpus)
    if from_plan is not None:
        return _shrink(from_plan, counts, top, fmt.value, batch_tolerance,
                       job.framework_profile())
    job, offload_note = _offload_framework(job, allow_offload)
    spec = job.model_spec()
    prof = job.hardware_profile()
    s, gbatch, batch_note = job.batch(counts[0] if len(counts) == 1 else None)
    _check_search(recompute, zero, top)
    space = SearchSpace(tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, micro_batch=micro_batch,
                        recompute=recompute, allow_offload=allow_offload)
    from planner.search.sweep import fit_counts
    budget = _headroom_budget(min_headroom_gb)
    settled()   # what the search computes with is imported: out of the collector's sight
    shown = len(counts) > 3 and sys.stderr.isatty()
    results = fit_counts(spec, prof, counts, seq_len=s, global_batch=gbatch,
                         precision=precision, optimizer=optimizer, space=space,
                         tuning=tuning, objective=objective, top=top, dominated=show_all,
                         budget=budget, framework=job.framework_profile(),
                         progress=_progress(len(counts)) if shown else None)
    if shown:
        sys.stderr.write("\n")
    if len(results) == 1:
        from planner.advice.batch import advise_fit_result
        advice = advise_fit_result(results[0], spec, prof, space, precision=precision,
                                   optimizer=optimizer, framework=job.framework_profile())
        doc = fit_doc(results[0], gib=gib, wide=wide, batch_advice=advice)
    else:
        from planner.render.fit import sweep_doc
        doc = sweep_doc(results)
    _add_notes(doc.notes, [n for n in (offload_note, batch_note) if n],
               not show_all and any(r.layouts for r in results))
    emit_job(doc, fmt.value, job)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _check_search(recompute: Optional[str], zero: Optional[int], top: int) -> None:
    """fit's fixed search axes and --top, each bad value named by its option."""
    from planner.io import validate as v
    if recompute is not None:
        v.choice("--recompute", recompute, ("none", "selective", "full"))
    if zero is not None:
        v.zero_stage("--zero", zero)
    v.positive_int("--top", top, upper=1000)


def _add_notes(notes: list[str], first: list[str], front: bool) -> None:
    """The job's notes after the model line (`first`, in order), and what the list is when
    it is the front (`front`)."""
    notes[1:1] = first
    if front:
        notes.append("Listed: the layouts no other valid layout beats on both step time and "
                     "peak memory (an exact front); --all ranks every valid layout")


def _offload_framework(job: Flags, allow_offload: bool) -> tuple[Flags, str]:
    """The job with DeepSpeed selected where --allow-offload names no framework, and the note
    that says so: ZeRO-Offload and ZeRO-Infinity are DeepSpeed's; Megatron-LM, the default,
    offloads only the optimizer and keeps its gradient buffer and parameters on the GPU."""
    if not allow_offload or job.framework is not None:
        return job, ""
    import dataclasses

    from planner.search.would_fit import OFFLOAD_FRAMEWORK
    return dataclasses.replace(job, framework=OFFLOAD_FRAMEWORK), (
        f"Framework {OFFLOAD_FRAMEWORK}: --allow-offload without --framework plans "
        "ZeRO-Offload / ZeRO-Infinity on DeepSpeed, which moves the optimizer states, the "
        "gradient partitions and (stage 3) the parameters to host memory; Megatron-LM offloads "
        "only the optimizer (--framework megatron)")


def _headroom_budget(min_headroom_gb: Optional[float]) -> MemoryBudget:
    """The budget whose headroom rule the ranking applies: the default share of each peak, or
    --min-headroom-gb as a floor in its place."""
    from planner.specs.budget import MemoryBudget
    if min_headroom_gb is None:
        return MemoryBudget()
    return MemoryBudget(min_headroom_fraction=0.0, min_headroom_bytes=min_headroom_gb * 1e9)


def _counts(gpus: list[str] | str) -> list[int]:
    """The GPU counts of --gpus (a list or range), at most MAX_FIT_COUNTS of them."""
    from planner.io import validate as v
    counts = [v.positive_int("--gpus", x) for x in parse_list("--gpus", gpus)]
    if len(counts) > MAX_FIT_COUNTS:
        from planner.errors import InputError
        raise InputError("--gpus", f"at most {MAX_FIT_COUNTS} GPU counts in one fit (each is a "
                                   f"whole search), got {len(counts)}; split the sweep")
    return counts


def _tuning(precision: str, fp8: str, finetune: str, rank: int, alpha: int, targets: str,
            base_format: str, dropout: Optional[bool], activation_offload: Optional[bool],
            optimizer_in_backward: Optional[bool], doc_tokens: Optional[int]) -> "Tuning":
    """The fine-tuning and low-precision recipe of fit's options (checked as a layout's knobs
    are)."""
    from planner.specs.finetune import Tuning
    from planner.specs.knobs import Layout
    return Tuning.of(Layout(precision=precision, fp8=fp8,  # type: ignore[arg-type]
                            finetune=finetune,  # type: ignore[arg-type]
                            lora_rank=rank, lora_alpha=alpha, lora_targets=targets,
                            base_format=base_format,  # type: ignore[arg-type]
                            lora_dropout=bool(dropout),
                            activation_offload=bool(activation_offload),
                            optimizer_in_backward=bool(optimizer_in_backward),
                            doc_tokens=doc_tokens))


def _progress(total: int) -> Callable[[int, int], None]:
    def progress(i: int, n: int) -> None:
        sys.stderr.write(f"\rsearching {n} GPUs ({i + 1}/{total})")
    return progress


def _shrink(path: str, counts: list[int], top: int, fmt: str, batch_tolerance: float = 0.01,
            framework: Optional[FrameworkProfile] = None) -> int:
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
               batch_tolerance=batch_tolerance, framework=framework or inp.framework)
    doc = shrink_doc(r)
    emit(doc, fmt)
    return EXIT_OK if doc.ok else EXIT_FAIL
