"""Commands about one training job: memory and estimate (the catalogues, models and profiles,
are in cli/catalog.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

from planner.cli import EXIT_FAIL, EXIT_OK
from planner.cli import common as o
from planner.cli.options import Format, decl, unlisted
from planner.cli.registry import command

if TYPE_CHECKING:  # built from the options when the command runs (`--help` loads no model)
    from planner.specs.budget import MemoryBudget

def _budget(context_gb, comm_buffer_gb, fragmentation, margin):
    # budget_from_options is defined below
    return budget_from_options(context_gb, comm_buffer_gb, fragmentation, margin)


# The memory budget's named reserves (memory and estimate).
budget_options = o.option_group("budget", (
    ("context_gb", Optional[float]), ("comm_buffer_gb", Optional[float]),
    ("fragmentation", Optional[float]), ("margin", Optional[float])), _budget)


@command("memory")
@o.job_options(hide=("nic_gbit",))   # memory does not depend on the network
@o.layout_options(variants={"zero": "memory"})
@budget_options
def memory_cmd(
    job: o.Flags, layout: dict, budget: MemoryBudget,
    gpus: int = decl("gpus", "one"),
    gib: bool = decl("gib"),
    fmt: Format = decl("fmt"),
    train_tokens: Optional[str] = unlisted("train_tokens"),
    gpu_hour_cost: Optional[float] = unlisted("gpu_hour_cost"),
    gpu_mtbf_hours: Optional[float] = unlisted("gpu_mtbf_hours"),
    job_mtbf_hours: Optional[float] = unlisted("job_mtbf_hours"),
    async_ckpt: bool = unlisted("async_checkpoint"),
) -> int:
    """The per-GPU memory budget per pipeline stage, item by item, with a verdict and the layout
    rules."""
    code = _evaluate("memory", job, layout, gpus, budget, gib, fmt.value)
    # Older scripts passed estimate's time and cost options here too: still accepted, unlisted,
    # and said to do nothing (after the answer: an input error stays the one stderr line).
    for flag, x in (("--train-tokens", train_tokens), ("--gpu-hour-cost", gpu_hour_cost),
                    ("--gpu-mtbf-hours", gpu_mtbf_hours), ("--job-mtbf-hours", job_mtbf_hours),
                    ("--async-checkpoint", async_ckpt or None)):
        if x is not None:
            sys.stderr.write(f"dtplan: note: {flag} is for `dtplan estimate`; memory ignores it\n")
    return code


@command("estimate")
@o.job_options
@o.layout_options
@budget_options
def estimate_cmd(
    job: o.Flags, layout: dict, budget: MemoryBudget,
    gpus: int = decl("gpus", "one"),
    train_tokens: Optional[str] = decl("train_tokens"),
    gpu_hour_cost: Optional[float] = decl("gpu_hour_cost"),
    gpu_mtbf_hours: Optional[float] = decl("gpu_mtbf_hours"),
    job_mtbf_hours: Optional[float] = decl("job_mtbf_hours"),
    async_ckpt: bool = decl("async_checkpoint"),
    gib: bool = decl("gib"),
    fmt: Format = decl("fmt"),
) -> int:
    """One layout's memory, step time and where it goes, tokens/s, MFU, the communication tax
    per axis, checkpoint interval, goodput and time to train."""
    from planner.errors import InputError
    from planner.cli.options import parse_number
    if gpu_mtbf_hours is not None and job_mtbf_hours is not None:
        raise InputError("--job-mtbf-hours", "give --gpu-mtbf-hours or --job-mtbf-hours, not both")
    tokens = parse_number("--train-tokens", train_tokens) if train_tokens is not None else None
    failures = {"train_tokens": tokens, "gpu_hour_cost": gpu_hour_cost,
                "gpu_mtbf_hours": gpu_mtbf_hours, "job_mtbf_hours": job_mtbf_hours,
                "async_checkpoint": async_ckpt}
    return _evaluate("estimate", job, layout, gpus, budget, gib, fmt.value, failures)


def _evaluate(view: str, job: o.Flags, layout: dict, gpus: int, budget: MemoryBudget, gib: bool,
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
        return _state_memory(job, layout, gpus, zero, gib, fmt, budget.margin_fraction)

    from planner.evaluation.train import build_layout

    from planner.search.fit import estimate_with_auto
    from planner.render.estimate import estimate_doc

    spec = job.model_spec()
    prof = job.hardware_profile()
    s, gbatch, batch_note = job.batch(gpus)
    lay = build_layout(gpus=gpus, **{**layout, "zero": zero or 0,
                                     "micro_batch": o.optional_int("--micro-batch", micro_batch),
                                     "chunks": o.optional_int("--chunks", chunks)})
    e, auto_note = estimate_with_auto(spec, prof, gpus, lay, seq_len=s, global_batch=gbatch,
                                      budget=budget, auto_micro_batch=micro_batch == "auto",
                                      auto_chunks=chunks == "auto")
    notes = [x for x in (batch_note, auto_note) if x]
    from planner.advice.batch import advise_estimate_result
    advice = advise_estimate_result(e, spec, prof, budget) if view == "estimate" else None
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
    o.emit_job(doc, fmt, job)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _state_memory(job: o.Flags, layout: dict, gpus: int, zero: Optional[int], gib: bool,
                  fmt: str, margin_fraction: float) -> int:
    """The quick question (`memory --params N` alone): model states only, every ZeRO stage,
    over --gpus ranks. No shape is inferred, so no preset is offered."""
    from planner.evaluation.calculators import state_memory
    from planner.render import emit
    from planner.render.quick import state_memory_doc
    from planner.cli.options import parse_number
    from planner.io import validate as v
    if zero is not None:
        v.zero_stage("--zero", zero)
    prof = job.hardware_profile()
    cap = prof.gpu.memory_bytes  # the default profile's capacity too: one figure per GPU
    r = state_memory(parse_number("--params", job.params), gpus, precision=layout["precision"],
                     optimizer=layout["optimizer"], gpu_memory_bytes=cap,
                     margin_fraction=margin_fraction)
    doc = state_memory_doc(r, zero, gib=gib)
    emit(doc, fmt)
    return EXIT_OK if doc.ok else EXIT_FAIL


def budget_from_options(context_gb, comm_buffer_gb, fragmentation, margin):
    """The memory budget's named reserves, each checked against what is allowed."""
    from planner.io import validate as v
    from planner.errors import InputError
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
