"""One layout, or a whole array of candidate layouts, to a typed Evaluation.

`evaluate` is the single code path: `estimate` calls it with one candidate, the search with
every candidate at once (numpy arrays, no per-candidate Python loop). The arithmetic lives in
engine/; this module gathers the model's, the hardware's and the layout's numbers into the
memory budget per stage (items listed in `StageMemory`), timing.py into the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np

from planner.evaluation.candidates import (IN_FLIGHT_COLUMNS, SCHEDULE_CODES, STATE_COLUMNS,
                         Candidates, Problem, Shape, shape)
from planner.engine import activations as act
from planner.engine import budget as bud
from planner.engine.arrays import FloatArray, Num, array
from planner.engine.params import mlp_params, norm_params
from planner.engine.pipeline import micro_batches_in_flight
from planner.evaluation import host
from planner.evaluation.distinct import on_distinct
from planner.evaluation.memory import (ITEMS, Stage, activation_terms, layer_activation_views,
                           replicated_layer_params, stage_activations, stage_memory,
                           stage_states)
from planner.evaluation.rules import RULE_NAMES, structural_predicates
from planner.evaluation.timing import StepTime, Throughput, step_time

STAGES = ("first", "middle", "last")
# A stage's budget items in print order (memory_model.ITEMS, then fragmentation and what lives
# outside the allocator); the first four are the states, known without the peak's moment.
ITEM_ORDER = ITEMS + ("fragmentation", "cuda_context", "comm_buffers")
STATE_ITEMS = ITEM_ORDER[:5]


@dataclass(frozen=True)
class StageMemory:
    """Per-GPU bytes of one pipeline stage at its peak, item by item (memory_model.ITEMS, then
    fragmentation and what lives outside the allocator), and the three views. The fields
    defaulting to None are the printout's detail, absent where evaluate(detail=False) ran."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    fp8_weight_cache: np.ndarray
    frozen_weights: np.ndarray  # a fine-tune's frozen base (no gradient, no optimizer state)
    total: np.ndarray           # device total (what nvidia-smi shows): the verdict's figure
    reserved: np.ndarray        # max reserved
    params: np.ndarray          # parameters this GPU holds (dense + experts), before ZeRO
    gathered_params: np.ndarray | None = None
    grad_buffers: np.ndarray | None = None
    activations: np.ndarray | None = None
    working: np.ndarray | None = None
    loss: np.ndarray | None = None
    optimizer_temp: np.ndarray | None = None
    fragmentation: np.ndarray | None = None
    cuda_context: np.ndarray | None = None
    comm_buffers: np.ndarray | None = None
    allocated: np.ndarray | None = None   # max allocated
    moment: np.ndarray | None = None      # index into engine.peak.PHASES of the allocated peak
    in_flight: np.ndarray | None = None   # micro-batches in flight at that moment

    def items(self) -> dict[str, np.ndarray]:
        """The budget items in print order (they sum to total)."""
        return {k: getattr(self, k) for k in ITEM_ORDER}


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class RuleResults:
    """Each rule's predicate per candidate (True = passes) and their conjunction."""

    passes: dict[str, np.ndarray]
    valid: np.ndarray

    def matrix(self) -> np.ndarray:
        """rules × candidates, in RULE_NAMES order (the order a rejection is attributed)."""
        return np.stack([self.passes[n] for n in RULE_NAMES])


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """Everything the model says about each candidate: memory, step time, throughput, rules."""

    micro_batches: np.ndarray
    memory: Memory
    time: StepTime
    throughput: Throughput
    rules: RuleResults

    def __len__(self) -> int:
        return len(self.micro_batches)


@dataclass(frozen=True, kw_only=True)
class _Params:
    """Per-layer and edge parameter counts, dense vs expert (the ZeRO/EP sharding differs)."""

    dense_per_layer: float
    expert_per_layer: float
    embedding: np.ndarray
    head: np.ndarray
    largest_layer: np.ndarray | float


def _params(p: Problem, x: Shape) -> _Params:
    """Dense and expert parameters per layer, embedding and output head per stage."""
    mod, h = p.model, p.model.hidden
    moe_share = mod.moe_layers / mod.layers
    # Expert weights proper are all experts' MLPs; the rest of an MoE layer is dense.
    experts_w = (mod.experts * float(mlp_params(h, mod.expert_width, mod.gated, mod.linear_bias))
                 if mod.is_moe else 0.0)
    moe_dense = mod.moe_layer_params() - experts_w if mod.is_moe else 0.0
    emb = x.vocab_padded * h + (mod.embedding_params() - mod.vocab * h)   # + learned positions
    head = np.where(mod.tied_embeddings & (x.pp == 1), 0.0, x.vocab_padded * h) \
        + mod.final_norm_params()
    # per TP rank below (…/ tp): the expert part is split over EP·ETP instead of TP
    largest = np.maximum(mod.layer_params(), moe_dense + experts_w * x.tp / (x.ep * x.etp)) \
        if mod.is_moe else float(mod.layer_params())
    return _Params(dense_per_layer=(1 - moe_share) * mod.layer_params() + moe_share * moe_dense,
                   expert_per_layer=moe_share * experts_w, embedding=emb, head=head,
                   largest_layer=largest)


def layer_activations(terms: dict[int, dict[str, Num]]) -> dict[int, FloatArray]:
    """Stored activation bytes of one layer for one micro-batch, per recompute mode, from
    memory_model.activation_terms (engine.activations.layer_activation_bytes), for the time
    model: without act.MEMORY_ONLY_TERMS, which its memory-pass proxy was not fitted with."""
    return {mode: array(act.terms_total({k: v for k, v in t.items()
                                         if k not in act.MEMORY_ONLY_TERMS}))
            for mode, t in terms.items()}


def _in_flight(c: Candidates, x: Shape, stage: str) -> np.ndarray:
    """Micro-batches whose activations a stage holds at once, by schedule; under interleaving
    chunk by chunk, the first stage's first chunk and the last stage's last one being where a
    layer is short (engine.stages.stage_layers)."""
    names = {code: name for name, code in SCHEDULE_CODES.items()}
    short_chunk = x.v - 1.0 if stage == "last" else 0.0
    return np.select([c.schedule == code for code in names],
                     [np.asarray(micro_batches_in_flight(
                         name, x.pp, x.micro_batches, _stage_index(x, stage), x.v,
                         x.layers[STAGES.index(stage)], short_chunk), dtype=float)
                      for code, name in names.items()])


def _stage_index(x: Shape, stage: str) -> Num:
    index: dict[str, Num] = {"first": 0.0, "middle": 1.0, "last": x.pp - 1.0}
    return index[stage]


def _edges(x: Shape, stage: str) -> tuple[np.ndarray, np.ndarray]:
    """(runs the embedding, runs the output layer) for the stage."""
    single = x.pp == 1
    has_emb = {"first": ~np.zeros_like(single), "middle": np.zeros_like(single),
               "last": single}[stage]
    has_head = {"first": single, "middle": np.zeros_like(single),
                "last": ~np.zeros_like(single)}[stage]
    return has_emb, has_head


def _stage_shape(p: Problem, x: Shape, par: _Params, stage: str) -> Stage:
    """One stage's parameters on this GPU: norms, row-parallel biases and the router whole on
    every TP rank; learned positions whole."""
    mod, tp = p.model, x.tp
    single = x.pp == 1
    has_emb, has_head = _edges(x, stage)
    n_layers = x.layers[STAGES.index(stage)]
    repl = replicated_layer_params(mod) + (mod.moe_layers / mod.layers * mod.hidden
                                           * mod.experts if mod.is_moe else 0.0)
    positions = mod.embedding_params() - mod.vocab * mod.hidden
    vocab_w = x.vocab_padded * mod.hidden
    emb = np.where(has_emb, vocab_w / tp + positions, 0.0)
    head_w = np.where(mod.tied_embeddings & single, 0.0, vocab_w)
    head = np.where(has_head, head_w / tp + mod.final_norm_params(), 0.0)
    dense_p, expert_p = bud.stage_params(n_layers, par.dense_per_layer - repl,
                                         par.expert_per_layer, tp, x.ep, etp=x.etp)
    dense_p = dense_p + n_layers * repl + emb + head
    if stage == "last" and x.mtp:
        dense_p, expert_p = dense_p + _mtp_dense(p, x), expert_p + _mtp_experts(p, x)
    return Stage(layers=n_layers, dense_params=dense_p, expert_params=expert_p,
                 layer_params=(par.largest_layer - repl) / tp + repl, root_params=emb + head,
                 head_params=head, has_embedding=has_emb, has_head=has_head)


def _mtp_dense(p: Problem, x: Shape) -> np.ndarray:
    """Dense parameters of the MTP modules on one GPU of the last stage (Megatron-Core builds
    them there, multi_token_prediction.py:345-353): per module its block outside the experts,
    the h×2h projection and three norms (model_parts.mtp_params), and, where the pipeline has
    more than one stage, a copy of the embedding the modules read (gpt_model.py:142)."""
    mod, h = p.model, p.model.hidden
    block = (mod.moe_layer_params() - mod.experts * mod.expert_mlp_params()
             if mod.is_moe else mod.layer_params())
    per = (block + 2.0 * h * h) / x.tp + 3.0 * norm_params(h, mod.norm_bias)
    embedding = np.where(x.pp > 1, x.vocab_padded * h / x.tp, 0.0)
    return array(x.mtp * per + embedding)


def _mtp_experts(p: Problem, x: Shape) -> np.ndarray:
    """The MTP modules' routed experts on one GPU: E expert MLPs over EP·ETP per module (an MoE
    block where the model's layers are)."""
    mod = p.model
    if not mod.is_moe:
        return np.zeros_like(x.tp)
    return array(x.mtp * mod.experts * float(mod.expert_mlp_params()) / (x.ep * x.etp))


def _state_part(p: Problem, u: Candidates) -> dict[str, dict[str, np.ndarray]]:
    """Per stage, memory_model.stage_states (the STATE_COLUMNS part)."""
    x = shape(p, u)
    par = _params(p, x)
    shapes = _dualpipe_copies(u, {name: _stage_shape(p, x, par, name) for name in STAGES})
    return {name: stage_states(p, u, p.fw, st) for name, st in shapes.items()}


MIRROR = {"first": "last", "middle": "middle", "last": "first"}


def _dualpipe_copies(u: Candidates, shapes: dict[str, Stage]) -> dict[str, Stage]:
    """Under DualPipe rank i holds stage i and its mirror p−1−i, one per direction (deepseek-ai/
    DualPipe @3da1bbe README: 2× parameters per device; dualpipe/dualpipe.py:13-22 takes two
    modules): the first and last ranks both hold the first and the last stage, a middle rank
    two middle stages; each copy with its own gradients and optimizer state."""
    rows = u.schedule == SCHEDULE_CODES["dualpipe"]
    if not np.any(rows):
        return shapes

    def both(name: str) -> Stage:
        a, b = shapes[name], shapes[MIRROR[name]]
        add = {k: np.where(rows, getattr(a, k) + getattr(b, k), getattr(a, k)) for k in (
            "layers", "dense_params", "expert_params", "root_params", "head_params")}
        return replace(a, **add, has_embedding=np.where(rows, a.has_embedding | b.has_embedding,
                                                        a.has_embedding),
                       has_head=np.where(rows, a.has_head | b.has_head, a.has_head))
    return {name: both(name) for name in shapes}


def _layer_part(p: Problem, u: Candidates) -> dict:
    """One layer's bytes per micro-batch, kept under each recompute mode (memory_model.
    layer_activation_views) and by mode for the time model: the LAYER_COLUMNS part, which
    no recompute knob changes (every mode is computed for every row)."""
    terms = activation_terms(p, u)
    return {"views": layer_activation_views(p, u, p.fw, terms),
            "per_mode": layer_activations(terms)}


def _activation_part(p: Problem, u: Candidates,
                     layer_groups: tuple[np.ndarray, int] | None = None) -> dict:
    """Per stage, memory_model.stage_activations, and the time model's per-layer bytes by
    recompute mode (the ACTIVATION_COLUMNS part); the layer's bytes once per LAYER_COLUMNS
    tuple (the recompute variants of a layout share them; `layer_groups` where known)."""
    x = shape(p, u)
    layer = on_distinct(u, p.layer_columns, lambda w: _layer_part(p, w), groups=layer_groups)
    views = layer["views"]
    out = {}
    for i, name in enumerate(STAGES):
        has_emb, has_head = _edges(x, name)
        st = SimpleNamespace(layers=x.held_layers(i), has_embedding=has_emb,
                             has_head=has_head)
        out[name] = stage_activations(p, u, p.fw, st, views)
    return {"stages": out, "per_mode": layer["per_mode"]}


def _in_flight_part(p: Problem, u: Candidates) -> dict[str, np.ndarray]:
    x = shape(p, u)
    return {name: _in_flight(u, x, name) for name in STAGES}


def _full(v: Num, n: int) -> np.ndarray:
    """v as a float array of n rows (+ 0.0: a −0.0 prints as 0)."""
    return np.broadcast_to(np.asarray(v, dtype=float), (n,)) + 0.0


def _stage(p: Problem, micro_batches: np.ndarray, s: dict, a: dict,
           in_flight: np.ndarray, detail: bool = True) -> StageMemory:
    """memory_model.stage_memory of one stage under the framework profile:
    items at the peak, the three views, the moment (without `detail`: the states, reserved and
    device total)."""
    n = len(micro_batches)
    m = stage_memory(p, p.fw, s, a, in_flight, micro_batches, detail)
    full = {k: _full(m[k], n) for k in ("reserved", "device_total")}
    if not detail:
        return StageMemory(**{k: _full(s[k], n) for k in STATE_ITEMS}, total=full["device_total"],
                           reserved=full["reserved"], params=_full(s["params"], n))
    budget = p.budget
    return StageMemory(**{k: _full(v, n) for k, v in m["items"].items()},
                       fragmentation=_full(m["fragmentation"], n),
                       cuda_context=_full(budget.context_bytes, n),
                       comm_buffers=_full(budget.comm_buffer_bytes, n),
                       total=full["device_total"], allocated=_full(m["allocated"], n),
                       reserved=full["reserved"], moment=_full(m["moment"], n),
                       in_flight=_full(m["in_flight_at_peak"], n), params=_full(s["params"], n))


def memory(p: Problem, c: Candidates, x: Shape, acts: dict | None = None,
           detail: bool = True) -> Memory:
    """Memory per stage (first, middle, last) and the peak (device total) against capacity
    minus the margin. `acts` is the activation part where the caller has it; without `detail`
    a stage holds its states, reserved and device total only (StageMemory)."""
    states = on_distinct(c, STATE_COLUMNS, lambda u: _state_part(p, u))
    acts = acts or on_distinct(c, p.activation_columns, lambda u: _activation_part(p, u))
    flight = on_distinct(c, IN_FLIGHT_COLUMNS, lambda u: _in_flight_part(p, u))
    return _memory(p, x, states, acts, flight, detail)


def _memory(p: Problem, x: Shape, states: dict, acts: dict, flight: dict,
            detail: bool, known: dict[str, StageMemory] | None = None) -> Memory:
    """memory() from its three parts, gathered to the rows of x (`known`: stages the caller
    has computed already)."""
    st = {name: (known or {}).get(name) or _stage(p, x.micro_batches, states[name],
                                                  acts["stages"][name], flight[name], detail)
          for name in STAGES}
    capacity, usable = p.hardware.gpu.memory_bytes, usable_bytes(p)
    has_middle = x.pp > 2
    middle = np.where(has_middle, st["middle"].total, 0.0)
    peak = np.maximum(np.maximum(st["first"].total, st["last"].total), middle)
    return Memory(**st, has_middle=has_middle,
                  uneven_stages=(x.layers[0] != x.layers[1]) | (x.layers[2] != x.layers[1]),
                  peak=peak, peak_stage=np.select([peak == st["first"].total, peak == middle],
                                                  [0, 1], 2),
                  usable=np.full_like(x.tp, usable), capacity=np.full_like(x.tp, capacity),
                  headroom=usable - peak)


def usable_bytes(p: Problem) -> float:
    """Capacity minus the margin: what a layout's peak must not exceed."""
    return p.hardware.gpu.memory_bytes * (1.0 - p.budget.margin_fraction)


def evaluate_memory(p: Problem, c: Candidates, detail: bool = True
                    ) -> tuple[Shape, dict, Memory]:
    """(shape, the activation part, memory) of every candidate: what evaluate needs before the
    step time, for a caller that keeps only the rows that fit before timing them."""
    x = shape(p, c)
    acts = on_distinct(c, p.activation_columns, lambda u: _activation_part(p, u))
    return x, acts, memory(p, c, x, acts, detail)


def evaluate(p: Problem, c: Candidates) -> Evaluation:
    """Memory per stage (with the printout's detail), step-time terms, throughput and rule
    predicates for every candidate. Bytes, seconds, FLOPs; arrays of len(c)."""
    x, acts, mem = evaluate_memory(p, c, True)
    passes = structural_predicates(p, c, x.micro_batches)
    # the whole host rule: the structural one counts the states alone (host.state_fits)
    passes["fits-in-host-memory"] = host.fits(p, c)
    passes["fits-in-memory"] = mem.peak <= mem.usable
    t, thr = step_time(p, c, x, mem, acts["per_mode"])
    valid = np.ones(len(c), dtype=bool)
    for name in RULE_NAMES:
        valid &= passes[name]
    return Evaluation(micro_batches=x.micro_batches, memory=mem, time=t, throughput=thr,
                      rules=RuleResults(passes={n: passes[n] for n in RULE_NAMES}, valid=valid))
