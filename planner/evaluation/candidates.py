"""The question (Problem) and the layouts to answer it for (Candidates, parallel numpy arrays).

`Candidates` is one column per layout knob; `estimate` passes one row, the search every row at
once. The integer codes below are how string knobs travel through the vectorised engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from planner.engine import activations as act
from planner.engine import step_time as st
from planner.engine.fp8 import RECIPES, Recipe, recipe_peak
from planner.engine.moe import load_factor
from planner.errors import InputError, named
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import KNOB, KNOBS, Knob, Layout
from planner.specs.model import ModelSpec
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import FULL, Tuning, fp8_recipe
from planner.specs.framework import FrameworkProfile, load_framework
from planner.evaluation.distinct import replaced

# The search axes: one int64 column per knob that has one (specs.knobs.KNOBS), in its order.
COLUMNS = tuple(k for k in KNOBS if k.column)
COLUMN_NAMES = tuple(k.column for k in COLUMNS)


def _without(*names: str) -> tuple[str, ...]:
    return tuple(n for n in COLUMN_NAMES if n not in names)


# The columns each part of the cost model reads (distinct.on_distinct runs a part once per
# distinct tuple of them), each as every column but those that cannot change it, so a new knob
# counts everywhere until someone says where it does not: the states and the ZeRO / DP
# collectives ignore micro-batch, SP and recompute (not the schedule: DualPipe holds two
# stages' parameters on a rank); a micro-batch's activations ignore
# DP, EP (but where a stated routing imbalance reads it: Problem.activation_columns), ZeRO,
# sharding, offload and the schedule; the per-layer TP, CP, EP and PP traffic
# ignores ZeRO, sharding, offload and the schedule; the micro-batches in flight depend on the
# schedule, PP, interleaving, the stage split and m = B / (mb · DP) alone.
STATE_COLUMNS = _without("mb", "sp", "recompute", "recompute_layers")
ACTIVATION_COLUMNS = _without("dp", "ep", "zero", "shard", "schedule", "offload_opt",
                              "offload_par")
# A layer's bytes under each recompute mode (every mode computed for every row) ignore the
# recompute knobs as well.
# The recompute knobs: a layout's rows differ in these alone once it is crossed with them
# (crossing.with_recomputes).
RECOMPUTE_COLUMNS = ("recompute", "recompute_layers")
LAYER_COLUMNS = tuple(n for n in ACTIVATION_COLUMNS if n not in RECOMPUTE_COLUMNS)
AXIS_COLUMNS = _without("zero", "shard", "schedule", "offload_opt", "offload_par")
# The step floor (timing.step_floor: the compute, the TP, CP, EP and PP terms, the schedule's
# composition) reads neither the ZeRO states nor their sharding and offload.
STEP_FLOOR_COLUMNS = _without("zero", "shard", "offload_opt", "offload_par")
IN_FLIGHT_COLUMNS = _without("tp", "cp", "ep", "zero", "shard", "sp", "recompute",
                             "recompute_layers", "offload_opt", "offload_par")


def _codes(name: str) -> dict[str, int]:
    """The Candidates code of each choice of the string knob `name`."""
    codes = KNOB[name].codes
    if codes is None:
        raise ValueError(f"layout knob {name}: not a string knob, no codes")
    return codes


SCHEDULE_CODES = _codes("schedule")
RECOMPUTE_CODES = _codes("recompute")
OFFLOAD_CODES = _codes("offload_optimizer")


@dataclass(frozen=True)
class Candidates:
    """Candidate layouts as parallel int64 arrays (one entry per candidate), a column per knob
    that has one (KNOBS' ``column``, in their order; tests/test_layout_knobs.py checks they
    agree): shard 0 = the whole data-parallel (× CP) group; recompute_layers -1 = all layers of
    the stage; string knobs as their codes above."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    zero: np.ndarray
    shard: np.ndarray
    mb: np.ndarray
    schedule: np.ndarray
    chunks: np.ndarray
    first: np.ndarray
    last: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    offload_opt: np.ndarray
    offload_par: np.ndarray

    @classmethod
    def of(cls, **columns: np.ndarray) -> Candidates:
        """Candidates from some columns: a column not given (the search builds only the axes it
        varies) holds the knob's default for every candidate."""
        n = len(next(iter(columns.values())))
        return cls(**{k.column: columns[k.column] if k.column in columns else
                      np.full(n, default_code(k), dtype=np.int64) for k in COLUMNS})

    def __len__(self) -> int:
        # the recompute column: one every Candidates holds as an array (a lazy crossing too)
        return len(self.recompute)

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> Candidates:
        """One column per knob, one row per layout."""
        return cls(**{k.column: np.array([encode(k, x) for x in layouts], dtype=np.int64)
                      for k in COLUMNS})

    def take(self, idx: Any) -> Candidates:
        """The candidates at the given indices (or boolean mask)."""
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return replaced(self, {n: getattr(self, n).take(idx) for n in COLUMN_NAMES})

    def layout(self, i: int, precision: str, optimizer: str, tuning: Tuning = FULL) -> Layout:
        """Row i as a Layout (with the fixed recipe: precision, optimizer, what trains)."""
        return Layout(**{k.name: decode(k, int(getattr(self, k.column)[i])) for k in COLUMNS},
                      precision=precision, optimizer=optimizer, **tuning.layout_fields())


def encode(k: Knob, layout: Layout) -> int:
    """The Candidates column's code for knob k of one layout."""
    value = getattr(layout, k.source or k.name)
    if k.codes is not None:
        return k.codes[value]
    if value is None:
        assert k.none_code is not None, k.name
        return k.none_code
    return int(value)


def default_code(k: Knob) -> int:
    """The Candidates code of knob k's default value (sp has none: its default depends on TP)."""
    if k.codes is not None:
        return k.codes[k.default]
    if k.default is not None:
        return int(k.default)
    if k.none_code is None:
        raise ValueError(f"layout knob {k.name}: no fixed default code; give its column")
    return k.none_code


def decode(k: Knob, code: int) -> Any:
    """The Layout value of knob k for a Candidates code (the inverse of ``encode``)."""
    if k.codes is not None:
        return {c: name for name, c in k.codes.items()}[code]
    if k.none_code is not None and code == k.none_code:
        return None
    return bool(code) if k.type in (bool, bool | None) else code


@dataclass(frozen=True)
class Problem:
    """The fixed part of a question: what is trained, on what, with which batch."""

    model: ModelSpec
    hardware: HardwareProfile
    gpus: int
    seq_len: int
    global_batch: int
    precision: str = "mixed"
    optimizer: str = "adam"
    budget: MemoryBudget = MemoryBudget()
    flash_attention: bool | None = None  # None: on unless the model is a dropout GPT (papers)
    framework: FrameworkProfile | None = None  # None: the default profile (specs.framework)
    tuning: Tuning = FULL  # what trains: full, or LoRA on a frozen (maybe quantised) base

    def __post_init__(self) -> None:
        """One low-precision recipe: --precision fp8 alone is tensorwise, --fp8 RECIPE makes
        the precision fp8; refused where the GPU cannot run the recipe."""
        given = self.tuning.fp8
        recipe = usable_recipe(self.hardware, self.precision, given)
        if recipe != given:
            object.__setattr__(self, "tuning", replace(self.tuning, fp8=recipe))
        if recipe != "none":
            object.__setattr__(self, "precision", "fp8")

    @property
    def gather_bytes(self) -> float:
        """Bytes per parameter a sharded-DP all-gather moves and holds gathered: the
        framework's gather dtype, or the recipe's stored bytes where the framework casts the
        shard to fp8 before the all-gather (torchao fsdp_utils.py:28-80; tensorwise only,
        config.py:300-306; the norms it also gathers are ~0.01 % of a block), or where the
        weights are fp8 parameters (Megatron-Core fp8_param_gather: the DP all-gather moves the
        uint8 parameter buffer, core/distributed/distributed_data_parallel.py:160-167)."""
        r = self.recipe
        if r is not None and ((r.fsdp_all_gather and self.fw.time.fp8_all_gather)
                              or (self.fw.memory.fp8_params and not self.tuning.frozen)):
            return r.element_bytes
        return self.fw.time.gather_bytes

    @property
    def ep_route(self) -> st.EpRoute:
        """How the MoE tokens travel: the model's group limit and the framework's dispatcher;
        under fp8 an fp8 dispatcher sends 1×128-block fp8 with fp32 scales (DeepEP's, the
        blockwise recipe's activation element)."""
        m, t = self.model, self.fw.time
        fp8 = self.precision == "fp8" and t.ep_fp8_dispatch
        return st.EpRoute(float(m.experts), float(m.route_groups), float(m.route_group_topk),
                          t.ep_dispatcher == "deepep",
                          RECIPES["blockwise"].element_bytes if fp8 else None,
                          t.ep_dispatcher == "allgather")

    def moe_load(self, ep: Any) -> Any:
        """Routed rows on the busiest EP rank over the mean (engine.moe.load_factor): the
        framework's capacity factor where it pads to one, else its stated imbalance at EP > 1."""
        t = self.fw.time
        return load_factor(ep, t.ep_load_imbalance, t.moe_capacity_factor)

    @property
    def attention_span(self) -> int:
        """The sequence a query's keys come from: a packed document's tokens (tuning.doc_tokens),
        else the whole sequence's."""
        return min(self.seq_len, self.tuning.doc_tokens or self.seq_len)

    @property
    def activation_columns(self) -> tuple[str, ...]:
        """ACTIVATION_COLUMNS, with EP where the busiest rank's permuted activations read it (a
        MoE routed dropless with a stated imbalance, moe_load)."""
        t = self.fw.time
        reads_ep = self.model.is_moe and not t.moe_capacity_factor and t.ep_load_imbalance != 1
        return ACTIVATION_COLUMNS + ("ep",) if reads_ep else ACTIVATION_COLUMNS

    @property
    def layer_columns(self) -> tuple[str, ...]:
        """LAYER_COLUMNS, with EP as activation_columns has it."""
        return tuple(n for n in self.activation_columns if n not in RECOMPUTE_COLUMNS)

    @property
    def recipe(self) -> Recipe | None:
        """The low-precision recipe of the linears' GEMMs (None: bf16)."""
        return None if self.tuning.fp8 == "none" else RECIPES[self.tuning.fp8]

    @property
    def fw(self) -> FrameworkProfile:
        """The framework profile whose implementation the time model follows: the one the
        question names, else the default (no state outside the question)."""
        return self.framework if self.framework is not None else load_framework(None)

    def resolved(self) -> "Problem":
        """This problem with its framework profile named: `fw` looks the default profile up on
        every read (a few hundred times a search, ~30 an estimate); it is the same throughout."""
        return self if self.framework is not None else replace(self, framework=self.fw)

    @property
    def flash(self) -> bool:
        """Flash (fused, causal) attention: stated, else on unless the model uses dropout."""
        return (not self.model.dropout) if self.flash_attention is None else self.flash_attention


def usable_recipe(hardware: HardwareProfile, precision: str | None, fp8: str) -> str:
    """The recipe a layout states (specs.finetune.fp8_recipe: --fp8, or tensorwise for
    --precision fp8 alone), refused where the GPU cannot run it; the readers of plan files and
    engine configs call it at the key that gave the recipe, before anything is estimated."""
    recipe = fp8_recipe(precision, fp8)
    if recipe != "none":
        check_recipe(hardware, recipe)
    return recipe


def check_recipe(hardware: HardwareProfile, recipe: str) -> None:
    """A recipe the GPU's tensor cores run natively (its profile's fp8_recipes, with a rate in
    its peak_tflops), else one line naming --fp8 (tensorwise is also --precision fp8's) and
    what the GPU runs."""
    gpu = hardware.gpu
    if recipe in gpu.fp8_recipes and recipe_peak(gpu.peak_flops, RECIPES[recipe]) is not None:
        return
    runs = ", ".join(r for r in gpu.fp8_recipes if recipe_peak(gpu.peak_flops, RECIPES[r]))
    what = "tensorwise (--precision fp8)" if recipe == "tensorwise" else recipe
    raise InputError(named("fp8"), f"{what} is not allowed on {hardware.name} "
                     f"({gpu.name}): its tensor cores run " + (
                         f"the fp8 recipes {runs}" if runs else "no fp8 (use none)"))


# Precision recipe → the dtype whose peak FLOP/s the GEMMs run at.
COMPUTE_DTYPE = {"mixed": "bf16", "mixed-fp32-grads": "bf16", "fp8": "fp8", "fp32": "tf32",
                 "bf16-pure": "bf16"}


@dataclass(frozen=True, kw_only=True)
class Shape:
    """Per-candidate quantities the memory and the time model both use (float arrays)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray             # expert tensor parallel (TP where the knob is None)
    expert_dp: np.ndarray       # TP·CP·DP / (ETP·EP): the experts' data-parallel group
    mb: np.ndarray
    v: np.ndarray
    micro_batches: np.ndarray   # m = B / (b · DP), fractional where the batch does not divide
    layers: tuple[np.ndarray, np.ndarray, np.ndarray]   # (first, middle, last) stage
    mtp: float                  # MTP modules, each a layer more on the last stage
    shard: np.ndarray           # ZeRO sharding degree
    vocab_padded: np.ndarray
    state_bytes: tuple[float, float, float]   # (weight, gradient, K) bytes per parameter
    act_bytes: float

    def held_layers(self, stage: int) -> np.ndarray:
        """Layers whose activations stage 0 (first), 1 (middle) or 2 (last) keeps: its
        transformer layers, and on the last stage one per MTP module (priced as a layer)."""
        return self.layers[stage] + self.mtp if stage == 2 else self.layers[stage]


def shape(p: Problem, c: Candidates) -> Shape:
    """The layout columns as floats plus what follows from them: micro-batches per step, layers
    per stage (engine.stages), shard degree, padded vocabulary, bytes per parameter."""
    from planner.engine.budget import padded_vocab
    from planner.engine.memory import optimizer_bytes_per_param
    from planner.engine.stages import stage_layers

    f64 = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep, mb, v = (f64(x) for x in (c.tp, c.pp, c.dp, c.cp, c.ep, c.mb, c.chunks))
    etp = np.where(c.etp > 0, f64(c.etp), tp)
    first, middle, last = stage_layers(p.model.layers, pp, v, c.first, c.last)
    return Shape(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp,
                 expert_dp=np.maximum(tp * cp * dp / (etp * ep), 1.0), mb=mb, v=v,
                 micro_batches=p.global_batch / (mb * dp),
                 layers=(f64(first), f64(middle), f64(last)), mtp=float(p.model.mtp_layers),
                 shard=np.where(c.shard > 0, f64(c.shard), dp * cp),
                 vocab_padded=f64(padded_vocab(p.model.vocab, tp)),
                 state_bytes=optimizer_bytes_per_param(p.precision, p.optimizer),
                 act_bytes=4.0 if p.precision == "fp32" else 2.0)


def full_recomputed(c: Candidates, n_layers: np.ndarray) -> np.ndarray:
    """Layers of a stage that full recomputation redoes (all, or --recompute-layers of them)."""
    return np.where(c.recompute == act.RECOMPUTE_FULL,
                    np.where(c.recompute_layers < 0, n_layers,
                             np.minimum(c.recompute_layers, n_layers)), 0.0)
