"""Quick calculators: comm, bubble, batch, checkpoint, scaling, layout."""

from __future__ import annotations

from typing import List, Optional

import typer

from . import EXIT_FAIL, EXIT_OK, app
from .options import Format, parse_list, parse_number

FormatOpt = typer.Option(Format.table, "--format", "-f", help="table, json or markdown")


@app.command("comm")
def comm_cmd(
    message_gb: List[str] = typer.Option(..., "--message-gb",
                                         help="message size, GB (1e9 bytes): 1 or 0.0671,1.07"),
    gpus: List[str] = typer.Option(["8"], "--gpus", help="rank counts: 8 or 8,64,512 (repeatable)"),
    bandwidth: Optional[float] = typer.Option(None, "--bandwidth", help="link bandwidth per GPU, GB/s"),
    latency_us: float = typer.Option(0.0, "--latency", help="per-step latency α, µs"),
    hardware: Optional[str] = typer.Option(None, "--hardware",
                                           help="use a profile's topology instead of --bandwidth"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node",
                                                help="GPUs per node (overrides the profile)"),
    nic_gbit: Optional[float] = typer.Option(None, "--nic-gbit-per-gpu", "--nic-gbit",
                                             help="NIC bandwidth per GPU, Gb/s (overrides the profile)"),
    fmt: Format = FormatOpt,
) -> int:
    """Bytes moved per GPU and α-β time of ring all-reduce, all-gather and reduce-scatter, over
    one link or on a hardware profile's NVLink + network topology."""
    from ..calculators import comm
    from ..render import emit
    from ..render.quick import comm_doc

    ns = parse_list("--gpus", gpus)
    sizes = [x * 1e9 for x in parse_list("--message-gb", message_gb)]
    prof = None
    if hardware is not None:
        from ..specs.hardware import load_profile, with_overrides
        prof = with_overrides(load_profile(hardware), gpus_per_node=gpus_per_node,
                              nic_gbit_per_gpu=nic_gbit)
    elif gpus_per_node is not None or nic_gbit is not None:
        from ..errors import InputError
        raise InputError("--gpus-per-node" if gpus_per_node is not None else "--nic-gbit-per-gpu",
                         "only applies with --hardware")
    r = comm(sizes, ns, bandwidth * 1e9 if bandwidth is not None else None,
             latency_us * 1e-6, hardware=prof)
    emit(comm_doc(r), fmt.value)
    return EXIT_OK


@app.command("bubble")
def bubble_cmd(
    stages: int = typer.Option(..., "--stages", help="pipeline stages p"),
    micro_batches: List[str] = typer.Option(..., "--micro-batches",
                                            help="m, or a list 1,4,16,64 (repeatable)"),
    schedule: str = typer.Option("1f1b", "--schedule", help="1f1b, gpipe or interleaved"),
    chunks: int = typer.Option(1, "--chunks", help="model chunks per device v (interleaved)"),
    fmt: Format = FormatOpt,
) -> int:
    """Pipeline bubble fraction and efficiency."""
    from ..calculators import bubble
    from ..render import emit
    from ..render.quick import bubble_doc

    ms_ = parse_list("--micro-batches", micro_batches)
    emit(bubble_doc(bubble(stages, ms_, schedule.lower(), chunks)), fmt.value)
    return EXIT_OK


@app.command("batch")
def batch_cmd(
    micro_batch: int = typer.Option(..., "--micro-batch", help="samples per GPU per micro-step (b)"),
    dp: int = typer.Option(..., "--dp", help="data-parallel degree"),
    accum: Optional[int] = typer.Option(None, "--accum", help="gradient accumulation steps (a)"),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="target global batch (solves --accum)"),
    tp: int = typer.Option(1, "--tp"), pp: int = typer.Option(1, "--pp"),
    cp: int = typer.Option(1, "--cp"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="tokens per sample"),
    fmt: Format = FormatOpt,
) -> int:
    """Global batch B = b x a x DP (TP, PP, CP never multiply it), or a from a target B."""
    from ..calculators import batch
    from ..render import emit
    from ..render.quick import batch_doc

    r = batch(micro_batch, dp, accumulation=accum, global_batch=global_batch, tp=tp, pp=pp, cp=cp,
              seq_len=seq_len)
    emit(batch_doc(r), fmt.value)
    return EXIT_OK


@app.command("checkpoint")
def checkpoint_cmd(
    cost_min: Optional[float] = typer.Option(None, "--cost-min",
                                             help="time to write one checkpoint, min (derived "
                                                  "from the model when --model/--params is given)"),
    mtbf_hours: Optional[float] = typer.Option(None, "--mtbf-hours",
                                               help="job mean time between failures, h"),
    intervals: Optional[List[str]] = typer.Option(None, "--intervals",
                                                  help="intervals to tabulate, min "
                                                       "[default: 15,60,240,480]"),
    restart_min: Optional[float] = typer.Option(None, "--restart-min",
                                                help="restart cost per failure, min [simple "
                                                     "form: 0; derived: detect+reschedule+reload"
                                                     "+warm-up]"),
    model: Optional[str] = typer.Option(None, "--model", help="model preset (derived form)"),
    params: Optional[str] = typer.Option(None, "--params", help="parameter count (derived form)"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs in the job"),
    hardware: str = typer.Option("h100", "--hardware", help="hardware profile"),
    storage_gbs: Optional[float] = typer.Option(None, "--storage-gbs",
                                                help="aggregate storage write bandwidth, GB/s "
                                                     "[default: the profile's]"),
    read_gbs: Optional[float] = typer.Option(None, "--read-gbs",
                                             help="aggregate storage read bandwidth, GB/s "
                                                  "[default: the profile's]"),
    gpu_mtbf_hours: Optional[float] = typer.Option(None, "--gpu-mtbf-hours",
                                                   help="MTBF of one GPU, h (job: ÷ GPUs)"),
    node_mtbf_hours: Optional[float] = typer.Option(None, "--node-mtbf-hours",
                                                    help="MTBF of one node, h (job: ÷ nodes)"),
    job_mtbf_hours: Optional[float] = typer.Option(None, "--job-mtbf-hours",
                                                   help="job MTBF (or MTTI), h"),
    interruptions: Optional[float] = typer.Option(None, "--interruptions",
                                                  help="observed job interruptions (with "
                                                       "--over-days)"),
    over_days: Optional[float] = typer.Option(None, "--over-days",
                                              help="period the interruptions were counted in, days"),
    async_ckpt: bool = typer.Option(False, "--async", help="asynchronous checkpointing"),
    tokens_per_s: Optional[str] = typer.Option(None, "--tokens-per-s",
                                               help="training throughput, tokens/s"),
    train_tokens: Optional[str] = typer.Option(None, "--train-tokens", help="token budget"),
    price: Optional[float] = typer.Option(None, "--price-per-gpu-hour",
                                          help="price of one GPU-hour (any currency)"),
    straggler: Optional[float] = typer.Option(None, "--straggler",
                                              help="slowdown of one GPU, e.g. 1.2"),
    zero: int = typer.Option(3, "--zero", help="ZeRO stage for per-rank sizes (0-3)"),
    tp: int = typer.Option(1, "--tp"), pp: int = typer.Option(1, "--pp"),
    precision: str = typer.Option("mixed", "--precision",
                                  help="mixed, mixed-fp32-grads, fp8, fp32, bf16-pure"),
    optimizer: str = typer.Option("adam", "--optimizer",
                                  help="adam, adamw, sgd-momentum, sgd, adam-8bit, adafactor"),
    fmt: Format = FormatOpt,
) -> int:
    """Checkpoint interval, waste and goodput. Simple form: --cost-min and --mtbf-hours.
    Derived form: --model (or --params), --gpus and a failure rate; the checkpoint's size,
    write time, restart cost and (with tokens) the time to train follow."""
    from ..calculators import checkpoint
    from ..render import emit
    from ..render.quick import checkpoint_doc

    ts = [t * 60 for t in parse_list("--intervals", intervals or ["15,60,240,480"])]
    if model is None and params is None:
        _refuse_derived_only({"--gpus": gpus, "--gpu-mtbf-hours": gpu_mtbf_hours,
                              "--node-mtbf-hours": node_mtbf_hours,
                              "--job-mtbf-hours": job_mtbf_hours,
                              "--interruptions": interruptions, "--tokens-per-s": tokens_per_s,
                              "--train-tokens": train_tokens, "--straggler": straggler,
                              "--storage-gbs": storage_gbs}, cost_min, mtbf_hours)
        r = checkpoint(cost_min * 60, mtbf_hours * 3600, ts, (restart_min or 0.0) * 60)
        emit(checkpoint_doc(r), fmt.value)
        return EXIT_OK
    plan = _derived_plan(
        model=model, params=params, gpus=gpus, hardware=hardware, zero=zero, tp=tp, pp=pp,
        precision=precision, optimizer=optimizer, storage_gbs=storage_gbs, read_gbs=read_gbs,
        async_ckpt=async_ckpt, cost_min=cost_min, restart_min=restart_min,
        mtbf_hours=mtbf_hours, job_mtbf_hours=job_mtbf_hours, gpu_mtbf_hours=gpu_mtbf_hours,
        node_mtbf_hours=node_mtbf_hours, interruptions=interruptions, over_days=over_days,
        train_tokens=train_tokens, tokens_per_s=tokens_per_s, price=price, straggler=straggler)
    table = (checkpoint(plan.optimum.cost_s, plan.optimum.mtbf_s, ts, plan.restart.total_s)
             if intervals else None)
    doc = checkpoint_doc(plan, table)
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _refuse_derived_only(derived_only: dict[str, object], cost_min: Optional[float],
                         mtbf_hours: Optional[float]) -> None:
    """The simple form takes δ and M only: name the first derived-form option given, or the
    missing one of --cost-min / --mtbf-hours."""
    from ..errors import InputError
    stray = next((k for k, x in derived_only.items() if x is not None), None)
    if stray:
        raise InputError(stray, "needs --model or --params (the derived form)")
    for name, x in (("--cost-min", cost_min), ("--mtbf-hours", mtbf_hours)):
        if x is None:
            raise InputError(name, "is required (or give --model/--params, --gpus and a "
                                   "failure rate for the derived form)")


def _hours_s(x: Optional[float]) -> Optional[float]:
    return x * 3600 if x is not None else None


def _derived_plan(*, model: Optional[str], params: Optional[str], gpus: Optional[int],
                  hardware: str, zero: int, tp: int, pp: int, precision: str, optimizer: str,
                  storage_gbs: Optional[float], read_gbs: Optional[float], async_ckpt: bool,
                  cost_min: Optional[float], restart_min: Optional[float],
                  mtbf_hours: Optional[float], job_mtbf_hours: Optional[float],
                  gpu_mtbf_hours: Optional[float], node_mtbf_hours: Optional[float],
                  interruptions: Optional[float], over_days: Optional[float],
                  train_tokens: Optional[str], tokens_per_s: Optional[str],
                  price: Optional[float], straggler: Optional[float]):
    """The derived form's options in SI units (s, B/s, tokens) → ``resilience.plan_resilience``."""
    from .. import validate as v
    from ..errors import InputError
    from ..resilience import plan_resilience
    from ..specs.presets import get_preset

    if model is not None and params is not None:
        raise InputError("--params", "give --model or --params, not both")
    if gpus is None:
        raise InputError("--gpus", "is required with --model/--params")
    v.zero_stage("--zero", zero)
    if mtbf_hours is not None and job_mtbf_hours is not None:
        raise InputError("--mtbf-hours", "is the job MTBF; give it or --job-mtbf-hours, not both")
    spec = get_preset(model) if model is not None else None
    n_params = spec.param_count() if spec else parse_number("--params", params)
    return plan_resilience(
        n_params, gpus, hardware=hardware, model=spec.name if spec else None, tp=tp, pp=pp,
        zero_stage=zero, precision=precision, optimizer=optimizer,
        storage_write_bytes_per_s=storage_gbs * 1e9 if storage_gbs is not None else None,
        storage_read_bytes_per_s=read_gbs * 1e9 if read_gbs is not None else None,
        async_checkpoint=async_ckpt, cost_s=cost_min * 60 if cost_min is not None else None,
        gpu_mtbf_s=_hours_s(gpu_mtbf_hours), node_mtbf_s=_hours_s(node_mtbf_hours),
        job_mtbf_s=_hours_s(job_mtbf_hours if job_mtbf_hours is not None else mtbf_hours),
        interruptions=interruptions,
        period_s=over_days * 86400 if over_days is not None else None,
        restart_s=restart_min * 60 if restart_min is not None else None,
        tokens=parse_number("--train-tokens", train_tokens) if train_tokens else None,
        tokens_per_s=parse_number("--tokens-per-s", tokens_per_s) if tokens_per_s else None,
        price_per_gpu_hour=price, straggler_slowdown=straggler)


@app.command("scaling")
def scaling_cmd(
    baseline_ms: float = typer.Option(..., "--baseline-ms", help="time on one GPU (or baseline)"),
    measured_ms: float = typer.Option(..., "--measured-ms", help="time measured on --gpus GPUs"),
    gpus: int = typer.Option(..., "--gpus"),
    mode: str = typer.Option("strong", "--mode", help="strong or weak"),
    fmt: Format = FormatOpt,
) -> int:
    """Strong- or weak-scaling speedup and efficiency."""
    from ..calculators import scaling
    from ..render import emit
    from ..render.quick import scaling_doc

    emit(scaling_doc(scaling(baseline_ms / 1e3, measured_ms / 1e3, gpus, mode)), fmt.value)
    return EXIT_OK


@app.command("layout")
def layout_cmd(
    gpus: int = typer.Option(..., "--gpus"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per NVLink domain"),
    tp: int = typer.Option(1, "--tp"), pp: int = typer.Option(1, "--pp"),
    cp: int = typer.Option(1, "--cp"),
    show_groups: bool = typer.Option(False, "--show-groups", help="list every rank group"),
    fmt: Format = FormatOpt,
) -> int:
    """Derive DP from GPUs / (TP x PP x CP), check the topology rules, show the rank groups."""
    from ..specs.layout import plan_layout
    from ..render import emit
    from ..render.quick import layout_doc

    doc = layout_doc(plan_layout(gpus, gpus_per_node, tp, pp, cp, show_groups=show_groups))
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL
