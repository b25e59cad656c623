"""One layout, or a whole array of candidate layouts, to a typed Evaluation.

`evaluate` is the single code path: `estimate` calls it with one candidate, the search with
every candidate at once (numpy arrays, no per-candidate Python loop). The arithmetic lives in
engine/; this module gathers the model's, the hardware's and the layout's numbers into the
memory budget per stage (items listed in `StageMemory`), timing.py into the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .candidates import Candidates, Problem, Shape, full_recomputed, shape
from .engine import activations as act
from .engine import budget as bud
from .engine.params import mlp_params
from .engine.pipeline import micro_batches_in_flight
from .candidates import SCHEDULE_CODES
from .rules import RULE_NAMES, structural_predicates
from .timing import StepTime, Throughput, step_time

STAGES = ("first", "middle", "last")


@dataclass(frozen=True)
class StageMemory:
    """Per-GPU bytes of one pipeline stage, item by item (the memory budget's visible list)."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    zero3_gathered_params: np.ndarray
    activations: np.ndarray
    embedding_output_activations: np.ndarray
    logits: np.ndarray
    comm_buffers: np.ndarray
    cuda_context: np.ndarray
    fragmentation: np.ndarray
    total: np.ndarray
    params: np.ndarray          # parameters this GPU holds (dense + experts), before ZeRO

    def items(self) -> dict[str, np.ndarray]:
        """The budget items in print order (everything but total and params)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("total", "params")}


@dataclass(frozen=True)
class Memory:
    """Memory per stage and the verdict against usable capacity (bytes, arrays of len(c))."""

    first: StageMemory
    middle: StageMemory
    last: StageMemory
    has_middle: np.ndarray      # PP > 2
    uneven_stages: np.ndarray   # first/last stage hold fewer layers
    peak: np.ndarray
    peak_stage: np.ndarray      # 0 first, 1 middle, 2 last
    usable: np.ndarray
    capacity: np.ndarray
    headroom: np.ndarray

    def stage(self, name: str) -> StageMemory:
        """The stage called first, middle or last."""
        return getattr(self, name)


@dataclass(frozen=True)
class RuleResults:
    """Each rule's predicate per candidate (True = passes) and their conjunction."""

    passes: dict[str, np.ndarray]
    valid: np.ndarray

    def matrix(self) -> np.ndarray:
        """rules × candidates, in RULE_NAMES order (the order a rejection is attributed)."""
        return np.stack([self.passes[n] for n in RULE_NAMES])


@dataclass(frozen=True)
class Evaluation:
    """Everything the model says about each candidate: memory, step time, throughput, rules."""

    micro_batches: np.ndarray
    memory: Memory
    time: StepTime
    throughput: Throughput
    rules: RuleResults

    def __len__(self) -> int:
        return len(self.micro_batches)


@dataclass(frozen=True)
class _Params:
    """Per-layer and edge parameter counts, dense vs expert (the ZeRO/EP sharding differs)."""

    dense_per_layer: float
    expert_per_layer: float
    embedding: np.ndarray
    head: np.ndarray
    largest_layer: np.ndarray | float
    expert_shard: np.ndarray


def _params(p: Problem, x: Shape) -> _Params:
    """Dense and expert parameters per layer, embedding and output head per stage."""
    mod, h = p.model, p.model.hidden
    moe_share = mod.moe_layers / mod.layers
    # Expert weights proper are all experts' MLPs; the rest of an MoE layer is dense.
    experts_w = (mod.experts * mlp_params(h, mod.expert_width, mod.gated, mod.linear_bias)
                 if mod.is_moe else 0.0)
    moe_dense = mod.moe_layer_params() - experts_w if mod.is_moe else 0.0
    emb = x.vocab_padded * h + (mod.embedding_params() - mod.vocab * h)   # + learned positions
    head = np.where(mod.tied_embeddings & (x.pp == 1), 0.0, x.vocab_padded * h) \
        + mod.final_norm_params()
    largest = np.maximum(mod.layer_params(), moe_dense + experts_w / x.ep) if mod.is_moe \
        else float(mod.layer_params())
    return _Params(dense_per_layer=(1 - moe_share) * mod.layer_params() + moe_share * moe_dense,
                   expert_per_layer=moe_share * experts_w, embedding=emb, head=head,
                   largest_layer=largest,
                   expert_shard=np.maximum(np.minimum(x.shard, x.dp * x.cp / x.ep), 1.0))


def layer_activations(p: Problem, c: Candidates, x: Shape) -> dict[int, np.ndarray]:
    """Stored activation bytes of one layer for one micro-batch, per recompute mode."""
    mod = p.model
    ffn_act = mod.experts_per_token * mod.expert_width if mod.is_moe else mod.ffn
    common = dict(mlp=mod.mlp, dropout=mod.dropout, flash=p.flash, tp=x.tp, sp=c.sp, cp=x.cp,
                  bytes_per_elem=x.act_bytes)
    dims = (p.seq_len, x.mb, mod.hidden, mod.heads, mod.kv_heads, mod.head_dim, ffn_act)
    return {mode: act.layer_activation_bytes(*dims, recompute=mode, **common)
            for mode in (act.RECOMPUTE_NONE, act.RECOMPUTE_SELECTIVE, act.RECOMPUTE_FULL)}


def _in_flight(c: Candidates, x: Shape, stage_index) -> np.ndarray:
    """Micro-batches whose activations a stage holds at once, by schedule."""
    names = {code: name for name, code in SCHEDULE_CODES.items()}
    return np.select([c.schedule == code for code in names],
                     [np.asarray(micro_batches_in_flight(name, x.pp, x.micro_batches, stage_index,
                                                         x.v), dtype=float)
                      for code, name in names.items()])


def _edges(p: Problem, c: Candidates, x: Shape, stage: str, fl: np.ndarray):
    """(embedding/output-layer activations, logits) a stage holds: the first stage the
    embedding's, the last the output layer's and the logits; a single stage all three."""
    s, mb, h, tp, cp = p.seq_len, x.mb, p.model.hidden, x.tp, x.cp
    out_layer = act.output_layer_bytes(s, mb, h, tp=tp, sp=c.sp, cp=cp, bytes_per_elem=x.act_bytes)
    logits = act.logits_bytes(s, mb, x.vocab_padded, tp, cp=cp)
    if stage == "middle":
        return np.zeros_like(tp), np.zeros_like(tp)
    if stage == "last":
        return fl * out_layer, logits + 0.0 * tp
    edge = fl * act.embedding_activation_bytes(s, mb, h, dropout=p.model.dropout, tp=tp,
                                               sp=c.sp, cp=cp)
    single = x.pp == 1
    return edge + np.where(single, out_layer, 0.0), np.where(single, logits, 0.0)


def _stage(p: Problem, c: Candidates, x: Shape, par: _Params, a: dict[int, np.ndarray],
           stage: str) -> StageMemory:
    """One stage's budget: model states (ZeRO, offload), ZeRO-3 gathered layer, activations of
    the micro-batches in flight, edges, then buffers, context and fragmentation."""
    index = {"first": 0.0, "middle": 1.0, "last": x.pp - 1.0}[stage]
    emb = {"first": par.embedding, "middle": 0.0, "last": np.where(x.pp == 1, par.embedding, 0.0)}
    head = {"first": np.where(x.pp == 1, par.head, 0.0), "middle": 0.0, "last": par.head}
    n_layers = x.layers[STAGES.index(stage)]
    w_b, g_b, k_b = x.state_bytes
    dense_p, expert_p = bud.stage_params(n_layers, par.dense_per_layer, par.expert_per_layer,
                                         x.tp, x.ep, emb[stage], head[stage])
    weights, grads, optim = bud.sharded_states(dense_p, expert_p, c.zero, x.shard,
                                               par.expert_shard, w_b, g_b, k_b)
    weights, optim = bud.offloaded(weights, optim, c.offload_opt, c.offload_par, c.zero)
    live = bud.zero3_live_params(c.zero, par.largest_layer, x.tp, w_b)
    fl = _in_flight(c, x, index)
    k_full = full_recomputed(c, n_layers)
    base = np.where(c.recompute == act.RECOMPUTE_SELECTIVE, a[act.RECOMPUTE_SELECTIVE],
                    a[act.RECOMPUTE_NONE])
    layers_act = act.stage_activation_bytes(
        base, n_layers, fl, full_recompute_layers=k_full,
        full_recompute_layer_bytes=a[act.RECOMPUTE_FULL],
        working_bytes=np.where(k_full > 0, a[act.RECOMPUTE_NONE], 0.0))
    edge, logits = _edges(p, c, x, stage, fl)
    tensors = weights + grads + optim + live + layers_act + edge + logits
    budget, tp = p.budget, x.tp
    items = dict(weights=weights, gradients=grads, optimizer=optim, zero3_gathered_params=live,
                 activations=layers_act, embedding_output_activations=edge, logits=logits,
                 comm_buffers=np.full_like(tp, budget.comm_buffer_bytes),
                 cuda_context=np.full_like(tp, budget.context_bytes),
                 fragmentation=bud.fragmentation(tensors, budget.fragmentation_fraction))
    total = sum(items.values())
    arrays = {k: np.asarray(val, dtype=float) + 0.0 * tp for k, val in items.items()}
    return StageMemory(**arrays, total=total, params=dense_p + expert_p)


def memory(p: Problem, c: Candidates, x: Shape, a: dict[int, np.ndarray]) -> Memory:
    """Memory per stage (first, middle, last) and the peak against capacity minus the margin;
    a = layer_activations(p, c, x)."""
    par = _params(p, x)
    st = {name: _stage(p, c, x, par, a, name) for name in STAGES}
    capacity = p.hardware.gpu.memory_bytes
    usable = capacity * (1.0 - p.budget.margin_fraction)
    has_middle = x.pp > 2
    middle = np.where(has_middle, st["middle"].total, 0.0)
    peak = np.maximum(np.maximum(st["first"].total, st["last"].total), middle)
    return Memory(**st, has_middle=has_middle,
                  uneven_stages=x.layers[1] * x.pp - p.model.layers > 0,
                  peak=peak, peak_stage=np.select([peak == st["first"].total, peak == middle],
                                                  [0, 1], 2),
                  usable=np.full_like(x.tp, usable), capacity=np.full_like(x.tp, capacity),
                  headroom=usable - peak)


def evaluate(p: Problem, c: Candidates) -> Evaluation:
    """Memory per stage, step-time terms, throughput and rule predicates for every candidate.
    Bytes, seconds, FLOPs; arrays of len(c)."""
    x = shape(p, c)
    passes = structural_predicates(p, c, x.micro_batches)
    a = layer_activations(p, c, x)
    mem = memory(p, c, x, a)
    passes["fits-in-memory"] = mem.peak <= mem.usable
    t, thr = step_time(p, c, x, mem, a)
    valid = np.ones(len(c), dtype=bool)
    for name in RULE_NAMES:
        valid &= passes[name]
    return Evaluation(micro_batches=x.micro_batches, memory=mem, time=t, throughput=thr,
                      rules=RuleResults(passes={n: passes[n] for n in RULE_NAMES}, valid=valid))
