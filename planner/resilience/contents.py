"""What one checkpoint holds, in total and on the busiest writing rank (model states by the
precision/optimizer recipe of engine.memory, ZeRO and EP sharding, the small job-wide items of
engine.resilience)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from planner.io import validate as v
from planner.engine import memory as mem_eq
from planner.engine import resilience as res_eq
from planner.errors import InputError, named


@dataclass(frozen=True, kw_only=True)
class CheckpointItem:
    name: str
    rule: str                  # how the size is reckoned, briefly
    basis: str = ""            # why that size (small items)
    total_bytes: float
    per_rank_bytes: float      # what one writing rank writes
    writers: int               # ranks that write this item
    sharded: bool


@dataclass(frozen=True, kw_only=True)
class CheckpointContents:
    params: float
    precision: str
    optimizer: str
    gpus: int
    tp: int
    pp: int
    dp: int
    zero_stage: int
    shard_degree: int
    bytes_per_param: float     # model states only (the small items are not per parameter)
    items: list[CheckpointItem]
    total_bytes: float
    busiest_rank_bytes: float  # rank 0: its shards plus every job-wide item
    effective_writers: float   # total ÷ busiest rank: the writing GPUs when the load is even


def checkpoint_contents(params: float, gpus: int, *, tp: int = 1, pp: int = 1,
                        zero_stage: int = 3, precision: str = "mixed", optimizer: str = "adam",
                        shard_degree: Optional[int] = None, ep: int = 1,
                        expert_params: float = 0.0) -> CheckpointContents:
    """What one checkpoint holds, in total and per writing rank.

    Gradients are not saved (the next step recomputes them). Weights, fp32 master and optimizer
    moments follow the precision/optimizer recipe (``engine.memory``); ZeRO shards the master
    and moments from stage 1 and the weights from stage 3, over ``shard_degree`` ranks
    (default: all of DP). A replicated state is written by one DP replica only.
    With expert parallelism the routed experts' share (`expert_params`) is split over EP
    ranks (Megatron-LM's expert-model-parallel group): a replicated state holds 1/EP of it
    per rank, a sharded one is split over EP × the expert-data-parallel group (DP/EP, capped
    by the shard group), so the busiest rank holds dense/(TP·PP·S) + experts/(TP·PP·EP·S_e).
    """
    params = v.positive("params", params, upper=v.MAX_PARAMS)
    n = v.positive_int("gpus", gpus)
    tp, pp = v.positive_int("tp", tp), v.positive_int("pp", pp)
    v.zero_stage("zero_stage", zero_stage)
    v.recipe(precision, optimizer)
    if n % (tp * pp):
        raise InputError(named("gpus"), f"{n} is not a multiple of TP × PP = {tp} × {pp} = "
                                        f"{tp * pp}")
    dp = n // (tp * pp)
    shards = dp if shard_degree is None else v.positive_int("shard_degree", shard_degree)
    if dp % shards:
        raise InputError(named("shard_degree"), f"must divide DP = {dp}, got {shards}")

    w, _, k = mem_eq.optimizer_bytes_per_param(precision, optimizer)
    master = mem_eq.PRECISION_RECIPES[precision][2]
    sharded_from = mem_eq.SHARDED_FROM_STAGE
    big = [(f"weights ({w * 8:g}-bit)", w, zero_stage >= sharded_from["weights"]),
           ("fp32 master weights", master, zero_stage >= sharded_from["optimizer"]),
           (f"optimizer moments ({optimizer})", k - master,
            zero_stage >= sharded_from["optimizer"])]
    items = []
    for name, per_param, sharded in big:
        if per_param == 0:
            continue  # e.g. no master copy in fp32 or bf16-pure training
        s = shards if sharded else 1
        total = params * per_param
        experts = min(max(expert_params, 0.0), params) * per_param if ep > 1 else 0.0
        s_e = ep * max(1, min(s, dp // ep)) if sharded else ep   # ranks one expert byte spreads over
        per_rank = (res_eq.shard_bytes(total - experts, tp, pp, s)
                    + res_eq.shard_bytes(experts, tp, pp, s_e))
        items.append(CheckpointItem(
            name=name, total_bytes=total, sharded=sharded,
            rule=f"{per_param:g} B/param, " + ("sharded" if sharded else "one DP replica")
            + (f", experts over EP {ep}" if experts else ""),
            per_rank_bytes=float(per_rank),
            writers=int(res_eq.writing_ranks(tp, pp, max(s, s_e if experts else 1)))))
    count = {"job": 1, "gpu": n, "dp": dp}
    for name, (size, scope, why) in res_eq.SMALL_ITEMS.items():
        per = {"job": "once", "gpu": "per rank", "dp": "per DP rank"}[scope]
        items.append(CheckpointItem(name=name, rule=per, basis=why,
                                    total_bytes=size * count[scope],
                                    per_rank_bytes=size, writers=count[scope], sharded=False))
    total = sum(x.total_bytes for x in items)
    busiest = sum(x.per_rank_bytes for x in items)
    return CheckpointContents(params=params, precision=precision, optimizer=optimizer, gpus=n,
                              tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, shard_degree=shards,
                              bytes_per_param=w + k, items=items, total_bytes=total,
                              busiest_rank_bytes=busiest, effective_writers=total / busiest)
