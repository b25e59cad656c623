"""What a mixture-of-experts layout must satisfy to run (rules.RULES' predicates for the expert
grid, each with its measure): experts over EP, Megatron-Core's MoE parallel folding at an
expert TP the framework runs, sequence parallel under TP where the framework requires it, EP
within the ranks the framework carves it from, ZeRO-3 without TP where the framework runs no
other. Vectorised over candidates, True where a row passes; each framework's part stated in
its profile, and read here once per rule (the _… helpers) for the predicate and its measure."""

from __future__ import annotations

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.specs.knobs import Layout

__all__ = ["ep_ranks", "ep_ranks_measure", "expert_grid_folds", "expert_grid_measure",
           "experts_divide", "moe_sequence_parallel", "moe_sequence_parallel_measure", "moe_zero3",
           "moe_zero3_measure"]


def _sp_required(p: Problem) -> bool:
    """An MoE under TP runs sequence parallel only (profile moe_needs_sequence_parallel)."""
    return p.model.is_moe and p.fw.time.moe_needs_sequence_parallel


def _etp_fixed(p: Problem) -> bool:
    """The framework runs one expert TP at each TP and EP (no expert_tensor_parallel)."""
    return p.model.is_moe and not p.fw.time.expert_tensor_parallel


def _fixed_etp(tp: np.ndarray | int, ep: np.ndarray | int) -> np.ndarray | int:
    """That expert TP: TP's sharding without EP, whole experts (1) under EP."""
    return np.where(np.asarray(ep) > 1, 1, tp)


def _ep_in_shard(p: Problem) -> bool:
    """EP is carved from the shard group × TP (profile ep_ranks "shard-group-tp")."""
    return p.model.is_moe and p.fw.time.ep_ranks == "shard-group-tp"


def _zero3_tp1(p: Problem) -> bool:
    """An MoE shards under ZeRO-3 only without TP (profile moe_zero3_needs_tp1)."""
    return p.model.is_moe and p.fw.time.moe_zero3_needs_tp1


def moe_sequence_parallel(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray | bool:
    """An MoE layer under TP runs sequence parallel where the framework requires it (its
    profile's moe_needs_sequence_parallel: Megatron-Core's MoELayer raises without it)."""
    if not _sp_required(p):
        return True
    return (c.tp <= 1) | (c.sp > 0)


def moe_sequence_parallel_measure(p: Problem, lay: Layout, f: object) -> tuple[str, str]:
    """(value, allowed) of sequence-parallel-with-moe."""
    needs = _sp_required(p) and lay.tp > 1
    return (f"SP {'on' if lay.sequence_parallel else 'off'}, TP {lay.tp}, "
            f"{p.model.experts} experts, {p.fw.name}", "SP on" if needs else "any")


def experts_divide(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    """The experts divide by EP where EP > 1."""
    # Megatron-LM arguments.py:1036-1040 (core_v0.15.3): --num-experts % EP == 0 where EP > 1
    e = p.model.experts
    return np.where(c.ep > 1, (e > 0) & (e % np.maximum(c.ep, 1) == 0), True)


def _etp(c: Candidates) -> np.ndarray:
    return np.where(c.etp > 0, c.etp, c.tp)


def expert_grid_folds(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    """Expert TP × EP divides TP × CP × DP (the expert grid folds over the attention grid), and
    the expert TP is one the framework runs."""
    # Megatron-Core parallel_state.initialize_model_parallel (core_v0.15.3, :743-751): the expert
    # grid ETP × EP × expert-DP × PP covers the world, so world % (ETP·EP·PP) == 0, i.e. ETP·EP
    # divides TP·CP·DP; EP may span TP, CP and DP ranks (MoE parallel folding, arXiv 2504.14960).
    # ETP > 1 only for a mixture of experts (a dense model has no expert grid).
    # Without expert TP in the framework (torchtitan) the experts take TP's sharding without
    # EP and are whole under EP, which borrows the TP ranks: ETP = TP there, 1 here.
    grid = _etp(c) * c.ep
    runs = _etp(c) == _fixed_etp(c.tp, c.ep) if _etp_fixed(p) else True
    return ((c.tp * c.cp * c.dp) % grid == 0) & ((c.etp == 0) | p.model.is_moe | (c.etp == c.tp)) \
        & runs


def expert_grid_measure(p: Problem, lay: Layout, f: object) -> tuple[str, str]:
    """(value, allowed) of expert-grid-folds: the grid, and the expert TP where the framework
    runs one alone."""
    limit = f"divides TP×CP×DP = {lay.tp * lay.cp * lay.dp}"
    if _etp_fixed(p) and lay.tp > 1:
        runs = int(_fixed_etp(lay.tp, lay.ep))
        limit += f", ETP {runs} ({p.fw.name} has no expert TP: --etp {runs})"
    return f"ETP {lay.expert_tp} × EP {lay.ep} = {lay.expert_tp * lay.ep}", limit


def _sparse_region(c: Candidates) -> np.ndarray:
    """The ranks EP may borrow where it stays within the FSDP shard group: the group (DP·CP
    ranks: a hybrid-shard group, else all of them; none under plain DDP, ZeRO-0 without TP,
    CP or PP, which exports as replicas) times TP."""
    group = np.where(c.shard > 0, c.shard, c.dp * c.cp)
    ddp = (c.zero == 0) & (c.tp == 1) & (c.pp == 1) & (c.cp == 1)
    return np.where(ddp, 1, group) * c.tp


def ep_ranks(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray | bool:
    """EP divides the ranks the framework carves it from where not the expert grid (its
    profile's ep_ranks): torchtitan's shard group × TP (efsdp = dp_shard·cp·tp / ep; replicas
    are outside)."""
    if not _ep_in_shard(p):
        return True
    return np.where(c.ep > 1, _sparse_region(c) % np.maximum(c.ep, 1) == 0, True)


def ep_ranks_measure(p: Problem, lay: Layout, f: object) -> tuple[str, str]:
    """(value, allowed) of ep-ranks."""
    if not _ep_in_shard(p) or lay.ep == 1:
        return f"EP {lay.ep}", "any"
    region = int(_sparse_region(Candidates.from_layouts([lay]))[0])
    return (f"EP {lay.ep}", f"divides the shard group × TP = {region} ({p.fw.name} carves EP "
                            "from them)")


def moe_zero3(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray | bool:
    """A mixture of experts runs ZeRO-3 without TP alone where the framework says so (its
    profile's moe_zero3_needs_tp1: DeepSpeed's AutoEP, the only MoE it shards so)."""
    if not _zero3_tp1(p):
        return True
    return ~((c.zero >= 3) & (c.dp * c.cp > 1) & (c.tp > 1))


def moe_zero3_measure(p: Problem, lay: Layout, f: object) -> tuple[str, str]:
    """(value, allowed) of moe-zero3-tp."""
    if not _zero3_tp1(p):
        return f"ZeRO {lay.zero}, TP {lay.tp}", "any"
    return (f"ZeRO {lay.zero}, TP {lay.tp}, {p.model.experts} experts",
            f"TP 1 under ZeRO-3 ({p.fw.name} shards an MoE so only without TP)")
