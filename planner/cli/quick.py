"""Quick calculators: comm, bubble, batch, checkpoint, scaling, layout."""

from __future__ import annotations

from typing import List, Optional

from planner.cli import EXIT_FAIL, EXIT_OK
from planner.io import validate as v
from planner.cli.options import Format, Opt, decl, parse_list, parse_number, real
from planner.cli.registry import command

FormatOpt = decl("fmt")


@command("comm")
def comm_cmd(
    message_gb: List[str] = Opt(("--message-gb",), "message size, GB (1e9 bytes): 1 or "
                                "0.0671,1.07", ...),
    gpus: List[str] = decl("gpus", "ranks"),
    bandwidth: Optional[float] = real("--bandwidth", "link bandwidth per GPU, GB/s"),
    latency_us: float = real("--latency", "per-step latency α, µs", 0.0),
    hardware: Optional[str] = decl("hardware", "comm"),
    gpus_per_node: Optional[int] = decl("gpus_per_node"),
    nic_gbit: Optional[float] = decl("nic_gbit"),
    fmt: Format = FormatOpt,
) -> int:
    """Bytes moved per GPU and α-β time of ring all-reduce, all-gather and reduce-scatter, over
    one link or on a hardware profile's NVLink + network topology."""
    from planner.evaluation.calculators import comm
    from planner.render import emit
    from planner.render.quick import comm_doc

    ns = parse_list("--gpus", gpus)
    sizes = [x * 1e9 for x in parse_list("--message-gb", message_gb)]
    prof = None
    if hardware is not None:
        from planner.specs.hardware import load_profile, with_overrides
        prof = with_overrides(load_profile(hardware), gpus_per_node=gpus_per_node,
                              nic_gbit_per_gpu=nic_gbit)
    elif gpus_per_node is not None or nic_gbit is not None:
        from planner.errors import InputError
        raise InputError("--gpus-per-node" if gpus_per_node is not None else "--nic-gbit-per-gpu",
                         "only applies with --hardware")
    r = comm(sizes, ns, bandwidth * 1e9 if bandwidth is not None else None,
             latency_us * 1e-6, hardware=prof)
    emit(comm_doc(r), fmt.value)
    return EXIT_OK


@command("bubble")
def bubble_cmd(
    stages: int = Opt(("--stages",), "pipeline stages p", ..., kind="whole"),
    micro_batches: List[str] = Opt(("--micro-batches",), "m, or a list 1,4,16,64 (repeatable)",
                                   ...),
    schedule: str = decl("schedule", "bubble"),
    chunks: int = decl("chunks", "bubble"),
    fmt: Format = FormatOpt,
) -> int:
    """Pipeline bubble fraction and efficiency."""
    from planner.evaluation.calculators import bubble
    from planner.render import emit
    from planner.render.quick import bubble_doc

    ms_ = parse_list("--micro-batches", micro_batches)
    emit(bubble_doc(bubble(stages, ms_, schedule.lower(), chunks)), fmt.value)
    return EXIT_OK


@command("batch")
def batch_cmd(
    micro_batch: int = decl("micro_batch", "batch"),
    dp: int = Opt(("--dp",), "data-parallel degree", ..., kind="whole"),
    accum: Optional[int] = Opt(("--accum",), "gradient accumulation steps (a)", kind="whole"),
    global_batch: Optional[int] = decl("global_batch", "target"),
    tp: int = decl("tp"), pp: int = decl("pp"), cp: int = decl("cp"),
    seq_len: Optional[int] = decl("seq_len", "batch"),
    fmt: Format = FormatOpt,
) -> int:
    """Global batch B = b x a x DP (TP, PP, CP never multiply it), or a from a target B."""
    from planner.evaluation.calculators import batch
    from planner.render import emit
    from planner.render.quick import batch_doc

    r = batch(micro_batch, dp, accumulation=accum, global_batch=global_batch, tp=tp, pp=pp, cp=cp,
              seq_len=seq_len)
    emit(batch_doc(r), fmt.value)
    return EXIT_OK


@command("checkpoint")
def checkpoint_cmd(
    cost_min: Optional[float] = real("--cost-min", "time to write one checkpoint, min "
                                     "(derived from the model when --model/--params is given)"),
    job_mtbf_hours: Optional[float] = decl("job_mtbf_hours"),
    intervals: Optional[List[str]] = Opt(("--intervals",), "intervals to tabulate, min "
                                         "[default: 15,60,240,480]"),
    restart_min: Optional[float] = real("--restart-min", "restart cost per failure, min [simple "
                                        "form: 0; derived: detect+reschedule+reload+warm-up]"),
    model: Optional[str] = decl("model"),
    params: Optional[str] = decl("params"),
    gpus: Optional[int] = decl("gpus"),
    hardware: Optional[str] = decl("hardware"),
    storage_gbs: Optional[float] = real("--storage-gbs", "aggregate storage write bandwidth, "
                                        "GB/s [default: the profile's]", within=v.STORAGE_GBS),
    read_gbs: Optional[float] = real("--read-gbs", "aggregate storage read bandwidth, GB/s "
                                     "[default: the profile's]", within=v.STORAGE_GBS),
    gpu_mtbf_hours: Optional[float] = decl("gpu_mtbf_hours"),
    node_mtbf_hours: Optional[float] = real("--node-mtbf-hours", "MTBF of one node, h (job: ÷ "
                                            "nodes)", within=v.MTBF_HOURS),
    interruptions: Optional[float] = real("--interruptions", "observed job interruptions (with "
                                          "--over-days)"),
    over_days: Optional[float] = real("--over-days", "period the interruptions were counted in, "
                                      "days"),
    async_ckpt: bool = decl("async_checkpoint"),
    tokens_per_s: Optional[str] = Opt(("--tokens-per-s",), "training throughput, tokens/s"),
    train_tokens: Optional[str] = decl("train_tokens"),
    price: Optional[float] = decl("gpu_hour_cost"),
    straggler: Optional[float] = real("--straggler", "slowdown of one GPU, e.g. 1.2"),
    zero: int = decl("zero", "checkpoint"),
    tp: int = decl("tp"), pp: int = decl("pp"), ep: int = decl("ep"),
    precision: str = decl("precision"),
    optimizer: str = decl("optimizer"),
    fmt: Format = FormatOpt,
) -> int:
    """Checkpoint interval, waste and goodput. Simple form: --cost-min and --job-mtbf-hours.
    Derived form: --model (or --params) and --gpus (failure rate: 50,677 h per GPU unless
    given, as in estimate); the checkpoint's size, write time, restart cost and (with tokens)
    the time to train follow."""
    from planner.evaluation.calculators import checkpoint
    from planner.render import emit
    from planner.render.quick import checkpoint_doc

    ts = [t * 60 for t in parse_list("--intervals", intervals or ["15,60,240,480"])]
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
                  tokens_per_s: Optional[str], price: Optional[float], straggler: Optional[float]):
    """The derived form's options in SI units (s, B/s, tokens) → ``resilience.plan_resilience``
    (no failure rate given: estimate's default per-GPU MTBF)."""
    from planner.errors import InputError
    from planner.specs.presets import get_preset
    from planner.io import validate as v
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
    n_params = spec.param_count() if spec else parse_number("--params", params)
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
    from planner.errors import InputError
    from planner.render import emit
    from planner.render.quick import checkpoint_doc

    stray = next((k for k, x in derived_only.items() if x is not None), None)
    if stray:
        raise InputError(stray, "needs --model or --params (the derived form)")
    for name, x in (("--cost-min", cost_min), ("--job-mtbf-hours", mtbf_hours)):
        if x is None:
            raise InputError(name, "is required (or give --model/--params and --gpus for "
                                   "the derived form)")
    emit(checkpoint_doc(checkpoint(cost_min * 60, mtbf_hours * 3600, ts, (restart_min or 0.0) * 60)),
         fmt)
    return EXIT_OK


@command("scaling")
def scaling_cmd(
    baseline_ms: float = real("--baseline-ms", "time on one GPU (or baseline), ms", ...),
    measured_ms: float = real("--measured-ms", "time measured on --gpus GPUs, ms", ...),
    gpus: int = decl("gpus", "required"),
    mode: str = Opt(("--mode",), "strong or weak", "strong", "strong|weak"),
    fmt: Format = FormatOpt,
) -> int:
    """Strong- or weak-scaling speedup and efficiency."""
    from planner.evaluation.calculators import scaling
    from planner.render import emit
    from planner.render.quick import scaling_doc

    emit(scaling_doc(scaling(baseline_ms / 1e3, measured_ms / 1e3, gpus, mode)), fmt.value)
    return EXIT_OK


@command("layout")
def layout_cmd(
    gpus: int = decl("gpus", "required"),
    gpus_per_node: int = decl("gpus_per_node", "layout"),
    tp: int = decl("tp"), pp: int = decl("pp"), cp: int = decl("cp"),
    show_groups: bool = Opt(("--show-groups",), "list every rank group", False, kind="flag"),
    fmt: Format = FormatOpt,
) -> int:
    """Derive DP from GPUs / (TP x PP x CP), check the topology rules, show the rank groups."""
    from planner.specs.layout import plan_layout
    from planner.render import emit
    from planner.render.quick import layout_doc

    doc = layout_doc(plan_layout(gpus, gpus_per_node, tp, pp, cp, show_groups=show_groups))
    emit(doc, fmt.value)
    return EXIT_OK if doc.ok else EXIT_FAIL
