"""Training logs as the frameworks print them: Megatron-LM / NeMo / Megatron-DeepSpeed
iteration lines, timers and per-rank memory; torchtitan's metric line; the Hugging Face
Trainer's progress bar and metrics; DeepSpeed's memory and throughput lines.

Every series is (step, value); warm-up entries are dropped by `stats.steady`, the rest give a
median and a spread. Lines a framework prints that match a pattern only partly are errors
naming the line (a corrupted copy is refused, not silently skipped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from planner.evidence.model import Evidence, MemoryStats, StepStats
from planner.errors import InputError
from planner.evidence.log_block import GIB, NUM, read_titan_block
from planner.evidence.source import LineBlocks, fail, integer, number
from planner.evidence.stats import WARMUP_STEPS, Series, median, spread, steady

MIB = 2.0**20
MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
MEG_MEM = re.compile(r"(?:\[Rank (\d+)\]\s*)?\(?after (\d+) iterations\)? memory \(MB\)\s*\|"
                     r"\s*allocated: (\S+) \| max allocated: (\S+) \| reserved: (\S+) \|"
                     r" max reserved: ([0-9.]+)")
MEG_TIMERS = re.compile(r"^\s*time \(ms\)\s*\|(.*)$")
MEG_TFLOPS = re.compile(r"Effective Tera Flops per GPU:\s*(\S+)")
MEG_WORLD = re.compile(r"using world size:\s*(\d+)(?:,\s*data-parallel-size:\s*(\d+),\s*"
                       r"tensor-model-parallel size:\s*(\d+),\s*pipeline-model-parallel "
                       r"size:\s*(\d+))?(?:\s+and model-parallel size:\s*(\d+))?")
ARG_DUMP = re.compile(r"^\s+([a-z_][a-z0-9_]*) \.{2,}\s*(\S.*?)\s*$")
TITAN = re.compile(r"\bstep:\s*(\d+)\s+.*?\b(?:loss|tps|wps):")
# torchtitan before 2024-07 printed tokens per second per GPU as "wps"
TITAN_FIELD = re.compile(r"\b(tps|wps|tflops|mfu|memory):\s*(\S+)")
TITAN_MEM = re.compile(r"(" + NUM + r")GiB\((" + NUM + r")%\)$")
# PTL progress bar (`train_step_timing in s=0.615,`) and NeMo 2 (`train_step_timing in s: 0.6 |`)
NEMO = re.compile(r"train_step_timing in s\s*[=:]\s*([^\s,\]|]+)")
NEMO_STEP = re.compile(r"global_step\s*[=:]\s*([^\s,\]|]+)")
TQDM = re.compile(r"\b(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d+)<")
HF_METRIC = re.compile(r"'train_(runtime|samples_per_second|steps_per_second)': (" + NUM + ")")
DS_MEM = re.compile(r"see_memory_usage\]\s*MA (\S+) GB\s+Max_MA (\S+) GB\s+CA (\S+) GB\s+"
                    r"Max_CA (\S+) GB")
DS_TPUT = re.compile(r"global_step=(\d+).*?CurrSamplesPerSec=(" + NUM + r")(?:.*?"
                     r"MaxMemAllocated=(" + NUM + r")GB)?")
FLOPS_PROF = re.compile(r"^(Profile Summary at step|world size|data parallel size|model parallel "
                        r"size|batch size per GPU|iter latency|samples/second)\s*:?\s+(" + NUM
                        + r")\s*(ms|us|s)?\b")
# DeepSpeed's pipeline engine: `steps: 10 loss: 2.3456 iter time (s): 1.234 samples/sec: 51.9`
DS_PIPE = re.compile(r"\bsteps:\s*(\d+)\s+loss:\s*\S+\s+iter time \(s\):\s*(\S+)\s+"
                     r"samples/sec:\s*(\S+)")
NVSMI_GPU = re.compile(r"^\|\s+(\d+)\s+(\S.*?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:")
FLOPS_HEAD = re.compile(r"-{3,} DeepSpeed Flops Profiler -{3,}")
TITAN_GPU = re.compile(r"CUDA capacity:\s*(.+?) with (" + NUM + r")GiB memory")
LATENCY = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
ARG_KEYS = {"world_size": "world_size", "seq_length": "seq_length",
            "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
            "data_parallel_size": "dp", "expert_model_parallel_size": "ep",
            "micro_batch_size": "micro_batch_size", "global_batch_size": "global_batch_size",
            "num_layers": "num_layers", "hidden_size": "hidden_size"}


@dataclass
class _Found:
    """What the line matchers collected, before warm-up is dropped."""

    formats: list[str] = field(default_factory=list)
    series: dict[str, Series] = field(default_factory=dict)   # the first value of each step
    timers: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    memory: MemoryStats = field(default_factory=MemoryStats)
    config: dict[str, float] = field(default_factory=dict)
    last_step: int = 0
    flops_profiler: bool = False
    gpus: dict[int, str] = field(default_factory=dict)
    tqdm_elapsed: dict[int, float] = field(default_factory=dict)

    def add(self, name: str, step: int, value: float) -> None:
        if name not in self.series:
            self.series[name] = Series()
        self.series[name].add(step, value)

    def add_all(self, name: str, steps: list[int], values: list[float]) -> None:
        """add() of each (step, value) in order."""
        if name not in self.series:
            self.series[name] = Series()
        self.series[name].extend(steps, values)

    def fmt(self, name: str) -> None:
        if name not in self.formats:
            self.formats.append(name)

    def peak(self, alloc: float | None, reserved: float | None, rank: int | None = None) -> None:
        m = self.memory
        if alloc is not None:
            m.peak_allocated_bytes = max(m.peak_allocated_bytes or 0.0, alloc)
            if rank is not None:
                m.per_rank[rank] = max(m.per_rank.get(rank, 0.0), alloc)
        if reserved is not None:
            m.peak_reserved_bytes = max(m.peak_reserved_bytes or 0.0, reserved)


def _fields(body: str) -> dict[str, str]:
    """`key: value | key: value` -> {key: value}; pieces without a colon are skipped."""
    out = {}
    for piece in body.split("|"):
        key, sep, val = piece.rpartition(":")
        if sep and key.strip():
            out[key.strip()] = val.strip()
    return out


def _megatron(f: _Found, s: str, path: Path, ln: int) -> bool:
    if "iteration" in s and (m := MEG_ITER.search(s)) and not (
            "train_step_timing" in s and NEMO.search(s)):  # NeMo 2 says "iteration" too
        f.fmt("megatron-lm")
        step = integer(m[1], path, ln, "iteration")
        f.last_step = step
        for key, val in _fields(m[3]).items():
            if key.startswith("elapsed time per iteration"):
                scale = 1e-3 if "(ms)" in key else 1.0
                f.add("step_time_s", step, number(val, path, ln, key) * scale)
            elif key.startswith("throughput per GPU") or key == "TFLOPs":
                f.add("tflops_per_gpu", step, number(val, path, ln, key))
            elif key.startswith("tokens per gpu per second"):  # Megatron-DeepSpeed "(tgs)"
                f.add("tokens_per_s_per_gpu", step, number(val, path, ln, key))
            elif key == "samples per second":
                f.add("samples_per_s", step, number(val, path, ln, key))
            elif key == "global batch size":
                f.config["global_batch_size"] = number(val, path, ln, key)
        if step not in f.series.get("step_time_s", ()):
            raise fail(path, ln, "Megatron iteration line without 'elapsed time per iteration'")
        return True
    hits = list(MEG_MEM.finditer(s)) if "memory (MB)" in s else ()
    for m in hits:
        f.fmt("megatron-lm")
        rank = integer(m[1], path, ln, "Rank") if m[1] is not None else None
        vals = [number(m[i], path, ln, "memory (MB)") * MIB for i in (3, 4, 5, 6)]
        f.peak(vals[1], vals[3], rank)
    if hits:
        return True
    if "time (ms)" in s and (m := MEG_TIMERS.match(s)):
        if f.last_step == 0:  # set-up timers (model build, data loaders), not a step
            return True
        for key, val in _fields(m[1]).items():
            f.timers.setdefault(key, []).append((f.last_step, number(val, path, ln, key)))
        return True
    if "Effective Tera Flops" in s and (m := MEG_TFLOPS.search(s)):
        f.add("tflops_per_gpu", f.last_step, number(m[1], path, ln, "Effective Tera Flops"))
        return True
    if "using world size:" in s and (m := MEG_WORLD.search(s)):
        f.config["world_size"] = integer(m[1], path, ln, "world size")
        for key, g in (("dp", 2), ("tp", 3), ("pp", 4), ("tp", 5)):
            if m[g]:
                f.config[key] = integer(m[g], path, ln, key)
        return True
    if " .." in s and (m := ARG_DUMP.match(s)):
        arg = ARG_KEYS.get(m[1])
        if arg and re.fullmatch(r"\d+", m[2]):
            f.config.setdefault(arg, integer(m[2], path, ln, m[1]))
        return bool(arg)
    return False


def _torchtitan(f: _Found, s: str, path: Path, ln: int) -> bool:
    if "step:" not in s or not (m := TITAN.search(s)):
        return False
    return _torchtitan_fields(f, integer(m[1], path, ln, "step"), TITAN_FIELD.findall(s), path, ln)


def _torchtitan_fields(f: _Found, step: int, pairs: list[tuple[str, str]], path: Path,
                       ln: int) -> bool:
    f.fmt("torchtitan")
    seen = {}
    for k, token in pairs:
        if k != "memory":
            seen["tps" if k == "wps" else k] = number(token.removesuffix("%"), path, ln, k)
            continue
        if not (mem := TITAN_MEM.match(token)):
            raise fail(path, ln, "torchtitan memory: expected '<GiB>GiB(<percent>%)', got "
                       f"{token!r}")
        seen[k] = number(mem[1], path, ln, k)
        f.peak(None, seen[k] * GIB)
        share = number(mem[2], path, ln, "memory percent") / 100.0
        if share > 0 and f.memory.capacity_bytes is None:  # a stated capacity wins
            f.memory.capacity_bytes = seen[k] * GIB / share
    if "tps" not in seen:
        raise fail(path, ln, "torchtitan step line without 'tps:'")
    f.add("tokens_per_s_per_gpu", step, seen["tps"])
    for k, name in (("tflops", "tflops_per_gpu"), ("mfu", "mfu_pct")):
        if k in seen:
            f.add(name, step, seen[k])
    return True


def _flops_profiler(f: _Found, s: str, path: Path, ln: int) -> bool:
    """DeepSpeed flops-profiler summary: the profiled step's latency and samples/s."""
    if " DeepSpeed Flops Profiler " in s and FLOPS_HEAD.search(s):
        f.flops_profiler = True
        f.fmt("deepspeed-flops-profiler")
        return True
    if not f.flops_profiler or not (m := FLOPS_PROF.match(s.strip())):
        return False
    key, val = m[1], number(m[2], path, ln, m[1])
    if key == "Profile Summary at step":
        f.last_step = int(val)
    elif key == "iter latency":
        f.add("step_time_s", f.last_step, val * LATENCY[m[3] or "s"])
    elif key == "samples/second":
        f.add("samples_per_s", f.last_step, val)
    else:
        f.config[key.replace(" ", "_").replace("size_per_GPU", "size_per_gpu")] = val
    return True


def _others(f: _Found, s: str, path: Path, ln: int) -> bool:
    if _flops_profiler(f, s, path, ln):
        return True
    if s[:1] == "|" and (m := NVSMI_GPU.match(s)):  # nvidia-smi table (names truncated)
        f.gpus.setdefault(integer(m[1], path, ln, "GPU"), m[2])
        return True
    if "CUDA capacity:" in s and (m := TITAN_GPU.search(s)):
        f.gpus.setdefault(0, m[1])
        f.memory.capacity_bytes = number(m[2], path, ln, "CUDA capacity") * GIB
        return True
    if "train_step_timing" in s and (m := NEMO.search(s)):
        f.fmt("nemo")
        st = NEMO_STEP.search(s)
        step = (int(number(st[1], path, ln, "global_step")) if st
                else len(f.series.get("step_time_s", ())) + 1)
        f.add("step_time_s", step, number(m[1], path, ln, "train_step_timing"))
        return True
    if "<" in s and (m := TQDM.search(s)):
        f.fmt("hf-trainer")
        n = integer(m[1], path, ln, "progress")
        elapsed = (integer(m[3] or "0", path, ln, "elapsed hours") * 3600
                   + integer(m[4], path, ln, "elapsed minutes") * 60
                   + integer(m[5], path, ln, "elapsed seconds"))
        f.tqdm_elapsed.setdefault(n, float(elapsed))
        return True
    if "'train_" in s and (hits := HF_METRIC.findall(s)):
        f.fmt("hf-trainer")
        for k, v in hits:
            f.config[f"train_{k}"] = number(v, path, ln, f"train_{k}")
        return True
    if "see_memory_usage]" in s and (m := DS_MEM.search(s)):
        f.fmt("deepspeed")
        vals = [number(m[i], path, ln, "see_memory_usage") * GIB for i in (1, 2, 3, 4)]
        f.peak(vals[1], vals[3])
        return True
    if "iter time (s):" in s and (m := DS_PIPE.search(s)):
        f.fmt("deepspeed")
        step = integer(m[1], path, ln, "steps")
        f.add("step_time_s", step, number(m[2], path, ln, "iter time (s)"))
        f.add("samples_per_s", step, number(m[3], path, ln, "samples/sec"))
        return True
    if "CurrSamplesPerSec=" in s and (m := DS_TPUT.search(s)):
        f.fmt("deepspeed")
        step = integer(m[1], path, ln, "global_step")
        f.add("samples_per_s", step, number(m[2], path, ln, "CurrSamplesPerSec"))
        if m[3]:
            f.peak(number(m[3], path, ln, "MaxMemAllocated") * GIB, None)
        return True
    return False


def looks_like(lines: list[tuple[int, str]]) -> bool:
    """True when any line is one of the training-log lines this module reads."""
    f = _Found()
    for ln, s in lines[:20000]:
        try:
            if _megatron(f, s, Path("-"), ln) or _torchtitan(f, s, Path("-"), ln) \
                    or _others(f, s, Path("-"), ln):
                if f.formats:
                    return True
        except Exception:  # a broken line of a log is still a log: the reader will say where
            return True
    return False


def read_training(path: Path, data: bytes | None = None,
                  warmup_steps: int = WARMUP_STEPS) -> Evidence:
    """Parse a training log (`data`, or None: streamed from the file, a block of lines at a
    time) into an Evidence of kind "training-log". A line that does not parse is an error,
    unless it is the last non-blank one and the content does not end with a newline (a job
    killed mid-write): known only at the end, so the first such line is kept back until a
    non-blank line follows (an error) or the content ends."""
    f = _Found()
    cut, pending = None, None
    blocks = LineBlocks(path, data)
    for first, lines in blocks:
        if not any(lines):
            continue  # empty lines only: no matcher reads one (a log of 10^8 newlines)
        if pending is None and not f.flops_profiler and read_titan_block(f, lines):
            continue  # usual torchtitan step lines only: the block at once, as line by line
        for ln, s in enumerate(lines, first):
            if pending is not None and s.strip():
                raise pending  # the broken line was not the last: not a job killed mid-write
            if not s:
                continue
            try:
                _megatron(f, s, path, ln) or _torchtitan(f, s, path, ln) \
                    or _others(f, s, path, ln)
            except InputError as e:
                cut, pending = ln, e
    if pending is not None and blocks.newline_end:  # only the last line of a job killed
        raise pending                                # mid-write is forgiven
    if not f.formats or not (f.series or f.tqdm_elapsed or f.memory.peak_allocated_bytes
                             or f.memory.peak_reserved_bytes):
        raise fail(path, 1, "no training-log lines (Megatron iteration, torchtitan step, "
                   "Trainer progress, DeepSpeed memory) found")
    if f.tqdm_elapsed:
        _tqdm_steps(f)
    ev = _evidence(path, f, warmup_steps)
    if cut is not None:
        ev.notes.append(f"line {cut} (the last, without a newline) is cut short: ignored")
    return ev


def _tqdm_steps(f: _Found) -> None:
    """Trainer's bar prints elapsed wall time after each step n: step n took the difference."""
    prev_n, prev_t = 0, 0.0
    for n in sorted(f.tqdm_elapsed):
        t = f.tqdm_elapsed[n]
        if n == prev_n + 1 and n > 0:
            f.add("step_time_s", n, t - prev_t)
        prev_n, prev_t = n, t


def _evidence(path: Path, f: _Found, warmup_steps: int) -> Evidence:
    st = StepStats(steps_read=max((len(v) for v in f.series.values()), default=0),
                   warmup_dropped=0)
    for name in ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct",
                 "samples_per_s"):
        pts = f.series.get(name)
        if pts:
            kept, dropped = steady(pts, warmup_steps)
            setattr(st, name, spread(kept))
            st.warmup_dropped = max(st.warmup_dropped, dropped)
    for key, timed in f.timers.items():
        kept, _ = steady(timed, warmup_steps)
        st.timers_ms[key] = median(kept)
    cfg = f.config
    world = cfg.get("world_size")
    if st.samples_per_s is None and "train_samples_per_second" in cfg:
        st.samples_per_s = spread([cfg["train_samples_per_second"]])
        st.derived.append("samples/s: the Trainer's train_samples_per_second (whole run)")
    if st.tokens_per_s_per_gpu is None and st.step_time_s and world and \
            "global_batch_size" in cfg and "seq_length" in cfg:
        tok = cfg["global_batch_size"] * cfg["seq_length"] / st.step_time_s.median / world
        st.tokens_per_s_per_gpu = spread([tok])
        st.derived.append("tokens/s/GPU = global batch x seq length / median step time / "
                          "world size")
    mem = f.memory if (f.memory.peak_allocated_bytes or f.memory.peak_reserved_bytes) else None
    ev = Evidence(path=str(path), kind="training-log", format="+".join(f.formats),
                  ranks=int(world) if world else None, config=dict(cfg), steps=st, memory=mem,
                  gpu=f.gpus[min(f.gpus)] if f.gpus else None)
    if f.gpus:
        ev.config["gpus_per_node"] = len(f.gpus)
    if st.warmup_dropped:
        ev.notes.append(f"dropped {st.warmup_dropped} warm-up entr"
                        f"{'y' if st.warmup_dropped == 1 else 'ies'} (covering step ≤ "
                        f"{warmup_steps})")
    return ev
