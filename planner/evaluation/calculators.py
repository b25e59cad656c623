"""The quick calculators behind `dtplan memory` (model states), `comm`, `bubble`, `batch`,
`checkpoint` and `scaling`: validated inputs in, records out, arithmetic from engine/."""

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Optional

from planner.io import validate as v
from planner.engine import batch as batch_eq
from planner.engine import checkpoint as ckpt_eq
from planner.engine import comm as comm_eq
from planner.engine import memory as mem_eq
from planner.engine import pipeline as pipe_eq
from planner.engine import scaling as scale_eq
from planner.engine.schedules import SCHEDULES, SPLIT_BACKWARD
from planner.errors import InputError, name_of, named
from planner.resilience.planning import IntervalOptimum, interval_optimum
from planner.specs.budget import MemoryBudget
from planner.specs.hardware import HardwareProfile


@dataclass(frozen=True, kw_only=True)
class ZeroRow:
    zero_stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    total_bytes: float
    fits: bool


@dataclass(frozen=True, kw_only=True)
class StateMemoryResult:
    params: float
    shard_degree: int
    precision: str
    optimizer: str
    bytes_per_param: float
    k_bytes_per_param: float
    gpu_memory_bytes: float
    margin_fraction: float
    usable_bytes: float
    rows: list[ZeroRow]


# The library's default GPU for the quick model-state calculator: the default profile's (h100)
# HBM, 80 GiB = 85.9e9 bytes (the "80 GB" of the A100-80G and H100 datasheets is binary). The CLI
# passes the resolved profile's capacity, so both say the same.
DEFAULT_GPU_MEMORY_BYTES = 80 * 2.0 ** 30
# The same safety margin every other memory verdict holds back (MemoryBudget.margin_fraction).
DEFAULT_MARGIN_FRACTION = MemoryBudget().margin_fraction


def state_memory(params: float, shard_degree: int, *, precision: str = "mixed",
                 optimizer: str = "adam",
                 gpu_memory_bytes: float = DEFAULT_GPU_MEMORY_BYTES,
                 margin_fraction: float = DEFAULT_MARGIN_FRACTION) -> StateMemoryResult:
    """Per-GPU model-state bytes for ZeRO 0–3 over `shard_degree` data-parallel ranks; a stage
    fits when its states are within capacity × (1 − margin), the usable bytes every verdict uses."""
    params = v.positive("params", params, upper=v.MAX_PARAMS)
    if not 0.0 <= margin_fraction < 1.0:
        raise InputError(named("margin_fraction"), f"must be a fraction from 0 to below 1, got "
                                                   f"{margin_fraction:g}")
    usable = gpu_memory_bytes * (1.0 - margin_fraction)
    n = v.positive_int("shard_degree", shard_degree)
    v.recipe(precision, optimizer)
    w, g, k = mem_eq.optimizer_bytes_per_param(precision, optimizer)
    rows = []
    for z in range(4):
        weights, grads, states = (float(x) for x in mem_eq.state_split_bytes(params, z, n, w, g, k))
        total = float(mem_eq.model_state_bytes(params, z, n, w, g, k))
        rows.append(ZeroRow(zero_stage=z, weights_bytes=weights, gradients_bytes=grads,
                            optimizer_bytes=states, total_bytes=total, fits=total <= usable))
    return StateMemoryResult(params=params, shard_degree=n, precision=precision,
                             optimizer=optimizer, bytes_per_param=w + g + k, k_bytes_per_param=k,
                             gpu_memory_bytes=gpu_memory_bytes, margin_fraction=margin_fraction,
                             usable_bytes=usable, rows=rows)


@dataclass(frozen=True, kw_only=True)
class CommRow:
    gpus: int
    collective: str
    bytes_per_gpu: float
    time_s: float
    link: str = "given"
    message_bytes: float = 0.0
    algorithm: str = "ring"
    busbw_bytes_per_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class CommResult:
    message_bytes: float
    bandwidth_bytes_per_s: Optional[float] = None
    latency_s: float
    hardware: Optional[str] = None
    rows: list[CommRow]


# The range of a link's bandwidth and a message, chosen so steps × α + bytes ÷ bandwidth stays
# finite and readable: 1 kB/s is below any serial line (9600 baud is 1.2 kB/s), 1 PB/s over
# 500× NVLink 5's 1.8 TB/s per GPU; 1 PB is more than any model's gradients. (A bandwidth of
# 5e-324 GB/s overflowed the division to inf with a numpy warning.)
LINK_BYTES_PER_S = (1e3, 1e15)
MAX_MESSAGE_BYTES = 1e15


def comm(message_bytes: float | list[float], gpus: Sequence[float],
         bandwidth_bytes_per_s: Optional[float] = None, latency_s: float = 0.0,
         hardware: HardwareProfile | None = None,
         collectives: tuple[str, ...] = ("all-reduce", "all-gather", "reduce-scatter",
                                         "all-to-all"),
         gpus_per_node: Optional[int] = None) -> CommResult:
    """Ring collective volume and α–β time for each message size and GPU count over one given
    link bandwidth, or on a hardware profile's topology as NCCL runs it (ring / tree /
    NVLS-Tree per collective, engine/nccl.py) with the link each group crosses. busbw is
    nccl-tests' (factor × message / time), to set beside a measured table."""
    from planner.engine import nccl
    from planner.engine import topology as topo
    sizes = message_bytes if isinstance(message_bytes, list) else [message_bytes]
    sizes = [v.within("message_bytes", v.positive("message_bytes", m), 0.0, MAX_MESSAGE_BYTES)
             for m in sizes]
    lat = v.within("latency_s", v.non_negative("latency_s", latency_s), 0.0, v.MAX_DURATION_S)
    if (bandwidth_bytes_per_s is None) == (hardware is None):
        bw_name = name_of("bandwidth_bytes_per_s")
        raise InputError(bw_name.label, f"give a link {bw_name.label} ({bw_name.unit or 'bytes/s'})"
                                        f" or a {named('hardware')} profile")
    bw = v.within("bandwidth_bytes_per_s", v.positive("bandwidth_bytes_per_s",
                                                      bandwidth_bytes_per_s),
                  *LINK_BYTES_PER_S) \
        if bandwidth_bytes_per_s is not None else None  # given exactly when hardware is not
    rows = []
    for m in sizes:
        for n in gpus:
            n = v.positive_int("gpus", n)
            for kind in collectives:
                algo = "ring"
                if bw is not None:
                    t, link = comm_eq.collective_time(kind, m, n, bw, lat), "given"
                elif hardware is not None:
                    node = gpus_per_node or hardware.scale_up.gpus_per_domain
                    per_domain = min(n, node, hardware.scale_up.gpus_per_domain)
                    fab = topo.fabric(hardware, n)
                    if kind == "all-to-all":   # NCCL runs it as grouped point-to-point sends
                        t, algo = topo.all_to_all_time(m, n, per_domain, fab), "p2p"
                    else:
                        t, code = topo.nccl_time(kind, m, n, per_domain, fab)
                        algo = nccl.ALGO_NAMES[int(code)]
                    link = topo.LINK_NAMES[int(topo.link_kind(n, per_domain))] if n > 1 else "none"
                t = float(t)
                rows.append(CommRow(gpus=n, collective=kind, message_bytes=m, time_s=t, link=link,
                                    bytes_per_gpu=float(comm_eq.bytes_per_gpu(kind, m, n)),
                                    algorithm=algo,
                                    busbw_bytes_per_s=float(nccl.busbw_of(kind, m, n, t)) if t > 0
                                    else 0.0))
    return CommResult(message_bytes=sizes[0], bandwidth_bytes_per_s=bw, latency_s=lat,
                      hardware=hardware.name if hardware is not None else None, rows=rows)


@dataclass(frozen=True, kw_only=True)
class BubbleRow:
    micro_batches: int
    bubble_fraction: float
    efficiency: float
    overhead_vs_ideal: float


@dataclass(frozen=True, kw_only=True)
class BubbleResult:
    stages: int
    schedule: str
    chunks: int
    rows: list[BubbleRow]




def bubble(stages: int, micro_batches: Sequence[float], schedule: str = "1f1b",
           chunks: int = 1) -> BubbleResult:
    """Pipeline bubble (p−1)/(v·m + p−1) for each micro-batch count; ZB-H1, DualPipe and
    DualPipeV s/(m + s) with s their idle slots, (p−1)/3, (p−2)/3, (p−1)/3 (engine.pipeline.
    bubble_slots)."""
    p = v.positive_int("stages", stages)
    v.choice("schedule", schedule, SCHEDULES)
    c = v.positive_int("chunks", chunks)
    if schedule != "interleaved" and c != 1:
        raise InputError(named("chunks"), f"is only meaningful with {named('schedule')} interleaved")
    if schedule == "interleaved" and c < 2:
        raise InputError(named("chunks"), f"must be at least 2 with {named('schedule')} interleaved")
    if schedule == "dualpipe" and p % 2:   # DualPipe.step asserts an even rank count
        raise InputError(named("stages"), f"must be even with {named('schedule')} dualpipe "
                         f"(half the ranks per direction), got {p}")
    rows = []
    for m in micro_batches:
        m = v.positive_int("micro_batches", m)
        if schedule in SPLIT_BACKWARD:   # share = s/(m + s) with s the schedule's idle slots
            slots = float(pipe_eq.bubble_slots(p, schedule=schedule))
            f, over = slots / (m + slots), slots / m
        else:
            f = float(pipe_eq.bubble_fraction(p, m, c))
            over = float(pipe_eq.bubble_overhead(p, m, c))
        rows.append(BubbleRow(micro_batches=m, bubble_fraction=f, efficiency=1.0 - f,
                              overhead_vs_ideal=over))
    return BubbleResult(stages=p, schedule=schedule, chunks=c, rows=rows)


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    micro_batch: int
    accumulation: int
    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    global_batch: int
    gpus: int
    seq_len: int | None = None
    tokens_per_step: int | None = None
    solved_for: str | None = None

    @property
    def model_parallel(self) -> int:
        """TP × PP × CP: the GPUs of one model replica (they share samples, not the batch)."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel


def batch(micro_batch: int, data_parallel: int, *, accumulation: int | None = None,
          global_batch: int | None = None, tp: int = 1, pp: int = 1, cp: int = 1,
          seq_len: int | None = None) -> BatchResult:
    """B_global = b × a × N_dp, or a solved from B_global; TP, PP, CP do not enter."""
    b = v.positive_int("micro_batch", micro_batch)
    dp = v.positive_int("data_parallel", data_parallel)
    tp, pp, cp = (v.positive_int(f, x) for f, x in (("tp", tp), ("pp", pp), ("cp", cp)))
    solved = None
    if global_batch is not None and accumulation is None:
        gb_ = v.positive_int("global_batch", global_batch)
        if not batch_eq.batch_divides(gb_, b, dp):
            per = b * dp
            raise InputError(named("global_batch"),
                             f"{gb_} is not a multiple of micro-batch × DP = {b} × {dp} = {per}; "
                             f"nearest valid: {max(per, gb_ // per * per)} or {(gb_ // per + 1) * per}")
        acc = int(batch_eq.accumulation_steps(gb_, b, dp))
        solved = "accumulation"
    elif accumulation is not None and global_batch is None:
        acc = v.positive_int("accumulation", accumulation)
    else:
        raise InputError(named("accumulation"), f"give exactly one of {named('accumulation')} or "
                                                f"{named('global_batch')}")
    g = int(batch_eq.global_batch(b, acc, dp))
    s = v.positive_int("seq_len", seq_len) if seq_len is not None else None
    return BatchResult(micro_batch=b, accumulation=acc, data_parallel=dp, tensor_parallel=tp,
                       pipeline_parallel=pp, context_parallel=cp, global_batch=g,
                       gpus=dp * tp * pp * cp, seq_len=s,
                       tokens_per_step=g * s if s else None, solved_for=solved)


@dataclass(frozen=True, kw_only=True)
class CheckpointRow:
    interval_s: float
    overhead_fraction: float
    lost_work_fraction: float
    restart_fraction: float
    waste_fraction: float


@dataclass(frozen=True, kw_only=True)
class CheckpointResult:
    rows: list[CheckpointRow]
    optimum: IntervalOptimum


def checkpoint(cost_s: float, mtbf_s: float, intervals_s: list[float],
               restart_s: float = 0.0) -> CheckpointResult:
    """Waste δ/τ + τ/(2M) + R/M per interval, with Young's and Daly's optima."""
    opt = interval_optimum(cost_s, mtbf_s, restart_s)
    d, m, r = opt.cost_s, opt.mtbf_s, opt.restart_s
    rows = []
    for t in intervals_s:
        t = v.duration("intervals_s", t)
        rows.append(CheckpointRow(
            interval_s=t, overhead_fraction=float(ckpt_eq.overhead_fraction(t, d)),
            lost_work_fraction=float(ckpt_eq.lost_work_fraction(t, m)),
            restart_fraction=float(ckpt_eq.restart_fraction(r, m)),
            waste_fraction=float(ckpt_eq.waste_fraction(t, d, m, r))))
    return CheckpointResult(rows=rows, optimum=opt)


@dataclass(frozen=True, kw_only=True)
class ScalingResult:
    mode: str
    gpus: int
    baseline_s: float
    measured_s: float
    ideal_s: float
    speedup: float
    efficiency: float


def scaling(baseline_s: float, measured_s: float, gpus: int, mode: str = "strong") -> ScalingResult:
    """Strong: speedup T1/Tn and efficiency T1/(n·Tn); weak: efficiency T1/Tn."""
    t1 = v.duration("baseline_s", baseline_s)
    tn = v.duration("measured_s", measured_s)
    n = v.positive_int("gpus", gpus)
    v.choice("mode", mode, ("strong", "weak"))
    if mode == "strong":
        return ScalingResult(mode=mode, gpus=n, baseline_s=t1, measured_s=tn,
                             ideal_s=float(scale_eq.ideal_time(t1, n)),
                             speedup=float(scale_eq.strong_speedup(t1, tn)),
                             efficiency=float(scale_eq.strong_efficiency(t1, tn, n)))
    weak = float(scale_eq.weak_efficiency(t1, tn))
    return ScalingResult(mode=mode, gpus=n, baseline_s=t1, measured_s=tn, ideal_s=t1,
                         speedup=n * weak, efficiency=weak)
