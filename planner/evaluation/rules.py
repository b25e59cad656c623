"""The layout rules, once: id, vectorised predicate, text, measured/limit, and the config key the
rule concerns in each input format (plan file, Megatron-LM flag, torchtitan TOML, DeepSpeed JSON).

The search applies every predicate to all candidates at once and attributes each rejection to
the first rule (in table order) it fails; `estimate`, `check` and `report` print the same rules
for one layout with the value measured and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from planner.evaluation.candidates import SCHEDULE_CODES, Candidates, Problem
from planner.engine.batch import batch_divides
from planner.engine.arrays import Mask
from planner.engine.budget import OFFLOAD_CPU
from planner.engine.memory import PAGED_STATES
from planner.evaluation import host
from planner.evaluation.moe_rules import (ep_ranks, ep_ranks_measure,
                                         expert_grid_folds, expert_grid_measure, experts_divide,
                                         moe_sequence_parallel, moe_sequence_parallel_measure,
                                         moe_zero3, moe_zero3_measure)
from planner.engine.ranks import inside_domain
from planner.engine.stages import MAX_STAGE_DEFICIT, layers_split_valid
from planner.specs.knobs import Layout
from planner.specs.layout import Rule, Status

# True where a candidate passes (a bool where the rule holds or fails for every candidate)
Predicate = Callable[[Problem, Candidates, np.ndarray], Mask]
Measure = Callable[[Problem, Layout, "Figures"], tuple[str, str]]


@dataclass(frozen=True)
class Figures:
    """The evaluated numbers a rule's measured value quotes, for one layout."""

    micro_batches: float
    peak_memory: float
    usable_memory: float


@dataclass(frozen=True)
class RuleSpec:
    """One rule: id, predicate over candidates (True = passes), text, measured/limit, and the
    config key per format (`FORMATS`; a format without an entry has no key for the rule)."""

    id: str
    predicate: Predicate | None   # None: decided by the memory model (fits-in-memory)
    text: str
    measure: Measure
    keys: dict[str, Key]
    # The knob tables of a split (space.FACTORS) the predicate reads besides the split's own
    # TP, CP, PP, DP, EP: planner.search.blocks counts a split's rows by rule from them.
    reads: tuple[str, ...]


# The formats whose keys the table carries: a plan file's key path (world-size and
# batch-divisible are keyed by the plan resolver, as they depend on which fields were given),
# Megatron-LM's argument, torchtitan's job-TOML key, DeepSpeed's JSON key.
FORMATS = ("plan", "megatron", "torchtitan", "deepspeed")
Key = str | Callable[[Layout], str]


def _keys(plan: Key | None = None, megatron: Key | None = None, torchtitan: Key | None = None,
          deepspeed: Key | None = None) -> dict[str, Key]:
    given = {"plan": plan, "megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}
    return {fmt: k for fmt, k in given.items() if k is not None}


TP_KEYS = _keys("layout.tp", "--tensor-model-parallel-size", "parallelism.tensor_parallel_degree")


def _dpcp(c: Candidates) -> np.ndarray:
    return c.dp * c.cp


def _shard(c: Candidates) -> np.ndarray:
    return np.where(c.shard > 0, c.shard, _dpcp(c))


def _split_detail(p: Problem, lay: Layout, f: "Figures") -> tuple[str, str]:
    """(value, allowed) of the layer-split rule: stated first/last stages as Megatron-Core checks
    them (transformer_config.py:1083-1135), else L over PP × v."""
    first, last = lay.first_stage_layers, lay.last_stage_layers
    if first is None and last is None:
        return (f"{p.model.layers} layers / (PP {lay.pp} × v {lay.chunks})",
                f"whole number, or up to {MAX_STAGE_DEFICIT} short at the first and last chunk")
    others = lay.pp - (first is not None) - (last is not None)
    return (f"{p.model.layers} layers, first {first or '-'}, last {last or '-'}, "
            f"{others} other stages, PP {lay.pp}, v {lay.chunks}",
            f"PP > 1, stated stages {'≥ v' if p.fw.time.pipeline_layout else 'multiples of v'}"
            ", the rest ≥ v and a multiple of v per other stage")


def _interleaving(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    # Megatron-Core interleaved 1F1B needs a micro-batch group N with PP ≤ N ≤ M (and a remainder
    # M mod N of 0 or ≥ PP): N = M always works, so M ≥ PP suffices (pipeline_parallel/
    # schedules.py, microbatch_group_size_per_vp_stage checks); Llama 3 ran such an M. The
    # memory counts the smallest valid N (engine.pipeline.vp_group_size), which the Megatron
    # export states where it is not PP.
    return np.where(c.schedule == SCHEDULE_CODES["interleaved"],
                    (c.pp > 1) & (c.chunks >= 2) & (np.round(m) >= c.pp), c.chunks == 1)


def _pipeline_runs(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    # a framework whose profile lists no pipeline schedule (fsdp, torchtune) runs no PP; a
    # schedule outside a running framework's list is kept where the user fixed it (a what-if:
    # DeepSeek-V3's DualPipe priced on Megatron's costs), never offered by the search
    return np.where(c.pp > 1, bool(p.fw.time.pipeline_schedules), True)


def _pipeline_measure(p: Problem, lay: Layout, f: Figures) -> tuple[str, str]:
    runs = p.fw.time.pipeline_schedules
    return (f"PP {lay.pp}, {lay.schedule}" if lay.pp > 1 else "PP 1",
            f"any PP ({p.fw.name}: {', '.join(runs)})" if runs
            else f"PP 1: {p.fw.name} runs no pipeline")


def _dualpipe(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    # deepseek-ai/DualPipe @3da1bbe: DualPipe.step asserts num_ranks % 2 == 0 and num_chunks even
    # and ≥ 2·num_ranks (dualpipe/dualpipe.py:332-333: half the micro-batches enter at each end);
    # DualPipeV.step asserts num_chunks ≥ 2·num_ranks (dualpipe/dualpipev.py:318), as does
    # torch.distributed.pipelining's ScheduleDualPipeV (m ≥ its 2·PP stages).
    mb = np.round(m)
    dual = c.schedule == SCHEDULE_CODES["dualpipe"]
    v_shape = c.schedule == SCHEDULE_CODES["dualpipev"]
    return np.where(dual, (c.pp % 2 == 0) & (mb % 2 == 0) & (mb >= 2 * c.pp),
                    np.where(v_shape, mb >= 2 * c.pp, True))


def _dualpipe_detail(p: Problem, lay: Layout, f: "Figures") -> tuple[str, str]:
    measured = f"{lay.schedule}, PP {lay.pp}, m = {f.micro_batches:g}"
    if lay.schedule == "dualpipe":
        return measured, f"PP even, m even and ≥ 2 × PP = {2 * lay.pp}"
    if lay.schedule == "dualpipev":
        return measured, f"m ≥ 2 × PP = {2 * lay.pp}"
    return measured, "any"


def _sequence(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    return (np.where(c.cp > 1, p.seq_len % (2 * c.cp) == 0, True)
            & np.where(c.sp > 0, (p.seq_len // c.cp) % c.tp == 0, True))


def _offload(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    """Parameter offload needs ZeRO-3 and optimizer offload ZeRO ≥ 1 (DeepSpeed), but a paged
    optimizer pages its states to host memory at any stage (bitsandbytes managed memory)."""
    paged = p.optimizer in PAGED_STATES
    return (np.where(c.offload_par > 0, c.zero >= 3, True)
            & np.where(c.offload_opt > 0, (c.zero >= 1) | (paged & (c.offload_opt == OFFLOAD_CPU)),
                       True))


def _optimizer_in_backward(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray | bool:
    """The optimizer steps in backward only where the framework does it and every step is one
    micro-batch: torchtune's recipes refuse gradient accumulation with optimizer_in_bwd
    (recipes/full_finetune_single_device.py:151-160; a parameter's step fires once its
    gradient is final)."""
    if not p.tuning.optimizer_in_backward:
        return True
    return (m == 1) & p.fw.memory.optimizer_in_backward


def _host(p: Problem, c: Candidates, m: np.ndarray) -> np.ndarray:
    """The states alone (host.state_fits): what the layout's states knobs decide; evaluate and
    the searches' memory phase add the offloaded activations (host.fits)."""
    return host.state_fits(p, c)


def _host_measure(p: Problem, lay: Layout, f: Figures) -> tuple[str, str]:
    """The host bytes a node takes, part by part (host.PARTS; the zero parts left out)."""
    parts = host.parts_per_node(p, Candidates.from_layouts([lay]))
    named = [f"{name} {float(v[0]) / 1e9:,.1f}" for name, v in parts.items() if float(v[0])]
    total = sum(float(v[0]) for v in parts.values()) / 1e9
    hw = p.hardware.host
    return (f"{total:,.1f} GB a node" + (f" ({', '.join(named)})" if named else ""),
            f"≤ {host.limit(p) / 1e9:,.1f} GB ({hw.host_memory_bytes / 1e9:,.1f} less "
            f"{hw.reserve_bytes / 1e9:,.1f} reserved)")


def _shard_group(lay: Layout) -> int:
    return lay.shard_degree if lay.shard_group else lay.dp * lay.cp


def _sharding_measure(p: Problem, lay: Layout, f: "Figures") -> tuple[str, str]:
    """(value, allowed) of sharding-valid: the stage where the framework does not run it (with
    a data-parallel group), else the shard group."""
    stages = p.fw.time.zero_stages
    if lay.dp * lay.cp > 1 and lay.zero not in stages:
        return (f"ZeRO {lay.zero}", f"ZeRO {', '.join(map(str, stages))} ({p.fw.name} "
                                    f"has no ZeRO-{lay.zero})")
    spans = f", a multiple of CP {lay.cp}" if p.fw.time.shard_spans_cp and lay.cp > 1 else ""
    return (f"shard group {_shard_group(lay)}",
            f"divides {lay.dp * lay.cp}{spans}" if p.fw.time.hybrid_sharding
            else f"none: {p.fw.name} has no hybrid sharding")


RULES: tuple[RuleSpec, ...] = (
    RuleSpec("world-size", lambda p, c, m: c.dp * c.tp * c.pp * c.cp == p.gpus,
             "DP × TP × PP × CP must equal the GPU count",
             lambda p, lay, f: (f"{lay.dp}×{lay.tp}×{lay.pp}×{lay.cp} = {lay.world}",
                                f"= {p.gpus}"),
             _keys(megatron="--tensor-model-parallel-size",
                   torchtitan="parallelism.data_parallel_shard_degree"),
             reads=()),
    RuleSpec("tp-in-nvlink-domain",
             # Only TP's per-layer all-reduces need NVLink; CP's ring of K/V chunks crosses the
             # network when TP fills the node (Meta's 405B runs CP across nodes, Dubey et al.
             # 2024 Sec. 3.3.2) and is priced on the link it crosses.
             lambda p, c, m: inside_domain(c.tp, p.hardware.scale_up.gpus_per_domain),
             "TP must fit (and tile) one NVLink domain; CP may cross the network",
             lambda p, lay, f: (f"TP = {lay.tp}",
                                f"divides {p.hardware.scale_up.gpus_per_domain}"),
             TP_KEYS,
             reads=()),
    RuleSpec("heads-divisible-by-tp", lambda p, c, m: p.model.heads % c.tp == 0,
             "attention heads must divide evenly across TP ranks",
             lambda p, lay, f: (f"{p.model.heads} heads / TP {lay.tp}", "whole number"),
             TP_KEYS,
             reads=()),
    RuleSpec("kv-heads-compatible-with-tp",
             lambda p, c, m: (p.model.kv_heads % c.tp == 0) | (c.tp % p.model.kv_heads == 0),
             "KV heads must be a multiple or a divisor of TP",
             lambda p, lay, f: (f"{p.model.kv_heads} KV heads, TP {lay.tp}",
                                "multiple or divisor"),
             TP_KEYS,
             reads=()),
    RuleSpec("layers-divisible-by-pp", lambda p, c, m: layers_split_valid(
                 p.model.layers, c.pp, c.chunks, c.first, c.last, p.fw.time.pipeline_layout),
             "layers must divide across PP stages × chunks (first and last stage may hold one "
             "layer fewer, or the layers stated for them)",
             _split_detail,
             _keys("layout.pp", "--pipeline-model-parallel-size",
                   "parallelism.pipeline_parallel_degree"),
             reads=("schedule",)),
    RuleSpec("interleaving-valid", _interleaving,
             "interleaving needs PP > 1, v ≥ 2 and at least PP micro-batches",
             lambda p, lay, f: (f"{lay.schedule}, v = {lay.chunks}, m = {f.micro_batches:g}",
                                "PP > 1, v ≥ 2, m ≥ PP" if lay.schedule == "interleaved"
                                else "v = 1"),
             _keys(lambda lay: "layout.chunks" if lay.schedule == "interleaved" else "layout.schedule",
                   "--num-layers-per-virtual-pipeline-stage",
                   "parallelism.pipeline_parallel_schedule"),
             reads=("mb", "schedule")),
    RuleSpec("dualpipe-valid", _dualpipe,
             "DualPipe needs an even PP and an even number of micro-batches, at least 2 × PP; "
             "DualPipeV at least 2 × PP micro-batches",
             _dualpipe_detail,
             _keys("layout.schedule", torchtitan="parallelism.pipeline_parallel_schedule"),
             reads=("mb", "schedule")),
    RuleSpec("batch-divisible", lambda p, c, m: batch_divides(p.global_batch, c.mb, c.dp),
             "global batch must be a multiple of micro-batch × DP",
             lambda p, lay, f: (f"{p.global_batch} / ({lay.micro_batch} × {lay.dp})",
                                "whole number ≥ 1"),
             _keys(megatron="--global-batch-size", torchtitan="training.global_batch_size",
                   deepspeed="train_batch_size"),
             reads=("mb",)),
    RuleSpec("optimizer-in-backward", _optimizer_in_backward,
             "the optimizer steps in backward only without gradient accumulation, in a "
             "framework that runs it (its profile's optimizer_in_backward)",
             lambda p, lay, f: ((f"on, {f.micro_batches:g} micro-batch(es) a step, {p.fw.name}",
                                 "1 micro-batch, " + ("supported" if p.fw.memory.optimizer_in_backward
                                                      else f"none: {p.fw.name} has no optimizer in "
                                                      "backward"))
                                if p.tuning.optimizer_in_backward else ("off", "any")),
             _keys("layout.optimizer_in_backward"),
             reads=("mb",)),
    RuleSpec("sequence-divisible", _sequence,
             "sequence must divide by 2·CP (and by TP under sequence parallel)",
             lambda p, lay, f: (f"seq {p.seq_len}, CP {lay.cp}, TP {lay.tp}", "divisible"),
             _keys(lambda lay: "layout.cp" if lay.cp > 1 else ("layout.sp" if lay.sp else "seq_len"),
                   "--seq-length", "training.seq_len"),
             reads=("sp",)),
    RuleSpec("sequence-parallel-with-moe", moe_sequence_parallel,
             "a mixture of experts under TP needs sequence parallel where the framework "
             "requires it (its profile's moe_needs_sequence_parallel)",
             moe_sequence_parallel_measure,
             _keys("layout.sp", "--sequence-parallel", "parallelism.enable_sequence_parallel"),
             reads=("sp",)),
    RuleSpec("experts-divisible-by-ep", experts_divide,
             "experts must divide by EP",
             lambda p, lay, f: (f"{p.model.experts} experts, EP {lay.ep}", "divisible"),
             _keys("layout.ep", "--expert-model-parallel-size",
                   "parallelism.expert_parallel_degree"),
             reads=()),
    RuleSpec("pipeline-runs", _pipeline_runs,
             "pipeline parallelism needs a framework that runs a pipeline schedule (its "
             "profile's pipeline_schedules)",
             _pipeline_measure,
             _keys("layout.pp", "--pipeline-model-parallel-size",
                   "parallelism.pipeline_parallel_degree", "pipeline"),
             reads=()),
    RuleSpec("expert-grid-folds", expert_grid_folds,
             "expert TP × EP must divide TP × CP × DP (the expert grid ETP × EP × expert-DP × PP "
             "covers the same GPUs), at an expert TP the framework runs",
             expert_grid_measure,
             _keys(lambda lay: "layout.etp" if lay.etp is not None else "layout.ep",
                   lambda lay: ("--expert-tensor-parallel-size" if lay.etp is not None
                                else "--expert-model-parallel-size"),
                   "parallelism.expert_parallel_degree"),
             reads=("etp",)),
    RuleSpec("sharding-valid", lambda p, c, m: (_dpcp(c) % _shard(c) == 0)
             & np.where(c.shard > 0, (c.zero >= 1) & p.fw.time.hybrid_sharding, True)
             & ((_dpcp(c) == 1) | np.isin(c.zero, p.fw.time.zero_stages))
             & np.where(c.shard > 0, c.shard % (c.cp if p.fw.time.shard_spans_cp else 1) == 0,
                        True),
             "the ZeRO stage must be one the framework runs (its profile's zero_stages) and its "
             "shard group must divide DP × CP (hybrid sharding needs ZeRO ≥ 1 and a framework "
             "that runs it: the profile's hybrid_sharding; whole CP groups where the shards "
             "span CP: shard_spans_cp)",
             _sharding_measure,
             _keys(lambda lay: "layout.shard_group" if lay.shard_group else "layout.zero",
                   "--use-distributed-optimizer",
                   "parallelism.data_parallel_shard_degree", "zero_optimization.stage"),
             reads=("states",)),
    RuleSpec("ep-ranks", ep_ranks,
             "EP must divide the ranks the framework carves it from (its profile's ep_ranks: "
             "the shard group × TP)", ep_ranks_measure,
             _keys("layout.ep", "--expert-model-parallel-size",
                   "parallelism.expert_parallel_degree"),
             reads=("states",)),
    RuleSpec("moe-zero3-tp", moe_zero3,
             "a mixture of experts under ZeRO-3 runs without TP where the framework shards it "
             "so only (its profile's moe_zero3_needs_tp1)", moe_zero3_measure,
             _keys("layout.zero", deepspeed="zero_optimization.stage"),
             reads=("states",)),
    RuleSpec("offload-valid", _offload,
             "parameter offload needs ZeRO-3; optimizer offload needs ZeRO ≥ 1 (a paged "
             "optimizer pages to CPU memory at any stage)",
             lambda p, lay, f: (f"ZeRO {lay.zero}, offload opt={lay.offload_optimizer} "
                                f"params={lay.offload_params}", "see rule"),
             _keys(lambda lay: ("layout.offload_params" if lay.offload_params != "none"
                                else "layout.offload_optimizer"),
                   deepspeed=lambda lay: ("offload_param" if lay.offload_params != "none"
                                          else "offload_optimizer")),
             reads=("states",)),
    RuleSpec("zero-with-pp",
             # the framework profile's max_zero_under_pp: DeepSpeed's PipelineEngine asserts
             # ZeRO < 2 (deepspeed/runtime/pipe/engine.py); the others run every stage beside PP
             lambda p, c, m: np.where(c.pp > 1, c.zero <= p.fw.time.max_zero_under_pp, True),
             "the framework must run this ZeRO stage together with pipeline parallelism",
             lambda p, lay, f: (f"ZeRO {lay.zero}, PP {lay.pp}",
                                f"ZeRO ≤ {p.fw.time.max_zero_under_pp} when PP > 1 ({p.fw.name})"),
             _keys("layout.zero", "--data-parallel-sharding-strategy",
                   "parallelism.data_parallel_shard_degree", "zero_optimization.stage"),
             reads=("states",)),
    RuleSpec("fits-in-host-memory", _host,
             "offloaded optimizer states (and gradients, parameters), paged optimizer states "
             "and offloaded activations must fit in host memory less the profile's reserve",
             _host_measure,
             _keys(lambda lay: ("layout.offload_params" if lay.offload_params != "none"
                                else "layout.offload_optimizer" if lay.offload_optimizer != "none"
                                or not lay.activation_offload else "layout.activation_offload"),
                   deepspeed=lambda lay: ("offload_param" if lay.offload_params != "none"
                                          else "offload_optimizer")),
             reads=("states",)),
    RuleSpec("fits-in-memory", None,
             "per-GPU peak must fit in usable memory (capacity minus margin)",
             lambda p, lay, f: (f"{f.peak_memory / 1e9:.2f} GB", f"≤ {f.usable_memory / 1e9:.2f} GB"),
             _keys("layout", "--micro-batch-size", "training.local_batch_size",
                   "train_micro_batch_size_per_gpu"),
             reads=("states", "mb", "schedule", "sp")),
)

RULE_NAMES: tuple[str, ...] = tuple(r.id for r in RULES)
RULE_TEXT: dict[str, str] = {r.id: r.text for r in RULES}


def structural_predicates(p: Problem, c: Candidates, m: np.ndarray) -> dict[str, np.ndarray]:
    """Every rule but fits-in-memory, vectorised over the candidates (True = passes). m =
    micro-batches per step (fractional where the batch does not divide; batch-divisible fails)."""
    n = len(c)
    return {r.id: np.asarray(r.predicate(p, c, m), dtype=bool) & np.ones(n, dtype=bool)
            for r in RULES if r.predicate is not None}


def config_keys(fmt: str, lay: Layout) -> dict[str, str]:
    """Rule id → the key it concerns in one input format (`FORMATS`), for `check`'s line
    numbers and messages; rules the format has no key for are left out."""
    return {r.id: (k(lay) if callable(k) else k) for r in RULES
            if (k := r.keys.get(fmt)) is not None}


def rules_for(p: Problem, lay: Layout, passes: dict[str, bool], f: Figures) -> list[Rule]:
    """Every rule for one layout: status, measured value, limit and text."""
    out_ = []
    for r in RULES:
        ok = bool(passes[r.id])
        status: Status = "pass" if ok else "fail"
        measured, limit = r.measure(p, lay, f)
        if r.id == "kv-heads-compatible-with-tp" and ok and lay.tp > p.model.kv_heads:
            status = "warn"  # allowed by recent Megatron, but KV heads are replicated
            measured += " (KV heads replicated)"
        out_.append(Rule(name=r.id, status=status, measured=measured, limit=limit,
                         message=r.text))
    return out_
