"""Quick calculators: comm, bubble, batch, checkpoint, scaling, layout."""

from __future__ import annotations

from typing import List, Optional

import typer

from . import EXIT_FAIL, EXIT_OK, app
from .options import Format, parse_list, parse_number

FormatOpt = typer.Option(Format.table, "--format", "-f", help="table, json or markdown")


@app.command("comm")
def comm_cmd(
    message_gb: float = typer.Option(..., "--message-gb", help="message size, GB (1e9 bytes)"),
    gpus: List[str] = typer.Option(["8"], "--gpus", help="rank counts: 8 or 8,64,512 (repeatable)"),
    bandwidth: float = typer.Option(..., "--bandwidth", help="link bandwidth per GPU, GB/s"),
    latency_us: float = typer.Option(0.0, "--latency", help="per-step latency α, µs"),
    fmt: Format = FormatOpt,
) -> int:
    """Bytes moved per GPU and α-β time of ring all-reduce, all-gather and reduce-scatter."""
    from ..calculators import comm
    from ..render import emit
    from ..render.quick import comm_doc

    ns = parse_list("--gpus", gpus)
    emit(comm_doc(comm(message_gb * 1e9, ns, bandwidth * 1e9, latency_us * 1e-6)), fmt.value)
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
    cost_min: float = typer.Option(..., "--cost-min", help="time to write one checkpoint, min"),
    mtbf_hours: float = typer.Option(..., "--mtbf-hours", help="job mean time between failures, h"),
    intervals: List[str] = typer.Option(["15,60,240,480"], "--intervals",
                                        help="intervals to tabulate, min"),
    restart_min: float = typer.Option(0.0, "--restart-min", help="restart cost per failure, min"),
    fmt: Format = FormatOpt,
) -> int:
    """Wasted fraction per checkpoint interval and the Young and Daly optima."""
    from ..calculators import checkpoint
    from ..render import emit
    from ..render.quick import checkpoint_doc

    ts = [t * 60 for t in parse_list("--intervals", intervals)]
    emit(checkpoint_doc(checkpoint(cost_min * 60, mtbf_hours * 3600, ts, restart_min * 60)),
         fmt.value)
    return EXIT_OK


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
    from ..layout import plan_layout
    from ..render import emit
    from ..render.quick import layout_doc

    doc = layout_doc(plan_layout(gpus, gpus_per_node, tp, pp, cp, show_groups=show_groups))
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL
