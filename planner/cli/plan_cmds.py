"""Commands about one training job: memory and estimate (the catalogues, models and profiles,
are in cli/catalog.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Optional, TypeAlias

from planner.cli import options as o
from planner.cli.common import JOB, LAYOUT, OptionGroup, emit_job, optional_int
from planner.cli.knob_options import DocTokens, ZeroMemory
from planner.cli.options import Format, given, unlisted, unlisted_info
from planner.cli.root import EXIT_FAIL, EXIT_OK, command
from planner.errors import InputError, renamed
from planner.io import validate as v
from planner.io.numbers import parse_number
from planner.resolve.job import Flags

if TYPE_CHECKING:  # built from the options when the command runs (`--help` loads no model)
    from planner.specs.budget import MemoryBudget


def budget_from_options(context_gb: Optional[float], comm_buffer_gb: Optional[float],
                        fragmentation: Optional[float], margin: Optional[float]) -> MemoryBudget:
    """The memory budget's named reserves, each checked against what is allowed."""
    from planner.specs.budget import MemoryBudget

    kw = {}
    if context_gb is not None:
        kw["context_bytes"] = v.non_negative("--context-gb", context_gb) * 1e9
    if comm_buffer_gb is not None:
        kw["comm_buffer_bytes"] = v.non_negative("--comm-buffer-gb", comm_buffer_gb) * 1e9
    for name, x, key, top in (("--fragmentation", fragmentation, "fragmentation_fraction", 1.0),
                              ("--margin", margin, "margin_fraction", 0.99)):
        if x is not None:
            if not 0 <= v.non_negative(name, x) <= top:
                raise InputError(name, f"must be a fraction from 0 to {top:g}, got {x:g}")
            kw[key] = x
    return MemoryBudget(**kw)


# The memory budget's named reserves (memory and estimate).
BUDGET = OptionGroup("budget", (("context_gb", o.ContextGb, None),
                                ("comm_buffer_gb", o.CommBufferGb, None),
                                ("fragmentation", o.Fragmentation, None),
                                ("margin", o.Margin, None)), budget_from_options)

# estimate's time and cost options: memory still accepts them (older scripts pass them) and
# lists none of them, nor the network it does not depend on.
TrainTokens: TypeAlias = Annotated[Optional[str], unlisted_info(o.TrainTokens)]
GpuHourCost: TypeAlias = Annotated[Optional[float], unlisted_info(o.GpuHourCost)]
GpuMtbfHours: TypeAlias = Annotated[Optional[float], unlisted_info(o.GpuMtbfHours)]
JobMtbfHours: TypeAlias = Annotated[Optional[float], unlisted_info(o.JobMtbfHours)]
AsyncCheckpoint: TypeAlias = Annotated[bool, unlisted_info(o.AsyncCheckpoint)]


@command("memory", "dtplan memory --params 7e9 --gpus 8 --zero 2",
         "dtplan memory --model llama3-70b --gpus 64 --tp 8 --pp 2 --recompute selective")
@JOB.varied(nic_gbit=(unlisted(o.NicGbit), None))
@LAYOUT.varied(zero=(ZeroMemory, None), doc_tokens=(unlisted(DocTokens), None))
@BUDGET
def memory_cmd(
    job: Flags, layout: dict, budget: MemoryBudget,
    gpus: o.GpusOne = 1,
    gib: o.Gib = False,
    fmt: o.Fmt = Format.table,
    train_tokens: TrainTokens = None,
    gpu_hour_cost: GpuHourCost = None, price_per_gpu_hour: o.PricePerGpuHour = None,
    gpu_mtbf_hours: GpuMtbfHours = None,
    job_mtbf_hours: JobMtbfHours = None, mtbf_hours: o.MtbfHours = None,
    async_ckpt: AsyncCheckpoint = False, async_old: o.Async = False,
) -> int:
    """The per-GPU memory budget per pipeline stage, item by item, with a verdict and the layout
    rules."""
    # packed documents change the attention's time alone: the memory is the same without them
    doc_tokens = layout["doc_tokens"]
    code = _evaluate("memory", job, {**layout, "doc_tokens": None}, gpus, budget, gib, fmt.value)
    # Older scripts passed estimate's time and cost options here too: still accepted, unlisted,
    # and said to do nothing (after the answer: an input error stays the one stderr line).
    for flag, x in (("--train-tokens", train_tokens),
                    ("--gpu-hour-cost", given(gpu_hour_cost, price_per_gpu_hour)),
                    ("--gpu-mtbf-hours", gpu_mtbf_hours),
                    ("--job-mtbf-hours", given(job_mtbf_hours, mtbf_hours)),
                    ("--async-checkpoint", async_ckpt or async_old or None),
                    ("--doc-tokens", doc_tokens)):
        if x is not None:
            sys.stderr.write(f"dtplan: note: {flag} is for `dtplan estimate`; memory ignores it\n")
    return code


@command("estimate", "dtplan estimate --model llama3-8b --gpus 8",
         "dtplan estimate --model llama3-70b --gpus 256 --tp 8 --pp 4 --zero 1 "
         "--train-tokens 15e12")
@JOB
@LAYOUT
@BUDGET
def estimate_cmd(
    job: Flags, layout: dict, budget: MemoryBudget,
    gpus: o.GpusOne = 1,
    train_tokens: o.TrainTokens = None,
    gpu_hour_cost: o.GpuHourCost = None, price_per_gpu_hour: o.PricePerGpuHour = None,
    gpu_mtbf_hours: o.GpuMtbfHours = None,
    job_mtbf_hours: o.JobMtbfHours = None, mtbf_hours: o.MtbfHours = None,
    async_ckpt: o.AsyncCheckpoint = False, async_old: o.Async = False,
    gib: o.Gib = False,
    fmt: o.Fmt = Format.table,
) -> int:
    """One layout's memory, step time and where it goes, tokens/s, MFU, the communication tax
    per axis, checkpoint interval, goodput and time to train."""
    job_mtbf_hours = given(job_mtbf_hours, mtbf_hours)
    if gpu_mtbf_hours is not None and job_mtbf_hours is not None:
        raise InputError("--job-mtbf-hours", "give --gpu-mtbf-hours or --job-mtbf-hours, not both")
    tokens = parse_number("--train-tokens", train_tokens) if train_tokens is not None else None
    failures = {"train_tokens": tokens, "gpu_hour_cost": given(gpu_hour_cost, price_per_gpu_hour),
                "gpu_mtbf_hours": gpu_mtbf_hours, "job_mtbf_hours": job_mtbf_hours,
                "async_checkpoint": async_ckpt or async_old}
    return _evaluate("estimate", job, layout, gpus, budget, gib, fmt.value, failures)


def _evaluate(view: str, job: Flags, layout: dict, gpus: int, budget: MemoryBudget, gib: bool,
              fmt: str, failures: Optional[dict] = None) -> int:
    """memory: the per-GPU memory budget per pipeline stage. estimate: also step time,
    throughput, MFU, the communication tax per axis and the checkpoint/failure plan
    (`failures`). Both check the layout rules."""
    tp, pp, cp, ep, zero = (layout[n] for n in ("tp", "pp", "cp", "ep", "zero"))
    micro_batch, chunks, recompute = layout["micro_batch"], layout["chunks"], layout["recompute"]
    arch_given = job.nearest_preset or any(
        x is not None for x in (job.model, job.model_config, job.layers, job.hidden, job.heads))
    layout_given = (tp, pp, cp, ep) != (1, 1, 1, 1) or job.seq_len or micro_batch != "1" or \
        recompute != "none" or job.global_batch or job.tokens_per_batch
    if view == "memory" and job.params is not None and not arch_given and not layout_given:
        return _state_memory(job, job.params, layout, gpus, zero, gib, fmt,
                             budget.margin_fraction)

    from planner.evaluation.train import build_layout

    from planner.search.fit import estimate_with_auto
    from planner.render.estimate import estimate_doc

    spec = job.model_spec()
    prof = job.hardware_profile()
    s, gbatch, batch_note = job.batch(gpus)
    lay = build_layout(gpus=gpus, **{**layout, "zero": zero or 0,
                                     "micro_batch": optional_int("--micro-batch", micro_batch),
                                     "chunks": optional_int("--chunks", chunks)})
    e, auto_note = estimate_with_auto(spec, prof, gpus, lay, seq_len=s, global_batch=gbatch,
                                      budget=budget, auto_micro_batch=micro_batch == "auto",
                                      auto_chunks=chunks == "auto",
                                      framework=job.framework_profile())
    notes = [x for x in (batch_note, auto_note) if x]
    from planner.advice.batch import advise_estimate_result
    advice = (advise_estimate_result(e, spec, prof, budget, framework=job.framework_profile())
              if view == "estimate" else None)
    doc = estimate_doc(e, view=view, gib=gib, extra_notes=notes, batch_advice=advice)
    if failures is not None:
        from planner.evaluation.train import DEFAULT_GPU_MTBF_S, resilience_for
        from planner.render.estimate import resilience_table
        from planner.specs.records import dump
        gpu_h, job_h = failures["gpu_mtbf_hours"], failures["job_mtbf_hours"]
        plan = resilience_for(e, prof, spec, train_tokens=failures["train_tokens"],
                              gpu_hour_cost=failures["gpu_hour_cost"],
                              gpu_mtbf_s=gpu_h * 3600 if gpu_h else DEFAULT_GPU_MTBF_S,
                              job_mtbf_s=job_h * 3600 if job_h else None,
                              async_checkpoint=failures["async_checkpoint"])
        doc.tables.insert(-1, resilience_table(plan, gib))
        doc.data["resilience"] = dump(plan)
    emit_job(doc, fmt, job)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _state_memory(job: Flags, params: str, layout: dict, gpus: int, zero: Optional[int],
                  gib: bool, fmt: str, margin_fraction: float) -> int:
    """The quick question (`memory --params N` alone): model states only, every ZeRO stage,
    over --gpus ranks. No shape is inferred, so no preset is offered."""
    from planner.evaluation.calculators import state_memory
    from planner.render import emit
    from planner.render.quick import state_memory_doc
    if zero is not None:
        v.zero_stage("--zero", zero)
    prof = job.hardware_profile()
    cap = prof.gpu.memory_bytes  # the default profile's capacity too: one figure per GPU
    with renamed(shard_degree="gpus"):   # the states shard over every GPU: --gpus
        r = state_memory(parse_number("--params", params), gpus,
                         precision=layout["precision"], optimizer=layout["optimizer"],
                         gpu_memory_bytes=cap, margin_fraction=margin_fraction)
    doc = state_memory_doc(r, zero, gib=gib)
    emit(doc, fmt)
    return EXIT_OK if doc.ok else EXIT_FAIL
