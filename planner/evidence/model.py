"""What a reader found in one file: a typed summary, not the file's content.

Plain dataclasses (the engine and the fit take floats from them); `to_dict` gives the JSON the
CLI prints, SI units with the unit in each key name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("nccl-tests", "training-log", "profiler-trace", "memory")


@dataclass
class NcclRow:
    """One nccl-tests row: message size, and out-of-place / in-place time and bandwidths."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    inplace_time_us: float | None = None
    inplace_algbw_gbps: float | None = None
    inplace_busbw_gbps: float | None = None


@dataclass
class NcclTable:
    """An nccl-tests run: which collective, its rows, and the summary line when present."""

    collective: str | None
    rows: list[NcclRow]
    avg_busbw_gbps: float | None = None
    dtype: str | None = None

    @property
    def largest(self) -> NcclRow:
        """The row of the largest message (the last such row when a size repeats); by position,
        not rows.index(row), which compared every row with every other (20,000 rows: 117 s)."""
        rows = self.rows
        return rows[max(range(len(rows)), key=lambda i: (rows[i].size_bytes, i))]

    @property
    def peak_busbw_gbps(self) -> float:
        return max(max(r.busbw_gbps, r.inplace_busbw_gbps or 0.0) for r in self.rows)


@dataclass
class Spread:
    """Median and robust spread of a per-step series after warm-up is dropped.
    spread_pct = 100 * 1.4826 * MAD / median (the MAD scaled to a normal sigma)."""

    median: float
    spread_pct: float
    min: float
    max: float
    n: int


@dataclass
class StepStats:
    """Per-step figures of a training log or trace (what the log prints, nothing inferred
    beyond the arithmetic stated in `derived`)."""

    steps_read: int
    warmup_dropped: int
    step_time_s: Spread | None = None
    tokens_per_s_per_gpu: Spread | None = None
    tflops_per_gpu: Spread | None = None
    mfu_pct: Spread | None = None
    samples_per_s: Spread | None = None
    timers_ms: dict[str, float] = field(default_factory=dict)
    derived: list[str] = field(default_factory=list)


@dataclass
class MemoryStats:
    """Peak device memory as the artifact states it (bytes). `per_rank` maps rank -> peak
    allocated bytes where the file gives one line per rank."""

    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    allocated_bytes: float | None = None
    reserved_bytes: float | None = None
    capacity_bytes: float | None = None
    per_rank: dict[int, float] = field(default_factory=dict)
    by_category_bytes: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def fragmentation(self) -> float | None:
        """(reserved - allocated) / reserved at the peak: the allocator's cached-but-unused share."""
        if not self.peak_reserved_bytes or self.peak_allocated_bytes is None:
            return None
        return max(0.0, 1.0 - self.peak_allocated_bytes / self.peak_reserved_bytes)


@dataclass
class TraceSummary:
    """GPU time of profiled steps by category. `exclusive_ms` partitions each step (compute
    first, then communication not hidden by compute, then copies, then idle), so its values
    sum to the step time; `overlapped_ms` is communication that ran under compute."""

    steps: list[str]
    step_ms: list[float]
    exclusive_ms: dict[str, float]
    overlapped_ms: dict[str, float]
    busy_ms: dict[str, float]
    device: int = 0
    window: str = "cpu ProfilerStep"
    idle_at_start_ms: float = 0.0   # GPU idle from the step's start to its first kernel

    @property
    def mean_step_ms(self) -> float:
        """The mean step, the sum of the exclusive categories (they partition the step)."""
        return sum(self.exclusive_ms.values())

    def percent_of_step(self, ms: float) -> float:
        """A category's exclusive time in per cent of the mean step."""
        return 100 * ms / self.mean_step_ms


@dataclass
class Evidence:
    """One file's summary: its kind and format, the cluster it states, and its figures."""

    path: str
    kind: str
    format: str
    ranks: int | None = None
    nodes: int | None = None
    gpu: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    nccl: NcclTable | None = None
    steps: StepStats | None = None
    memory: MemoryStats | None = None
    trace: TraceSummary | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.nccl is not None:
            d["nccl"]["largest_size_bytes"] = self.nccl.largest.size_bytes
            d["nccl"]["busbw_at_largest_gbps"] = self.nccl.largest.busbw_gbps
            d["nccl"]["peak_busbw_gbps"] = self.nccl.peak_busbw_gbps
        if self.memory is not None:
            d["memory"]["fragmentation"] = self.memory.fragmentation
            d["memory"]["per_rank"] = {str(k): v for k, v in self.memory.per_rank.items()}
        return {k: v for k, v in d.items() if v not in (None, {}, [])}
