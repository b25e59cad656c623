"""Enumerate every layout for a model and cluster, evaluate them all in one vectorised pass,
rank the ones that pass every rule, and explain the rest.

The space: TP (powers of two and head divisors up to twice the NVLink domain, so a layout that
would cross it is counted as rejected rather than silently missing), PP (divisors of the GPU
count up to the layer count), CP (long sequences only), EP (MoE only), DP = the rest; ZeRO 0-3
(one stage when there is nothing to shard) and hybrid sharding inside a node; every micro-batch
the global batch allows; 1F1B or interleaved with v chunks; recomputation none / selective /
full; sequence parallel whenever TP > 1; offload only when asked.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .candidates import RECOMPUTE_CODES, SCHEDULE_CODES, Candidates, Problem
from .engine.stages import MAX_STAGE_DEFICIT, stage_deficit
from .evaluate import Evaluation, evaluate

OBJECTIVES = ("time", "headroom", "cost", "gpus")
LONG_SEQUENCE = 16384  # context parallel is enumerated from here on


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class SearchSpace:
    """Knobs the user fixed (None = search it)."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    schedule: str | None = None
    chunks: int | None = None
    allow_offload: bool = False
    max_chunks: int = 8


def enumerate_candidates(p: Problem, space: SearchSpace = SearchSpace()) -> Candidates:
    """Every combination of knobs that can differ for this model and GPU count."""
    mod, gpus = p.model, p.gpus
    dom = p.hardware.scale_up.gpus_per_domain
    divs = _divisors(gpus)
    tps = [t for t in divs if t <= 2 * dom and (t & (t - 1) == 0 or mod.heads % t == 0)]
    cps = [1] + ([c for c in (2, 4, 8, 16, 32) if c in divs] if p.seq_len >= LONG_SEQUENCE else [])
    eps = [e for e in _divisors(mod.experts) if e in divs] if mod.is_moe else [1]
    rec_all = [RECOMPUTE_CODES[space.recompute]] if space.recompute else list(RECOMPUTE_CODES.values())
    rows: list[tuple] = []
    for tp, cp in itertools.product(space.tp and [space.tp] or tps, space.cp and [space.cp] or cps):
        if gpus % (tp * cp):
            continue
        rest = gpus // (tp * cp)
        pps = [space.pp] if space.pp else [q for q in _divisors(rest) if q <= mod.layers]
        for pp in pps:
            if rest % pp:
                continue
            dp = rest // pp
            for ep in (space.ep and [space.ep] or eps):
                # ZeRO stages differ only when there is a data-parallel group to shard over.
                zeros = [space.zero] if space.zero is not None else ([0, 1, 2, 3] if dp * cp > 1 else [0])
                if pp > 1 and space.zero is None:
                    zeros = [z for z in zeros if z <= 1]  # ZeRO-2/3 re-gather per micro-batch under PP
                per_replica = p.global_batch // dp if p.global_batch % dp == 0 else 1
                mbs = [space.micro_batch] if space.micro_batch else _divisors(max(per_replica, 1))
                scheds = [(SCHEDULE_CODES["1f1b"], 1)]
                if pp > 1:
                    scheds += [(SCHEDULE_CODES["interleaved"], v) for v in range(2, space.max_chunks + 1)
                               if stage_deficit(mod.layers, pp, v) <= MAX_STAGE_DEFICIT]
                if space.schedule:
                    scheds = [(SCHEDULE_CODES[space.schedule], space.chunks or v) for _, v in scheds
                              if (space.schedule == "interleaved") == (v > 1) or space.schedule == "gpipe"]
                    scheds = list(dict.fromkeys(scheds))
                for z in zeros:
                    shards = [0]
                    inner = dom // (tp * cp) if dom % (tp * cp) == 0 else 0
                    if z >= 1 and 1 < inner < dp * cp and (dp * cp) % inner == 0:
                        shards.append(inner)  # hybrid: shard inside the node, replicate across
                    offs = [(0, 0)]
                    if space.allow_offload and z >= 1:
                        offs.append((1, 0))
                        if z == 3:
                            offs.append((1, 1))
                    n_stage = math.ceil(mod.layers / pp)
                    recs = [(rc, -1) for rc in rec_all]
                    if RECOMPUTE_CODES["full"] in rec_all and space.recompute is None:
                        # full recomputation of only some layers per stage: a quarter, a half
                        recs += [(RECOMPUTE_CODES["full"], k) for k in
                                 sorted({max(1, n_stage // 4), max(1, n_stage // 2)}) if k < n_stage]
                    for shard, (oo, op), mb, (sch, v), (rc, k) in itertools.product(
                            shards, offs, mbs, scheds, recs):
                        rows.append((tp, pp, dp, cp, ep, z, shard, mb, v, int(tp > 1), rc, k, sch,
                                     oo, op))
    a = np.array(rows, dtype=np.int64).reshape(-1, 15)
    names = ("tp", "pp", "dp", "cp", "ep", "zero", "shard", "mb", "chunks", "sp", "recompute",
             "recompute_layers", "schedule", "offload_opt", "offload_par")
    return Candidates(**{n: a[:, i] for i, n in enumerate(names)})


@dataclass
class SearchResult:
    problem: Problem
    candidates: Candidates
    results: Evaluation
    order: np.ndarray          # indices of valid candidates, best first
    first_failure: np.ndarray  # per candidate: index into RULE_NAMES of the first failing rule, -1 if valid


def rank_key(results: Evaluation, gpus: int, objective: str,
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


def search(p: Problem, space: SearchSpace = SearchSpace(), objective: str = "time") -> SearchResult:
    """Evaluate every candidate at once; rank the valid ones; attribute each rejection."""
    cand = enumerate_candidates(p, space)
    res = evaluate(p, cand)
    passes = res.rules.matrix()  # rules × candidates
    first_failure = np.where(passes.all(axis=0), -1, np.argmin(passes, axis=0))
    valid = np.flatnonzero(res.rules.valid)
    key = rank_key(res, p.gpus, objective)[valid]
    # stable tie-break: simpler layouts first (smaller TP, PP, ZeRO, then larger micro-batch)
    tie = np.lexsort((-cand.mb[valid], cand.recompute[valid], cand.zero[valid], cand.pp[valid],
                      cand.tp[valid], np.round(key, 12)))
    return SearchResult(problem=p, candidates=cand, results=res, order=valid[tie],
                        first_failure=first_failure)
