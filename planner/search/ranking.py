"""The ranking of the layouts a search keeps (planner.search.fast): each objective's key, the
error bands that bucket near-equal step times, the headroom rule's flag, and the order shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import Evaluation

__all__ = ["RankedRows", "candidate_bands", "ordered", "rank_key", "short_of_headroom"]


# The Evaluation fields rank_key and ordered read.
_Time = NamedTuple("_Time", [("step", np.ndarray)])
_Throughput = NamedTuple("_Throughput", [("tokens_per_step", np.ndarray)])
_Memory = NamedTuple("_Memory", [("headroom", np.ndarray), ("peak", np.ndarray)])


@dataclass(frozen=True)
class RankedRows:
    """Row subset of an Evaluation for rank_key / ordered (time, tokens per step, headroom,
    peak), without gathering its other arrays."""

    time: _Time
    throughput: _Throughput
    memory: _Memory

    @classmethod
    def of(cls, ev: Evaluation, idx: np.ndarray) -> RankedRows:
        """The rows idx of ev."""
        return cls(_Time(ev.time.step[idx]), _Throughput(ev.throughput.tokens_per_step[idx]),
                   _Memory(ev.memory.headroom[idx], ev.memory.peak[idx]))

    def __len__(self) -> int:
        return len(self.time.step)


# What rank_key and ordered read: an Evaluation or some of its rows.
Ranked: TypeAlias = Evaluation | RankedRows


def rank_key(results: Ranked, gpus: int, objective: str,
             gpu_hour_cost: float = 1.0) -> np.ndarray:
    """Smaller is better. time → step time per token; headroom → −headroom; cost → GPU-seconds
    per token; gpus → GPU count then step time."""
    per_token = results.time.step / results.throughput.tokens_per_step
    n = np.full(len(results), float(gpus))
    if objective == "headroom":
        return -results.memory.headroom
    if objective == "cost":
        return per_token * n * gpu_hour_cost
    if objective == "gpus":
        return n * 1e6 + per_token
    return per_token


def candidate_bands(p: Problem, cand: Candidates) -> np.ndarray:
    """Each candidate's ranking tolerance (per cent, 0 where none; error_band.ranking_band): the
    profile's error_bands for framework / layout family (data, tensor = TP > 1, pipeline = PP > 1)."""
    bands, fw = p.hardware.efficiency.error_bands, p.fw.name
    data, tensor, pipe = (bands.get(f"{fw}/{f}", 0.0) for f in ("data", "tensor", "pipeline"))
    return np.where(cand.pp > 1, pipe, np.where(cand.tp > 1, tensor, data)).astype(float)


def short_of_headroom(p: Problem, headroom: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """Rows that leave less than the budget's headroom rule (MemoryBudget.required_headroom):
    within the memory model's own error of an OOM, shown flagged and ranked after the rest."""
    return headroom < p.budget.required_headroom(peak)


def ordered(p: Problem, ev: Ranked, c: Candidates, objective: str) -> np.ndarray:
    """Best first: the rows that meet the headroom rule, then those short of it (flagged),
    each group ranked alike. Within a group: by the objective's key; for time and cost, where
    the group's fastest row (of equally fast ones the leanest, then the first) has an error
    band, that row stays first and the rest are bucketed in steps of (1 + band) from it, more
    headroom first within a bucket (the model cannot order them). Ties: more headroom, then
    the simpler layout (smaller TP, PP, ZeRO, no recompute, larger micro-batch). So #1 is the
    fastest row meeting the rule, and a narrower space never has a faster #1."""
    key = rank_key(ev, p.gpus, objective)
    short = short_of_headroom(p, ev.memory.headroom, ev.memory.peak)
    bucket, timed = np.zeros(len(key)), np.round(key, 12)
    bands = candidate_bands(p, c) / 100.0
    for group in (np.flatnonzero(~short), np.flatnonzero(short)):
        if not len(group) or objective not in ("time", "cost"):
            continue
        first = int(group[np.lexsort((ev.memory.peak[group], key[group]))[0]])
        band = float(bands[first])
        if band > 0:
            bucket[group] = np.floor(np.log(key[group] / key[first]) / np.log1p(band) + 1e-9)
            bucket[first], timed[group] = -1.0, 0.0
    return np.lexsort((-c.mb, c.recompute, c.zero, c.pp, c.tp, -ev.memory.headroom, timed,
                       bucket, short))
