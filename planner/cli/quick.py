"""Quick calculators: comm, bubble, batch, checkpoint, scaling, layout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, List, Optional

from planner.cli import options as o
from planner.cli.knob_options import (ChunksBubble, Cp, Ep, MicroBatchBatch, Optimizer, Pp,
                                      Precision, ScheduleBubble, Tp, ZeroCheckpoint)
from planner.cli.options import Format, given, option, parse_list, real, switch, whole
from planner.cli.root import BATCH, EXIT_FAIL, EXIT_OK, TRAINING, command
from planner.errors import InputError
from planner.io import validate as v
from planner.io.numbers import parse_number
from planner.specs.knobs import KNOB

if TYPE_CHECKING:
    from planner.resilience.planning import ResiliencePlan


@command("comm", "dtplan comm --message-gb 14 --gpus 8,64 --bandwidth 200",
         "dtplan comm --message-gb 14 --gpus 8,64 --hardware h100")
def comm_cmd(
    message_gb: Annotated[List[str], option("--message-gb", help="message size, GB (1e9 bytes): "
                                            "1 or 0.0671,1.07", metavar="N|LIST")],
    bandwidth: Annotated[Optional[float], real("--bandwidth", "link bandwidth per GPU, "
                                               "GB/s")] = None,
    latency_us: Annotated[float, real("--latency", "per-step latency α, µs")] = 0.0,
    gpus: o.GpusRanks = ["8"],  # noqa: B006 - typer's default, never mutated
    hardware: o.HardwareComm = None,
    gpus_per_node: o.GpusPerNode = None,
    nic_gbit: o.NicGbit = None, nic_gbit_old: o.NicGbitOld = None,
    fmt: o.Fmt = Format.table,
) -> int:
    """Bytes moved per GPU and α-β time of ring all-reduce, all-gather and reduce-scatter, over
    one link or on a hardware profile's NVLink + network topology."""
    from planner.evaluation.calculators import comm
    from planner.render import emit
    from planner.render.quick import comm_doc

    ns = parse_list("--gpus", gpus)
    sizes = [x * 1e9 for x in parse_list("--message-gb", message_gb)]
    prof = None
    nic_gbit = given(nic_gbit, nic_gbit_old)
    if hardware is not None:
        from planner.specs.hardware_toml import load_profile, with_overrides
        prof = with_overrides(load_profile(hardware), gpus_per_node=gpus_per_node,
                              nic_gbit_per_gpu=nic_gbit)
    elif gpus_per_node is not None or nic_gbit is not None:
        raise InputError("--gpus-per-node" if gpus_per_node is not None else "--nic-gbit-per-gpu",
                         "only applies with --hardware")
    r = comm(sizes, ns, bandwidth * 1e9 if bandwidth is not None else None,
             latency_us * 1e-6, hardware=prof)
    emit(comm_doc(r), fmt.value)
    return EXIT_OK


@command("bubble", "dtplan bubble --stages 4 --micro-batches 8",
         "dtplan bubble --stages 8 --micro-batches 8,32 --schedule interleaved --chunks 2")
def bubble_cmd(
    stages: Annotated[int, whole("--stages", "pipeline stages p")],
    micro_batches: Annotated[List[str], option("--micro-batches", help="m, or a list 1,4,16,64 "
                                               "(repeatable)", metavar="LIST")],
    schedule: ScheduleBubble = KNOB["schedule"].default,
    chunks: ChunksBubble = 1,
    fmt: o.Fmt = Format.table,
) -> int:
    """Pipeline bubble fraction and efficiency."""
    from planner.evaluation.calculators import bubble
    from planner.render import emit
    from planner.render.quick import bubble_doc

    ms_ = parse_list("--micro-batches", micro_batches)
    emit(bubble_doc(bubble(stages, ms_, schedule.lower(), chunks)), fmt.value)
    return EXIT_OK


@command("batch", "dtplan batch --micro-batch 4 --accum 8 --dp 8")
def batch_cmd(
    dp: Annotated[int, whole("--dp", "data-parallel degree")],
    micro_batch: MicroBatchBatch,
    accum: Annotated[Optional[int], whole("--accum", "gradient accumulation steps (a)",
                                          BATCH)] = None,
    global_batch: o.GlobalBatchTarget = None,
    seq_len: o.SeqLenBatch = None,
    tp: Tp = KNOB["tp"].default, pp: Pp = KNOB["pp"].default, cp: Cp = KNOB["cp"].default,
    fmt: o.Fmt = Format.table,
) -> int:
    """Global batch B = b x a x DP (TP, PP, CP never multiply it), or a from a target B."""
    from planner.evaluation.calculators import batch
    from planner.render import emit
    from planner.render.quick import batch_doc

    r = batch(micro_batch, dp, accumulation=accum, global_batch=global_batch, tp=tp, pp=pp, cp=cp,
              seq_len=seq_len)
    emit(batch_doc(r), fmt.value)
    return EXIT_OK


@command("checkpoint", "dtplan checkpoint --cost-min 3 --job-mtbf-hours 50",
         "dtplan checkpoint --model llama3-70b --gpus 1024")
def checkpoint_cmd(
    over_days: Annotated[Optional[float], real("--over-days", "period the interruptions were "
                                               "counted in, days")] = None,
    tokens_per_s: Annotated[Optional[str], option("--tokens-per-s", help="training throughput, "
                                                  "tokens/s", metavar="TEXT")] = None,
    straggler: Annotated[Optional[float], real("--straggler", "slowdown of one GPU, e.g. "
                                               "1.2")] = None,
    model: o.Model = None,
    params: o.Params = None,
    gpus: o.Gpus = None,
    hardware: o.Hardware = None,
    zero: ZeroCheckpoint = 3,
    tp: Tp = KNOB["tp"].default, pp: Pp = KNOB["pp"].default, ep: Ep = KNOB["ep"].default,
    precision: Precision = KNOB["precision"].default,
    optimizer: Optimizer = KNOB["optimizer"].default,
    cost_min: Annotated[Optional[float], real("--cost-min", "time to write one checkpoint, min "
                                              "(derived from the model when --model/--params is "
                                              "given)", TRAINING)] = None,
    job_mtbf_hours: o.JobMtbfHours = None, mtbf_hours: o.MtbfHours = None,
    intervals: Annotated[Optional[List[str]], option("--intervals", help="intervals to tabulate, "
                                                     "min [default: 15,60,240,480]",
                                                     panel=TRAINING, metavar="LIST")] = None,
    restart_min: Annotated[Optional[float], real("--restart-min", "restart cost per failure, min "
                                                 "[simple form: 0; derived: "
                                                 "detect+reschedule+reload+warm-up]",
                                                 TRAINING)] = None,
    storage_gbs: Annotated[Optional[float], real("--storage-gbs", "aggregate storage write "
                                                 "bandwidth, GB/s [default: the profile's]",
                                                 TRAINING, within=v.STORAGE_GBS)] = None,
    read_gbs: Annotated[Optional[float], real("--read-gbs", "aggregate storage read bandwidth, "
                                              "GB/s [default: the profile's]", TRAINING,
                                              within=v.STORAGE_GBS)] = None,
    gpu_mtbf_hours: o.GpuMtbfHours = None,
    node_mtbf_hours: Annotated[Optional[float], real("--node-mtbf-hours", "MTBF of one node, h "
                                                     "(job: ÷ nodes)", TRAINING,
                                                     within=v.MTBF_HOURS)] = None,
    interruptions: Annotated[Optional[float], real("--interruptions", "observed job "
                                                   "interruptions (with --over-days)",
                                                   TRAINING)] = None,
    async_ckpt: o.AsyncCheckpoint = False, async_old: o.Async = False,
    train_tokens: o.TrainTokens = None,
    gpu_hour_cost: o.GpuHourCost = None, price_per_gpu_hour: o.PricePerGpuHour = None,
    fmt: o.Fmt = Format.table,
) -> int:
    """Checkpoint interval, waste and goodput. Simple form: --cost-min and --job-mtbf-hours.
    Derived form: --model (or --params) and --gpus (failure rate: 50,677 h per GPU unless
    given, as in estimate); the checkpoint's size, write time, restart cost and (with tokens)
    the time to train follow."""
    from planner.evaluation.calculators import checkpoint
    from planner.render import emit
    from planner.render.quick import checkpoint_doc

    ts = [t * 60 for t in parse_list("--intervals", intervals or ["15,60,240,480"])]
    job_mtbf_hours, async_ckpt = given(job_mtbf_hours, mtbf_hours), async_ckpt or async_old
    price = given(gpu_hour_cost, price_per_gpu_hour)
    if model is None and params is None:
        return _simple_checkpoint(cost_min, job_mtbf_hours, ts, restart_min, fmt.value, {
            "--gpus": gpus, "--gpu-mtbf-hours": gpu_mtbf_hours,
            "--node-mtbf-hours": node_mtbf_hours, "--interruptions": interruptions,
            "--tokens-per-s": tokens_per_s, "--train-tokens": train_tokens,
            "--straggler": straggler, "--storage-gbs": storage_gbs, "--read-gbs": read_gbs,
            "--over-days": over_days, "--gpu-hour-cost": price,
            "--async-checkpoint": async_ckpt or None, "--zero": zero if zero != 3 else None,
            "--ep": ep if ep != 1 else None})

    plan = _derived_plan(
        model=model, params=params, gpus=gpus, hardware=hardware, zero=zero, tp=tp, pp=pp, ep=ep,
        precision=precision, optimizer=optimizer, storage_gbs=storage_gbs, read_gbs=read_gbs,
        async_ckpt=async_ckpt, cost_min=cost_min, restart_min=restart_min,
        job_mtbf_hours=job_mtbf_hours, gpu_mtbf_hours=gpu_mtbf_hours,
        node_mtbf_hours=node_mtbf_hours, interruptions=interruptions, over_days=over_days,
        train_tokens=train_tokens, tokens_per_s=tokens_per_s, price=price, straggler=straggler)
    table = (checkpoint(plan.optimum.cost_s, plan.optimum.mtbf_s, ts, plan.restart.total_s)
             if intervals else None)
    doc = checkpoint_doc(plan, table)
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL


def _derived_plan(*, model: Optional[str], params: Optional[str], gpus: Optional[int],
                  hardware: Optional[str], zero: int, tp: int, pp: int, ep: int, precision: str,
                  optimizer: str, storage_gbs: Optional[float], read_gbs: Optional[float],
                  async_ckpt: bool, cost_min: Optional[float], restart_min: Optional[float],
                  job_mtbf_hours: Optional[float], gpu_mtbf_hours: Optional[float],
                  node_mtbf_hours: Optional[float], interruptions: Optional[float],
                  over_days: Optional[float], train_tokens: Optional[str],
                  tokens_per_s: Optional[str], price: Optional[float], straggler: Optional[float]
                  ) -> ResiliencePlan:
    """The derived form's options in SI units (s, B/s, tokens) → ``resilience.plan_resilience``
    (no failure rate given: estimate's default per-GPU MTBF)."""
    from planner.specs.presets import get_preset
    from planner.resilience.planning import plan_resilience
    from planner.specs.hardware import DEFAULT_PROFILE

    if model is not None and params is not None:
        raise InputError("--params", "give --model or --params, not both")
    if gpus is None:
        raise InputError("--gpus", "is required with --model/--params")
    v.zero_stage("--zero", zero)
    job = job_mtbf_hours
    if job is None and gpu_mtbf_hours is None and node_mtbf_hours is None and interruptions is None:
        from planner.evaluation.train import DEFAULT_GPU_MTBF_S   # no failure rate given: estimate's default
        gpu_mtbf_hours = DEFAULT_GPU_MTBF_S / 3600
    spec = get_preset(model) if model is not None else None
    if spec is not None:
        n_params: float = spec.param_count()
    else:
        assert params is not None   # neither given: the caller took the simple form
        n_params = parse_number("--params", params)
    experts = spec.routed_expert_params() if spec else 0.0
    if ep != 1 and not experts:
        raise InputError("--ep", "needs a mixture-of-experts --model (a dense model has no "
                                 "experts to split)")
    hours = {k: (x * 3600 if x is not None else None) for k, x in
             (("gpu", gpu_mtbf_hours), ("node", node_mtbf_hours), ("job", job))}
    plan = plan_resilience(
        n_params, gpus, hardware=hardware or DEFAULT_PROFILE, model=spec.name if spec else None,
        tp=tp, pp=pp, zero_stage=zero, precision=precision, optimizer=optimizer, ep=ep,
        expert_params=experts,
        storage_write_bytes_per_s=storage_gbs * 1e9 if storage_gbs is not None else None,
        storage_read_bytes_per_s=read_gbs * 1e9 if read_gbs is not None else None,
        async_checkpoint=async_ckpt, cost_s=cost_min * 60 if cost_min is not None else None,
        gpu_mtbf_s=hours["gpu"], node_mtbf_s=hours["node"], job_mtbf_s=hours["job"],
        interruptions=interruptions,
        period_s=over_days * 86400 if over_days is not None else None,
        restart_s=restart_min * 60 if restart_min is not None else None,
        tokens=parse_number("--train-tokens", train_tokens) if train_tokens else None,
        tokens_per_s=parse_number("--tokens-per-s", tokens_per_s) if tokens_per_s else None,
        price_per_gpu_hour=price, straggler_slowdown=straggler)
    return plan


def _simple_checkpoint(cost_min: Optional[float], mtbf_hours: Optional[float], ts: list[float],
                       restart_min: Optional[float], fmt: str, derived_only: dict) -> int:
    """The simple form: δ and M given, no model; the derived form's options are refused."""
    from planner.evaluation.calculators import checkpoint
    from planner.render import emit
    from planner.render.quick import checkpoint_doc

    stray = next((k for k, x in derived_only.items() if x is not None), None)
    if stray:
        raise InputError(stray, "needs --model or --params (the derived form)")
    if cost_min is None or mtbf_hours is None:
        raise InputError("--cost-min" if cost_min is None else "--job-mtbf-hours",
                         "is required (or give --model/--params and --gpus for the derived form)")
    emit(checkpoint_doc(checkpoint(cost_min * 60, mtbf_hours * 3600, ts, (restart_min or 0.0) * 60)),
         fmt)
    return EXIT_OK


@command("scaling", "dtplan scaling --baseline-ms 800 --measured-ms 140 --gpus 8")
def scaling_cmd(
    baseline_ms: Annotated[float, real("--baseline-ms", "time on one GPU (or baseline), ms")],
    measured_ms: Annotated[float, real("--measured-ms", "time measured on --gpus GPUs, ms")],
    gpus: o.GpusRequired,
    mode: Annotated[str, option("--mode", help="strong or weak", metavar="strong|weak")] = "strong",
    fmt: o.Fmt = Format.table,
) -> int:
    """Strong- or weak-scaling speedup and efficiency."""
    from planner.evaluation.calculators import scaling
    from planner.render import emit
    from planner.render.quick import scaling_doc

    emit(scaling_doc(scaling(baseline_ms / 1e3, measured_ms / 1e3, gpus, mode)), fmt.value)
    return EXIT_OK


@command("layout", "dtplan layout --gpus 256 --tp 8 --pp 4")
def layout_cmd(
    gpus: o.GpusRequired,
    show_groups: Annotated[bool, switch("--show-groups", "list every rank group")] = False,
    gpus_per_node: o.GpusPerNodeLayout = 8,
    tp: Tp = KNOB["tp"].default, pp: Pp = KNOB["pp"].default, cp: Cp = KNOB["cp"].default,
    fmt: o.Fmt = Format.table,
) -> int:
    """Derive DP from GPUs / (TP x PP x CP), check the topology rules, show the rank groups."""
    from planner.specs.layout import plan_layout
    from planner.render import emit
    from planner.render.quick import layout_doc

    doc = layout_doc(plan_layout(gpus, gpus_per_node, tp, pp, cp, show_groups=show_groups))
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL
