"""Failure and checkpoint planning: checkpoint contents and size, write time, failure rate,
restart cost, optimum interval, goodput, time to train, stragglers.

Validated inputs in, records out (SI units, unit-suffixed names); every formula is in
``engine/resilience.py`` or ``engine/checkpoint.py``. The entry point is ``plan_resilience``;
the pieces (``checkpoint_contents``, ``checkpoint_write``, ``failure_rate``, ``restart_cost``,
``interval_optimum``, ``training_time``, and ``straggler`` from planner.resilience.straggler) are public
for callers that have some of the figures already.
"""


import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Optional

from planner.io import validate as v
# What a checkpoint holds lives in planner/resilience/contents.py; its names stay importable here.
from planner.resilience.contents import CheckpointContents, checkpoint_contents
from planner.engine import checkpoint as ckpt_eq
from planner.engine import resilience as res_eq
from planner.errors import InputError, named
from planner.resilience.straggler import Straggler, straggler

if TYPE_CHECKING:
    from planner.specs.hardware import HardwareProfile
    from planner.specs.knobs import Layout

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0

# Restart components (seconds). Their sum without the reload, 15 min, matches MegaScale's report
# (NSDI 2024): diagnosis under 10 min and training back within 15 min of the latest checkpoint.
DEFAULT_DETECT_S = 10 * MIN      # failure noticed and diagnosed (collective timeout, health checks)
DEFAULT_RESCHEDULE_S = 3 * MIN   # assumption: swap in a spare node, relaunch the processes
DEFAULT_WARMUP_S = 2 * MIN       # assumption: NCCL communicators, compilation, data-loader refill
DEFAULT_RESTART_S = DEFAULT_DETECT_S + DEFAULT_RESCHEDULE_S + DEFAULT_WARMUP_S  # before reload

# The first-order waste model assumes δ, τ and R are small against M; beyond this the figures
# understate the waste (Daly 2006 Sec. 3) and are marked approximate.
FIRST_ORDER_LIMIT = 0.3


@dataclass(frozen=True, kw_only=True)
class CheckpointWrite:
    size_bytes: float
    storage_write_bytes_per_s: float
    link_bytes_per_s: float          # per writing GPU (its NIC)
    writers: float                   # effective writing GPUs
    links_bytes_per_s: float         # writers × link
    write_s: float
    binds: Literal["storage", "node links"]
    async_checkpoint: bool
    pcie_bytes_per_s: float
    stall_s: float                   # GPU → host copy (async only blocks for this)
    blocking_s: float                # δ: what training loses per checkpoint


def checkpoint_write(size_bytes: float, storage_write_bytes_per_s: float, *,
                     writers: float = 1.0, link_bytes_per_s: float = math.inf,
                     busiest_rank_bytes: Optional[float] = None,
                     pcie_bytes_per_s: float = math.inf,
                     async_checkpoint: bool = False) -> CheckpointWrite:
    """Write time size ÷ min(storage, writers × link) and the blocking cost δ: the write time,
    or with asynchronous checkpointing only the GPU→host copy of the busiest rank's shard."""
    size = v.positive("size_bytes", size_bytes)
    st = v.positive("storage_write_bytes_per_s", storage_write_bytes_per_s)
    per_gpu = size / writers if busiest_rank_bytes is None else busiest_rank_bytes
    t = float(res_eq.write_time(size, st, writers, link_bytes_per_s))
    links = writers * link_bytes_per_s
    stall = float(res_eq.copy_stall(per_gpu, pcie_bytes_per_s))
    return CheckpointWrite(size_bytes=size, storage_write_bytes_per_s=st,
                           link_bytes_per_s=link_bytes_per_s, writers=float(writers),
                           links_bytes_per_s=links, write_s=t,
                           binds="storage" if st <= links else "node links",
                           async_checkpoint=async_checkpoint, pcie_bytes_per_s=pcie_bytes_per_s,
                           stall_s=stall, blocking_s=stall if async_checkpoint else t)


@dataclass(frozen=True, kw_only=True)
class FailureRate:
    source: Literal["gpu", "node", "job", "interruptions"]
    job_mtbf_s: float
    gpus: Optional[int] = None
    nodes: Optional[int] = None
    component_mtbf_s: Optional[float] = None
    interruptions: Optional[float] = None
    period_s: Optional[float] = None
    failures_per_day: float


def failure_rate(*, gpus: Optional[int] = None, gpus_per_node: int = 8,
                 gpu_mtbf_s: Optional[float] = None, node_mtbf_s: Optional[float] = None,
                 job_mtbf_s: Optional[float] = None, interruptions: Optional[float] = None,
                 period_s: Optional[float] = None) -> FailureRate:
    """Job MTBF from exactly one of: a per-GPU MTBF ÷ GPUs, a per-node MTBF ÷ nodes, the job
    MTBF itself, or an observed count of interruptions over a period (Llama 3: 419 in 54 days
    → 3.09 h)."""
    given = [name for name, x in (("gpu_mtbf_s", gpu_mtbf_s), ("node_mtbf_s", node_mtbf_s),
                                  ("job_mtbf_s", job_mtbf_s), ("interruptions", interruptions))
             if x is not None]
    if len(given) != 1:
        raise InputError(named(given[1] if given[1:] else "job_mtbf_s"),
                         f"give exactly one of {named('gpu_mtbf_s')}, {named('node_mtbf_s')}, "
                         f"{named('job_mtbf_s')} or {named('interruptions')} with "
                         f"{named('period_s')}")
    n = v.positive_int("gpus", gpus) if gpus is not None else None
    nodes = math.ceil(n / v.positive_int("gpus_per_node", gpus_per_node)) if n else None
    component = gpu_mtbf_s if gpu_mtbf_s is not None else node_mtbf_s
    if component is not None:
        if n is None or nodes is None:
            raise InputError(named("gpus"), "is needed to turn a per-GPU or per-node MTBF into a "
                                            "job MTBF")
        src: Literal["gpu", "node"] = "gpu" if gpu_mtbf_s is not None else "node"
        comp = v.positive(f"{src}_mtbf_s", component)
        m = float(res_eq.job_mtbf(comp, n if src == "gpu" else nodes))
        return FailureRate(source=src, job_mtbf_s=m, gpus=n, nodes=nodes, component_mtbf_s=comp,
                           failures_per_day=DAY / m)
    if job_mtbf_s is not None:
        m = v.positive("job_mtbf_s", job_mtbf_s)
        return FailureRate(source="job", job_mtbf_s=m, gpus=n, nodes=nodes,
                           failures_per_day=DAY / m)
    assert interruptions is not None   # exactly one source is given (checked above): this one
    count = v.positive("interruptions", interruptions)
    if period_s is None:
        raise InputError(named("period_s"), f"is needed with {named('interruptions')}")
    period = v.positive("period_s", period_s)
    m = float(res_eq.mtbf_from_interruptions(period, count))
    return FailureRate(source="interruptions", job_mtbf_s=m, gpus=n, nodes=nodes,
                       interruptions=count, period_s=period, failures_per_day=DAY / m)


@dataclass(frozen=True, kw_only=True)
class RestartCost:
    detect_s: float
    reschedule_s: float
    reload_s: float
    warmup_s: float
    total_s: float
    overridden: bool           # total given directly (--restart-min)


def restart_cost(*, reload_s: float = 0.0, detect_s: float = DEFAULT_DETECT_S,
                 reschedule_s: float = DEFAULT_RESCHEDULE_S, warmup_s: float = DEFAULT_WARMUP_S,
                 total_s: Optional[float] = None) -> RestartCost:
    """R = detect + reschedule + reload + warm-up; `total_s` replaces the sum when measured."""
    parts = [v.non_negative(f, x) for f, x in (("detect_s", detect_s),
                                               ("reschedule_s", reschedule_s),
                                               ("reload_s", reload_s), ("warmup_s", warmup_s))]
    r = float(res_eq.restart_time(*parts))
    if total_s is not None:
        r = v.non_negative("total_s", total_s)
    return RestartCost(detect_s=parts[0], reschedule_s=parts[1], reload_s=parts[2],
                       warmup_s=parts[3], total_s=r, overridden=total_s is not None)


@dataclass(frozen=True, kw_only=True)
class IntervalOptimum:
    cost_s: float
    mtbf_s: float
    restart_s: float
    young_interval_s: float
    daly_interval_s: float
    young_waste_fraction: float
    daly_waste_fraction: float
    interval_s: float                   # the recommendation: Daly's, floored by `min_interval_s`
    floored: bool                       # True when the floor (async write time) raised it
    overhead_fraction: float            # δ/τ
    lost_work_fraction: float           # τ/(2M)
    restart_fraction: float             # R/M
    waste_fraction: float
    goodput_fraction: float
    first_order_valid: bool             # δ, τ, R small against M


def interval_optimum(cost_s: float, mtbf_s: float, restart_s: float = 0.0,
                     min_interval_s: float = 0.0) -> IntervalOptimum:
    """Young's and Daly's optimum interval and the waste breakdown at Daly's (engine.checkpoint);
    goodput = 1 − waste. Daly's examples (δ = 5 min): M = 24 h → 117 min, 6 h → 57, 15 min → 9.1."""
    d = v.duration("cost_s", cost_s)
    m = v.duration("mtbf_s", mtbf_s)
    r = v.non_negative("restart_s", restart_s)
    if r > v.MAX_DURATION_S:  # a restart may be 0 (or below 1 ns: no cost); only too long fails
        v.duration("restart_s", r)
    young = float(ckpt_eq.young_interval(d, m))
    daly = float(ckpt_eq.daly_interval(d, m))
    tau = float(max(daly, min_interval_s))
    waste = float(ckpt_eq.waste_fraction(tau, d, m, r))
    return IntervalOptimum(
        cost_s=d, mtbf_s=m, restart_s=r, young_interval_s=young, daly_interval_s=daly,
        young_waste_fraction=float(ckpt_eq.waste_fraction(young, d, m, r)),
        daly_waste_fraction=float(ckpt_eq.waste_fraction(daly, d, m, r)), interval_s=tau,
        floored=tau > daly, overhead_fraction=float(ckpt_eq.overhead_fraction(tau, d)),
        lost_work_fraction=float(ckpt_eq.lost_work_fraction(tau, m)),
        restart_fraction=float(ckpt_eq.restart_fraction(r, m)), waste_fraction=waste,
        goodput_fraction=float(res_eq.goodput(waste)),
        first_order_valid=max(d, tau, r) <= FIRST_ORDER_LIMIT * m)


@dataclass(frozen=True, kw_only=True)
class TrainingTime:
    tokens: float
    tokens_per_s: float
    gpus: int
    goodput_fraction: float
    ideal_s: float                      # no failures, no checkpoints
    with_failures_s: float
    ideal_gpu_hours: float
    gpu_hours: float
    price_per_gpu_hour: Optional[float] = None
    cost: Optional[float] = None

    def cost_of(self, gpu_hours: float) -> Optional[float]:
        """GPU-hours × the price of one GPU-hour; None when no price was given."""
        return gpu_hours * self.price_per_gpu_hour if self.price_per_gpu_hour is not None else None


def training_time(tokens: float, tokens_per_s: float, gpus: int, goodput_fraction: float,
                  price_per_gpu_hour: Optional[float] = None) -> TrainingTime:
    """T = (tokens ÷ tokens/s) ÷ goodput; GPU-hours = T × GPUs; cost = GPU-hours × price."""
    tok = v.positive("tokens", tokens)
    rate = v.positive("tokens_per_s", tokens_per_s)
    n = v.positive_int("gpus", gpus)
    ideal = float(res_eq.train_time(tok, rate))
    # Waste ≥ 100%: the job never finishes (infinite time; JSON writes null).
    t = float(res_eq.train_time(tok, rate, goodput_fraction)) if goodput_fraction > 0 else math.inf
    price = (v.non_negative("price_per_gpu_hour", price_per_gpu_hour)
             if price_per_gpu_hour is not None else None)
    hours = float(res_eq.gpu_hours(t, n))
    return TrainingTime(tokens=tok, tokens_per_s=rate, gpus=n, goodput_fraction=goodput_fraction,
                        ideal_s=ideal, with_failures_s=t,
                        ideal_gpu_hours=float(res_eq.gpu_hours(ideal, n)),
                        gpu_hours=hours, price_per_gpu_hour=price,
                        cost=hours * price if price is not None else None)


@dataclass(frozen=True, kw_only=True)
class ResiliencePlan:
    model: Optional[str] = None
    hardware: str
    gpus: int
    gpus_per_node: int
    nodes: int
    contents: CheckpointContents
    write: CheckpointWrite
    failures: FailureRate
    restart: RestartCost
    optimum: IntervalOptimum
    async_write_exceeds_interval: bool     # background write outlasts Daly's interval
    host_bytes_per_node: float             # host memory async staging needs on the busiest node
    host_memory_bytes: float
    training: Optional[TrainingTime] = None
    straggler: Optional[Straggler] = None


def layout_checkpoint(params: float, layout: "Layout", expert_params: float = 0.0) -> CheckpointContents:
    """The checkpoint one layout writes, for every command (check, report, estimate): all
    DP × TP × PP × CP GPUs hold state; CP ranks replicate the weights like DP ranks, so ZeRO
    shards over DP × CP (or the layout's hybrid shard group)."""
    return checkpoint_contents(params, layout.world, tp=layout.tp, pp=layout.pp,
                               zero_stage=layout.zero, precision=layout.precision,
                               optimizer=layout.optimizer, shard_degree=layout.shard_group,
                               ep=layout.ep, expert_params=expert_params)


def plan_resilience(params: float, gpus: int, *, hardware: "str | HardwareProfile" = "h100",
                    model: Optional[str] = None, shard_degree: Optional[int] = None,
                    tp: int = 1, pp: int = 1, zero_stage: int = 3, precision: str = "mixed",
                    optimizer: str = "adam", storage_write_bytes_per_s: Optional[float] = None,
                    storage_read_bytes_per_s: Optional[float] = None,
                    async_checkpoint: bool = False, cost_s: Optional[float] = None,
                    gpu_mtbf_s: Optional[float] = None, node_mtbf_s: Optional[float] = None,
                    job_mtbf_s: Optional[float] = None, interruptions: Optional[float] = None,
                    period_s: Optional[float] = None, restart_s: Optional[float] = None,
                    detect_s: float = DEFAULT_DETECT_S, reschedule_s: float = DEFAULT_RESCHEDULE_S,
                    warmup_s: float = DEFAULT_WARMUP_S, tokens: Optional[float] = None,
                    tokens_per_s: Optional[float] = None, price_per_gpu_hour: Optional[float] = None,
                    straggler_slowdown: Optional[float] = None, ep: int = 1,
                    expert_params: float = 0.0) -> ResiliencePlan:
    """Checkpoint size → write time δ (or the async stall) → with the job MTBF M and restart R,
    the Young/Daly interval, waste, goodput and (given tokens and tokens/s) time to train.

    `cost_s` replaces the derived δ with a measured one; `restart_s` the derived R.
    """
    from planner.specs.hardware_toml import load_profile

    hw = load_profile(hardware) if isinstance(hardware, str) else hardware
    gpn = hw.scale_up.gpus_per_node
    c = checkpoint_contents(params, gpus, tp=tp, pp=pp, zero_stage=zero_stage,
                            precision=precision, optimizer=optimizer, shard_degree=shard_degree,
                            ep=ep, expert_params=expert_params)
    wbw = (v.positive("storage_write_bytes_per_s", storage_write_bytes_per_s)
           if storage_write_bytes_per_s is not None else hw.storage.write_bytes_per_s)
    rbw = (v.positive("storage_read_bytes_per_s", storage_read_bytes_per_s)
           if storage_read_bytes_per_s is not None else hw.storage.read_bytes_per_s)
    # Each writing GPU sends its shard through its own NIC (one per GPU on the bundled
    # profiles), so writers × NIC per GPU = writing nodes × NIC per node for full nodes.
    w = checkpoint_write(c.total_bytes, wbw, writers=c.effective_writers,
                         link_bytes_per_s=hw.scale_out.nic_bytes_per_s,
                         busiest_rank_bytes=c.busiest_rank_bytes,
                         pcie_bytes_per_s=hw.host.pcie_bytes_per_s,
                         async_checkpoint=async_checkpoint)
    if cost_s is not None:
        w = replace(w, blocking_s=v.positive("cost_s", cost_s))
    f = failure_rate(gpus=c.gpus, gpus_per_node=gpn, gpu_mtbf_s=gpu_mtbf_s,
                     node_mtbf_s=node_mtbf_s, job_mtbf_s=job_mtbf_s, interruptions=interruptions,
                     period_s=period_s)
    r = restart_cost(reload_s=float(res_eq.reload_time(c.total_bytes, rbw)), detect_s=detect_s,
                     reschedule_s=reschedule_s, warmup_s=warmup_s, total_s=restart_s)
    # A background write must finish before the next one starts: its time floors the interval.
    opt = interval_optimum(w.blocking_s, f.job_mtbf_s, r.total_s,
                           min_interval_s=w.write_s if async_checkpoint else 0.0)
    train = None
    if (tokens is None) != (tokens_per_s is None):
        raise InputError(named("tokens" if tokens is None else "tokens_per_s"),
                         f"give both {named('tokens')} and {named('tokens_per_s')} for the time "
                         "to train")
    if tokens is not None and tokens_per_s is not None:   # both or neither (checked above)
        train = training_time(tokens, tokens_per_s, c.gpus, opt.goodput_fraction,
                              price_per_gpu_hour)
    strag = None
    if straggler_slowdown is not None:
        strag = straggler(straggler_slowdown, c.gpus, gpus_per_node=gpn,
                          replica_gpus=c.tp * c.pp,
                          run_s=train.with_failures_s if train else None, restart_s=r.total_s)
    return ResiliencePlan(model=model, hardware=hw.name, gpus=c.gpus, gpus_per_node=gpn,
                          nodes=math.ceil(c.gpus / gpn), contents=c, write=w, failures=f,
                          restart=r, optimum=opt,
                          async_write_exceeds_interval=async_checkpoint
                          and w.write_s > opt.daly_interval_s,
                          host_bytes_per_node=min(gpn, c.gpus) * c.busiest_rank_bytes,
                          host_memory_bytes=hw.host.host_memory_bytes, training=train,
                          straggler=strag)
