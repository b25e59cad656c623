"""One layout, or a whole array of candidate layouts, to a typed Evaluation.

`evaluate` is the single code path: `estimate` calls it with one candidate, the search with
every candidate at once (numpy arrays, no per-candidate Python loop). The arithmetic lives in
engine/; this module gathers the model's, the hardware's and the layout's numbers into the
memory budget per stage (items listed in `StageMemory`), timing.py into the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .candidates import Candidates, Problem, Shape, shape
from .engine import activations as act
from .engine import budget as bud
from .engine.params import mlp_params
from .engine.pipeline import micro_batches_in_flight
from .memory_model import Stage, replicated_layer_params, stage_memory
from .candidates import SCHEDULE_CODES
from .rules import RULE_NAMES, structural_predicates
from .timing import StepTime, Throughput, step_time

STAGES = ("first", "middle", "last")


@dataclass(frozen=True)
class StageMemory:
    """Per-GPU bytes of one pipeline stage at its peak, item by item (memory_model.ITEMS, then
    fragmentation and what lives outside the allocator), and the three views."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    fp8_weight_cache: np.ndarray
    gathered_params: np.ndarray
    grad_buffers: np.ndarray
    activations: np.ndarray
    working: np.ndarray
    loss: np.ndarray
    optimizer_temp: np.ndarray
    fragmentation: np.ndarray
    cuda_context: np.ndarray
    comm_buffers: np.ndarray
    total: np.ndarray           # device total (what nvidia-smi shows): the verdict's figure
    allocated: np.ndarray       # max allocated
    reserved: np.ndarray        # max reserved
    moment: np.ndarray          # index into engine.peak.PHASES of the allocated peak
    in_flight: np.ndarray       # micro-batches in flight at that moment
    params: np.ndarray          # parameters this GPU holds (dense + experts), before ZeRO

    def items(self) -> dict[str, np.ndarray]:
        """The budget items in print order (they sum to total)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("total", "allocated", "reserved", "moment", "in_flight",
                                  "params")}


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


def _stage(p: Problem, c: Candidates, x: Shape, par: _Params, stage: str) -> StageMemory:
    """One stage's parameters on this GPU (norms, row-parallel biases and the router whole on
    every TP rank; learned positions whole), then memory_model.stage_memory under the
    framework profile: items at the peak, the three views, the moment."""
    mod, tp = p.model, x.tp
    index = {"first": 0.0, "middle": 1.0, "last": x.pp - 1.0}[stage]
    single = x.pp == 1
    has_emb = {"first": ~np.zeros_like(single), "middle": np.zeros_like(single),
               "last": single}[stage]
    has_head = {"first": single, "middle": np.zeros_like(single),
                "last": ~np.zeros_like(single)}[stage]
    n_layers = x.layers[STAGES.index(stage)]
    repl = replicated_layer_params(mod) + (mod.moe_layers / mod.layers * mod.hidden
                                           * mod.experts if mod.is_moe else 0.0)
    positions = mod.embedding_params() - mod.vocab * mod.hidden
    vocab_w = x.vocab_padded * mod.hidden
    emb = np.where(has_emb, vocab_w / tp + positions, 0.0)
    head_w = np.where(mod.tied_embeddings & single, 0.0, vocab_w)
    head = np.where(has_head, head_w / tp + mod.final_norm_params(), 0.0)
    dense_p, expert_p = bud.stage_params(n_layers, par.dense_per_layer - repl,
                                         par.expert_per_layer, tp, x.ep)
    dense_p = dense_p + n_layers * repl + emb + head
    st = Stage(layers=n_layers, dense_params=dense_p, expert_params=expert_p,
               layer_params=(par.largest_layer - repl) / tp + repl, root_params=emb + head,
               head_params=head, in_flight=_in_flight(c, x, index), has_embedding=has_emb,
               has_head=has_head)
    m = stage_memory(p, c, p.fw, st, x.micro_batches)
    full = lambda v: np.asarray(v, dtype=float) + 0.0 * tp  # noqa: E731
    budget = p.budget
    return StageMemory(**{k: full(v) for k, v in m["items"].items()},
                       fragmentation=full(m["fragmentation"]),
                       cuda_context=full(budget.context_bytes),
                       comm_buffers=full(budget.comm_buffer_bytes),
                       total=full(m["device_total"]), allocated=full(m["allocated"]),
                       reserved=full(m["reserved"]), moment=full(m["moment"]),
                       in_flight=full(m["in_flight_at_peak"]), params=dense_p + expert_p)


def memory(p: Problem, c: Candidates, x: Shape) -> Memory:
    """Memory per stage (first, middle, last) and the peak (device total) against capacity
    minus the margin."""
    par = _params(p, x)
    st = {name: _stage(p, c, x, par, name) for name in STAGES}
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
    mem = memory(p, c, x)
    passes["fits-in-memory"] = mem.peak <= mem.usable
    t, thr = step_time(p, c, x, mem, a)
    valid = np.ones(len(c), dtype=bool)
    for name in RULE_NAMES:
        valid &= passes[name]
    return Evaluation(micro_batches=x.micro_batches, memory=mem, time=t, throughput=thr,
                      rules=RuleResults(passes={n: passes[n] for n in RULE_NAMES}, valid=valid))
