"""Median and robust spread of per-step series, and the warm-up rule."""

from __future__ import annotations

import bisect
from array import array
from typing import Iterator, Sequence

import numpy as np

from planner.evidence.model import Spread

# Step 1 carries NCCL communicator set-up, allocator growth and compilation; a logged entry
# that covers it (Megatron's first log-interval average, Trainer's first bar tick) is not a
# steady-state step. Users with longer warm-ups (torch.compile recompiles) pass --warmup-steps.
WARMUP_STEPS = 1
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution x 1.4826 = its standard deviation


def median(values: np.ndarray, scratch: bool = False) -> float:
    """The middle value, or the mean of the two middle ones (statistics.median's, bit for bit:
    numpy's median is the same (a + b) / 2 of the same sorted neighbours); `scratch`: values
    may be reordered in place (no copy)."""
    return float(np.median(values, overwrite_input=scratch))


def spread(values: Sequence[float] | np.ndarray) -> Spread | None:
    """Median, 100 * 1.4826 * MAD / median, min, max and count; None for an empty series."""
    a = np.asarray(values, dtype=float)
    if not len(a):
        return None
    med = median(a)
    mad = median(np.abs(a - med), scratch=True)
    pct = 100.0 * MAD_TO_SIGMA * mad / med if med else 0.0
    return Spread(median=med, spread_pct=pct, min=float(a.min()), max=float(a.max()), n=len(a))


def steady(points: "Sequence[tuple[int, float]] | Series", warmup_steps: int = WARMUP_STEPS,
           averaged: bool = True) -> tuple[np.ndarray, int]:
    """Values of (step, value) entries (a list, or a Series: its arrays, no tuple per entry)
    whose logged interval lies after `warmup_steps`, and how many were dropped.

    An entry at step n, after one at step p, averages steps p+1..n; the first entry's interval
    is the log interval seen between entries (the least rise between consecutive entries).
    `averaged=False` (a sampled value of one step, as Megatron's CI golden values) makes every
    interval one step. With a single entry nothing is dropped (there is nothing else to
    report). Steps are int64: every reader bounds them (source.integer, at most 1e15)."""
    steps, values = points.arrays() if isinstance(points, Series) else (
        np.array([s for s, _ in points], dtype=np.int64),
        np.array([v for _, v in points], dtype=float))
    if len(values) <= 1:
        return values, 0
    shift = int(steps[0] == 0)  # a 0-based counter (NeMo's global_step): its step 0 is step 1
    if averaged:
        rise = np.diff(steps)
        interval = int(rise.min(where=rise > 0, initial=np.iinfo(np.int64).max)) \
            if (rise > 0).any() else 1
        del rise
        # entry i's interval starts after entry i-1 (the first: one interval back): kept where
        # that start, step[i-1] + 1, is past the warm-up (integers: step[i-1] >= warm-up)
        keep = np.empty(len(steps), dtype=bool)
        keep[0] = int(steps[0]) + shift - interval + 1 > warmup_steps
        np.greater_equal(steps[:-1], warmup_steps - shift, out=keep[1:])
    else:
        keep = steps > warmup_steps - shift
    dropped = len(keep) - int(np.count_nonzero(keep))
    if dropped == len(keep):  # every entry is warm-up: report them rather than nothing
        return values, 0
    # usually the warm-up is the first entries: the rest is a view, not a copy
    return (values[dropped:] if not keep[:dropped].any() else values[keep]), dropped


class _Steps:
    """Strictly rising steps: an arithmetic run (every log interval alike, as frameworks print
    them) kept as its first step, stride and count, no byte a step; an array('q') of 8 bytes a
    step from the first step that breaks the run."""

    def __init__(self) -> None:
        self.first, self.stride, self.n = 0, 0, 0
        self.arr: array | None = None

    def __len__(self) -> int:
        return self.n if self.arr is None else len(self.arr)

    def last(self) -> int:
        return self.first + (self.n - 1) * self.stride if self.arr is None else self.arr[-1]

    def append(self, step: int) -> None:
        """A step above last()."""
        if self.arr is not None:
            self.arr.append(step)
            return
        if self.n == 0:
            self.first = step
        elif self.n == 1:
            self.stride = step - self.first
        elif step - self.last() != self.stride:   # the run ends: its steps written out
            self.arr = array("q", self._run())
            self.arr.append(step)
            return
        self.n += 1

    def extend(self, steps: list[int]) -> None:
        """Strictly rising steps, the first above last()."""
        if self.arr is None and len(self) >= 1 and steps:
            stride = self.stride if self.n >= 2 else steps[0] - self.first
            prev = self.last()
            if all(b - a == stride for a, b in zip([prev] + steps, steps)):
                self.stride, self.n = stride, self.n + len(steps)
                return
        for step in steps:
            self.append(step)

    def _run(self) -> range:
        return range(self.first, self.first + self.n * self.stride, self.stride) \
            if self.n > 1 else range(self.first, self.first + self.n)

    def __contains__(self, step: int) -> bool:
        if self.arr is not None:
            i = bisect.bisect_left(self.arr, step)
            return 0 <= i < len(self.arr) and self.arr[i] == step
        return step in self._run()

    def __iter__(self) -> Iterator[int]:
        return iter(self._run() if self.arr is None else self.arr)

    def numpy(self) -> np.ndarray:
        if self.arr is None:
            return np.arange(self.first, self.first + self.n * max(self.stride, 1),
                             max(self.stride, 1), dtype=np.int64)
        return np.frombuffer(self.arr, dtype=np.int64) if len(self.arr) else \
            np.zeros(0, dtype=np.int64)


class Series:
    """A per-step series keeping the first value of each step (several ranks print the same
    step): the values in an array (8 bytes a step), the steps as _Steps (none while they rise
    by one interval, 8 bytes a step otherwise) -- a dict of step → value held ~90 bytes, a list
    beside a set of seen steps ~150: a log of a million steps is MBs, not hundreds. Steps logged
    in increasing order (every framework's) append; a step below the largest so far is looked
    up (arithmetic, or bisection) and, when new, kept aside, so any order costs O(log n) a
    step."""

    def __init__(self) -> None:
        self._steps, self._values = _Steps(), array("d")
        self._aside: dict[int, float] = {}

    def add(self, step: int, value: float) -> None:
        steps = self._steps
        if (not len(steps) or steps.last() < step) and -2**63 <= step < 2**63:  # the usual: a
            steps.append(step)  # new last step (every step in _aside is below the last or
            self._values.append(value)  # outside the array's range, so one above is new)
        elif step not in self:
            self._aside[step] = value

    def extend(self, steps: list[int], values: list[float]) -> None:
        """add() of each (step, value) in order: appended at once where the steps rise from
        above the last one (and fit the array), one by one otherwise."""
        last = self._steps.last() if len(self._steps) else None
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
        return isinstance(step, int) and step in self._steps

    def __len__(self) -> int:
        return len(self._steps) + len(self._aside)

    def items(self) -> list[tuple[int, float]]:
        """(step, value) sorted by step."""
        out = list(zip(self._steps, self._values))
        return sorted(out + list(self._aside.items())) if self._aside else out

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) sorted by step, as items() without a tuple per entry: the values a
        view of their array where no step was kept aside (the series is read, not added to,
        after this)."""
        steps = self._steps.numpy()
        values = np.frombuffer(self._values, dtype=float) if self._values else np.zeros(0)
        if not self._aside:
            return steps, values
        steps = np.concatenate([steps, np.fromiter(self._aside, dtype=np.int64,
                                                   count=len(self._aside))])
        values = np.concatenate([values, np.fromiter(self._aside.values(), dtype=float,
                                                     count=len(self._aside))])
        order = np.argsort(steps, kind="stable")   # steps are distinct
        return steps[order], values[order]
