"""Median and robust spread of per-step series, and the warm-up rule."""

from __future__ import annotations

import bisect
import statistics
from array import array

from planner.evidence.model import Spread

# Step 1 carries NCCL communicator set-up, allocator growth and compilation; a logged entry
# that covers it (Megatron's first log-interval average, Trainer's first bar tick) is not a
# steady-state step. Users with longer warm-ups (torch.compile recompiles) pass --warmup-steps.
WARMUP_STEPS = 1
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution x 1.4826 = its standard deviation


def spread(values: list[float]) -> Spread | None:
    """Median, 100 * 1.4826 * MAD / median, min, max and count; None for an empty series."""
    if not values:
        return None
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    pct = 100.0 * MAD_TO_SIGMA * mad / med if med else 0.0
    return Spread(median=med, spread_pct=pct, min=min(values), max=max(values), n=len(values))


def steady(points: list[tuple[int, float]], warmup_steps: int = WARMUP_STEPS,
           averaged: bool = True) -> tuple[list[float], int]:
    """Values of (step, value) entries whose logged interval lies after `warmup_steps`.

    An entry at step n, after one at step p, averages steps p+1..n; the first entry's interval
    is the log interval seen between entries. `averaged=False` (a sampled value of one step,
    as Megatron's CI golden values) makes every interval one step. With a single entry nothing
    is dropped (there is nothing else to report)."""
    if len(points) <= 1:
        return [v for _, v in points], 0
    if points[0][0] == 0:  # a 0-based counter (NeMo's global_step): its step 0 is step 1
        points = [(s + 1, v) for s, v in points]
    steps = [s for s, _ in points]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    interval = (min(gaps) if gaps else 1) if averaged else 1
    kept: list[float] = []
    prev = steps[0] - interval
    for s, v in points:
        if (prev + 1 if averaged else s) > warmup_steps:
            kept.append(v)
        prev = s
    if not kept:  # every entry is warm-up: report them rather than nothing
        return [v for _, v in points], 0
    return kept, len(points) - len(kept)


class Series:
    """A per-step series keeping the first value of each step (several ranks print the same
    step) in two arrays, 16 bytes a step (a dict of step → value held ~90, a list beside a set
    of seen steps ~150: a log of a million steps is tens of MB, not hundreds). Steps logged in
    increasing order (every framework's) append; a step below the largest so far is looked up
    by bisection and, when new, kept aside, so any order costs O(log n) a step."""

    def __init__(self) -> None:
        self._steps, self._values = array("q"), array("d")
        self._aside: dict[int, float] = {}

    def add(self, step: int, value: float) -> None:
        steps = self._steps
        if (not steps or steps[-1] < step) and -2**63 <= step < 2**63:  # the usual: a new last
            steps.append(step)  # step (every step in _aside is below the last or outside the
            self._values.append(value)  # array's range, so a step above the last is new)
        elif step not in self:
            self._aside[step] = value

    def extend(self, steps: list[int], values: list[float]) -> None:
        """add() of each (step, value) in order: appended at once where the steps rise from
        above the last one (and fit the array), one by one otherwise."""
        last = self._steps[-1] if self._steps else None
        if steps and (last is None and not self._aside or last is not None and steps[0] > last) \
                and all(a < b for a, b in zip(steps, steps[1:])) and steps[-1] < 2**63 \
                and steps[0] >= -2**63:
            self._steps.extend(steps)
            self._values.extend(values)
            return
        for step, value in zip(steps, values):
            self.add(step, value)

    def __contains__(self, step: object) -> bool:
        if step in self._aside:
            return True
        i = bisect.bisect_left(self._steps, step) if isinstance(step, int) else -1
        return 0 <= i < len(self._steps) and self._steps[i] == step

    def __len__(self) -> int:
        return len(self._steps) + len(self._aside)

    def items(self) -> list[tuple[int, float]]:
        """(step, value) sorted by step."""
        out = list(zip(self._steps, self._values))
        return sorted(out + list(self._aside.items())) if self._aside else out
