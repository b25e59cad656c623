"""Megatron-LM's mixture-of-experts arguments, read and written (core_v0.15.3 / megatron-core
0.15.3): the profile a script's arguments state (EP pairing, TP overlap, token dispatcher, expert
capacity), the dispatcher and pairing flags an export writes, and the expert grid's checks."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from planner.errors import InputError
from planner.evaluation import paired_overlap as paired
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.job import Job
from planner.specs.verdict import make_rule


def ep_overlap_flags(inp: Job) -> list[tuple[str, object]]:
    """--overlap-moe-expert-parallel-comm where the job's framework (Megatron's profile when
    none is given) pairs the layout's chunks (evaluation.paired_overlap.layout_pairs)."""
    lay = inp.layout
    fw = (inp.framework or load_framework("megatron")).time
    pairs = paired.layout_pairs(fw, lay, inp.global_batch // (lay.micro_batch * lay.dp),
                                inp.model.mtp_layers)
    return [("--overlap-moe-expert-parallel-comm", None)] if pairs else []


# --moe-token-dispatcher-type → the profile's ep_dispatcher: flex runs DeepEP (arguments.py:
# 3131-3136); Megatron-Core's default is allgather (megatron-core 0.15.3 transformer_config.py:554)
DISPATCHERS: dict[str, Literal["deepep", "alltoall", "allgather"]] = {
    "flex": "deepep", "alltoall": "alltoall", "allgather": "allgather"}


def job_framework(a: dict[str, Any], where: str, notes: list[str]) -> FrameworkProfile:
    """The megatron profile with what the arguments switch on or state: the EP pairing
    (--overlap-moe-expert-parallel-comm), TE's TP overlap (--tp-comm-overlap, arguments.py:2090),
    the token dispatcher and the expert capacity (transformer_config.py:554-570: None drops
    nothing; with --moe-pad-expert-input-to-capacity every expert's input is padded to it,
    without it the capacity only caps the busiest expert)."""
    meg = load_framework("megatron")
    t = meg.time
    kind = a.get("--moe-token-dispatcher-type", "allgather")
    if kind not in DISPATCHERS:
        raise InputError(f"{where}: --moe-token-dispatcher-type", f"{kind!r} is not one of "
                         f"{', '.join(DISPATCHERS)}")
    cap, imbalance = 0.0, t.ep_load_imbalance
    if "--moe-expert-capacity-factor" in a:
        text = a["--moe-expert-capacity-factor"]
        try:
            cap = float(text)
        except ValueError:
            cap = float("nan")
        if not (cap != 0 and -1e6 < cap < 1e6):   # NaN fails too
            raise InputError(f"{where}: --moe-expert-capacity-factor", "must be a number > 0 "
                             f"(or < 0: no dropping), got {text!r}")
        cap = max(cap, 0.0)   # negative: None, nothing dropped (transformer_config.py:855-857)
        if cap and not a.get("--moe-pad-expert-input-to-capacity"):
            cap, imbalance = 0.0, min(imbalance, cap)
            notes.append("--moe-expert-capacity-factor without --moe-pad-expert-input-to-capacity "
                         "caps the busiest expert: priced dropless, the stated imbalance at most "
                         "the capacity")
    time = dataclasses.replace(
        t, ep_overlap=t.ep_overlap if a.get("--overlap-moe-expert-parallel-comm") else (),
        tp_comm_overlap=bool(a.get("--tp-comm-overlap")) or t.tp_comm_overlap,
        ep_dispatcher=DISPATCHERS[kind], moe_capacity_factor=cap, ep_load_imbalance=imbalance)
    return dataclasses.replace(meg, time=time)


def dispatcher_flags(inp: Job) -> list[tuple[str, object]]:
    """The token dispatcher the job's framework profile prices (ep_dispatcher: DeepEP through
    the flex dispatcher, core_v0.15.3 arguments.py:3131-3136, or alltoall) and the model's
    group-limited routing (--moe-router-num-groups / --moe-router-group-topk, :3098-3101)."""
    fw = (inp.framework or load_framework("megatron")).time
    a: list[tuple[str, object]] = ([("--moe-token-dispatcher-type", "flex"),
                                    ("--moe-enable-deepep", None)]
                                   if fw.ep_dispatcher == "deepep"
                                   else [("--moe-token-dispatcher-type", fw.ep_dispatcher)])
    if fw.moe_capacity_factor:
        a += [("--moe-expert-capacity-factor", fw.moe_capacity_factor),
              ("--moe-pad-expert-input-to-capacity", None)]
    m = inp.model
    if m.route_groups and 0 < m.route_group_topk < m.route_groups:
        a += [("--moe-router-num-groups", m.route_groups),
              ("--moe-router-group-topk", m.route_group_topk)]
    return a


def ep_overlap_rule(a: dict[str, Any], pp: int, interleaved: bool, ep: int,
                    granularity: str | None, rules: list) -> None:
    """--overlap-moe-expert-parallel-comm's checks (core_v0.15.3 transformer_config.py:
    1441-1480): with PP > 1 it needs virtual pipeline stages, EP > 1, no full recompute and at
    most one MTP module."""
    if a.get("--overlap-moe-expert-parallel-comm"):
        mtp = a.get("--mtp-num-layers") or 0
        ok = (pp == 1 or interleaved) and ep > 1 and granularity != "full" and mtp <= 1
        rules.append(make_rule("megatron-ep-overlap", ok, f"PP {pp}, EP {ep}, recompute "
                               f"{granularity or 'none'}, MTP {mtp}", "PP 1 or virtual stages, "
                               "EP > 1, not full, MTP ≤ 1", "overlap_moe_expert_parallel_comm "
                               "needs virtual pipeline stages under PP, expert parallelism, no "
                               "full recomputation and at most one MTP layer (TransformerConfig)",
                               key="--overlap-moe-expert-parallel-comm"))


def expert_rules(a: dict, experts: int, gpus: int, rules: list) -> int | None:
    """The expert grid's checks (core_v0.15.3): --num-experts % EP == 0 (validate_args,
    arguments.py:1036-1040) and world % (ETP·EP·PP) == 0 (parallel_state.py:745-751; ETP
    defaults to TP, :743). EP may span TP, CP and DP ranks: no rule ties it to DP. Returns the
    --expert-tensor-parallel-size given (None: TP)."""
    tp = a.get("--tensor-model-parallel-size", 1)
    pp = a.get("--pipeline-model-parallel-size", 1)
    ep = a.get("--expert-model-parallel-size", 1)
    etp = a.get("--expert-tensor-parallel-size")
    if ep > 1:
        rules.append(make_rule("megatron-experts-ep", experts > 0 and experts % ep == 0,
                               f"{experts} experts, EP {ep}", "multiple of EP",
                               "Number of experts should be a multiple of expert model parallel "
                               "size", key="--expert-model-parallel-size"))
    if ep == 1 and etp is None:
        return None
    grid = (etp or tp) * ep * pp
    rules.append(make_rule("megatron-expert-grid", gpus % grid == 0,
                           f"{gpus} % (ETP {etp or tp} × EP {ep} × PP {pp})", "= 0",
                           "world_size is not divisible by expert_tensor_model_pipeline_parallel "
                           "size (parallel_state)", key="--expert-tensor-parallel-size"
                           if etp is not None else "--expert-model-parallel-size"))
    return etp
