"""The value checks: each raises InputError naming the value and what is allowed. A check is
given the parameter's name (``gpus``); the naming in force (``planner.errors.name_of``) says how
the person who gave the value calls it and in which unit (``--cost-min``, minutes), and the
message speaks in those."""

from __future__ import annotations

import math
from typing import Protocol

from planner.errors import InputError, Name, name_of, named

# Upper bounds that catch typos (1e30 GPUs) without limiting any real cluster.
MAX_GPUS = 10_000_000           # also every parallel degree, micro-batch and count in a layout
MAX_PARAMS = 1e16
MAX_SEQ_LEN = 10**8
MAX_GLOBAL_BATCH = 10**9        # sequences per optimizer step
MAX_TOKENS_PER_BATCH = 1e13

# What-if hardware and memory reserves: ranges from physics, wide enough for any GPU built or
# announced, narrow enough that no product or ratio of them overflows a float64 (1e300 GiB
# overflowed to inf; 5e-324 Gb/s divided to inf with numpy warnings on stderr).
# GPU memory: 1 MiB (below it no layer of any model fits) to 1 PiB per GPU (the largest HBM
# sold, B300's 288 GB, is 0.03% of it).
GPU_MEMORY_GIB = (2.0 ** -10, 2.0 ** 20)
# NIC bandwidth per GPU: 1 Mbit/s (a tenth of 10BASE-T Ethernet) to 10 Pbit/s (12,500 times
# ConnectX-8's 800 Gb/s, the fastest NIC shipping).
NIC_GBIT = (1e-3, 1e7)
# CUDA/NCCL context and communication buffers per GPU, GB: none to 1 PB (GPU_MEMORY_GIB's top).
RESERVE_GB = (0.0, 1e6)
# Aggregate storage bandwidth, GB/s: 1 MB/s (one spinning disk's tenth) to 10 PB/s (a thousand
# times the fastest parallel file systems, ~10 TB/s).
STORAGE_GBS = (1e-3, 1e7)


def _fmt(x: float) -> str:
    """A bound or value as a person reads it: 10000000, not 1e+07; 1.5e+23 stays short."""
    return f"{int(x)}" if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _shown(name: Name, value: float) -> float:
    """A value in the unit it was given in."""
    return value if name.scale == 1.0 else value / name.scale


def positive(field: str, value: float, *, upper: float = math.inf) -> float:
    """A finite number > 0 (and ≤ upper)."""
    name = name_of(field)
    try:
        v = float(value)
    except OverflowError:  # an int beyond float range: 400 digits
        raise InputError(name.label, f"must be at most {_fmt(_shown(name, upper))}, got a number "
                                     f"of {len(str(abs(value)))} digits") from None
    except (TypeError, ValueError):
        raise InputError(name.label, f"must be a number, got {value!r}") from None
    if math.isnan(v) or math.isinf(v):
        raise InputError(name.label, f"must be a finite number greater than 0, got {value}")
    if v <= 0:
        raise InputError(name.label, f"must be greater than 0, got {_fmt(_shown(name, v))}")
    if v > upper:
        shown = (str(value) if isinstance(value, int) and abs(value) < 10**30 and name.scale == 1
                 else _fmt(_shown(name, v)))
        raise InputError(name.label, f"must be at most {_fmt(_shown(name, upper))}, got {shown}")
    return v


# Durations a user types (ms, minutes, hours), in seconds: one nanosecond is about one GPU
# clock (H100 boost 1.98 GHz: 0.5 ns), shorter than any step, write or failure interval; 10^15 s
# is 32 million years. Within them any ratio or product of two or three durations stays finite
# (1e308/1e-300 ms overflowed to inf and printed 300-digit tables).
MIN_DURATION_S, MAX_DURATION_S = 1e-9, 1e15
MTBF_HOURS = (MIN_DURATION_S / 3600, MAX_DURATION_S / 3600)   # --gpu- / --job-mtbf-hours


def within(field: str, x: float, lower: float | None = None, upper: float | None = None, *,
           fmt: str = "g", got: str | None = None) -> float:
    """x within [lower, upper] (either may be open), or an InputError stating the range in the
    unit the value was given in (its name's scale, and its unit after the range; numbers as
    `fmt`) and what was given (`got`, else x in that unit). The one range check."""
    low = lower is not None and not x >= lower
    if low or (upper is not None and not x <= upper):
        name = name_of(field)

        def show(b: float) -> str:
            return format(_shown(name, b), fmt)
        allowed = (f"between {show(lower)} and {show(upper)}" if lower is not None
                   and upper is not None else f"at least {show(lower)}" if lower is not None
                   else f"at most {show(upper)}" if upper is not None else "")
        raise InputError(name.label, f"must be {allowed}{' ' + name.unit if name.unit else ''}, "
                                     f"got {got if got is not None else show(x)}")
    return x


def duration(field: str, seconds: float) -> float:
    """A duration in seconds within [MIN_DURATION_S, MAX_DURATION_S]; the error states the
    bounds in the unit it was given in (milliseconds for --baseline-ms)."""
    return within(field, positive(field, seconds), MIN_DURATION_S, MAX_DURATION_S)


def non_negative(field: str, value: float) -> float:
    """A finite number ≥ 0."""
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v < 0:
        name = name_of(field)
        shown = value if name.scale == 1.0 else _fmt(_shown(name, v))
        raise InputError(name.label, f"must be a finite number of at least 0, got {shown}")
    return v


def positive_int(field: str, value: float, *, upper: int = MAX_GPUS) -> int:
    """A whole number ≥ 1 (and ≤ upper). Accepts 8.0 but not 8.5."""
    v = positive(field, value, upper=upper)
    if v != int(v):
        raise InputError(named(field), f"must be a whole number, got {_fmt(v)}")
    return int(v)


def choice(field: str, value: str, allowed: tuple[str, ...] | list[str]) -> str:
    """One of the allowed strings."""
    if value not in allowed:
        raise InputError(named(field), f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def zero_stage(field: str, value: int) -> int:
    """A ZeRO stage: 0, 1, 2 or 3."""
    if value not in (0, 1, 2, 3):
        raise InputError(named(field), f"must be 0, 1, 2 or 3, got {value}")
    return value


class _TimeProfile(Protocol):
    @property
    def has_selective(self) -> bool: ...


class Framework(Protocol):
    """What framework_recompute reads of a framework profile (specs.framework)."""

    @property
    def name(self) -> str: ...

    @property
    def time(self) -> _TimeProfile: ...


def framework_recompute(field: str, recompute: str, fw: Framework) -> str:
    """A recompute mode the framework runs: "selective" only where its profile has a selective
    mode (selective_recompute not "none"; DeepSpeed and the FSDP trainers checkpoint whole
    layers), so no layout is priced with a mode the framework lacks."""
    if recompute == "selective" and not fw.time.has_selective:
        raise InputError(named(field), f"selective: framework {fw.name} has no selective "
                                       "recompute (its profile's selective_recompute is none); "
                                       "allowed: none, full")
    return recompute


def recipe(precision: str, optimizer: str) -> None:
    """A precision recipe and an optimizer that engine/memory.py knows."""
    from planner.engine.memory import OPTIMIZER_STATE_BYTES
    precision_recipe("precision", precision)
    choice("optimizer", optimizer, tuple(OPTIMIZER_STATE_BYTES))


def precision_recipe(field: str, precision: str) -> str:
    """A precision recipe that engine/memory.py knows."""
    from planner.engine.memory import PRECISION_RECIPES
    return choice(field, precision, tuple(PRECISION_RECIPES))
