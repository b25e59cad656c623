"""The question (Problem) and the layouts to answer it for (Candidates, parallel numpy arrays).

`Candidates` is one column per layout knob; `estimate` passes one row, the search every row at
once. The integer codes below are how string knobs travel through the vectorised engine.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .engine import activations as act
from .engine import budget as bud
from .specs.hardware import HardwareProfile
from .specs.layout import Layout
from .specs.model import ModelSpec
from .specs.budget import MemoryBudget

SCHEDULE_CODES = {"1f1b": 0, "gpipe": 1, "interleaved": 2}
RECOMPUTE_CODES = {"none": act.RECOMPUTE_NONE, "selective": act.RECOMPUTE_SELECTIVE,
                   "full": act.RECOMPUTE_FULL}
OFFLOAD_CODES = {"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU, "nvme": bud.OFFLOAD_NVME}


@dataclass
class Candidates:
    """Candidate layouts as parallel numpy arrays (one entry per candidate)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    zero: np.ndarray
    shard: np.ndarray        # ZeRO sharding group; 0 = the whole data-parallel (× CP) group
    mb: np.ndarray
    chunks: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray  # -1 = all layers of the stage
    schedule: np.ndarray
    offload_opt: np.ndarray
    offload_par: np.ndarray

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> "Candidates":
        """One column per knob, one row per layout."""
        def col(f):
            return np.array([f(x) for x in layouts], dtype=np.int64)
        return cls(tp=col(lambda x: x.tp), pp=col(lambda x: x.pp), dp=col(lambda x: x.dp),
                   cp=col(lambda x: x.cp), ep=col(lambda x: x.ep), zero=col(lambda x: x.zero),
                   shard=col(lambda x: x.shard_group or 0), mb=col(lambda x: x.micro_batch),
                   chunks=col(lambda x: x.chunks), sp=col(lambda x: int(x.sequence_parallel)),
                   recompute=col(lambda x: RECOMPUTE_CODES[x.recompute]),
                   recompute_layers=col(lambda x: -1 if x.recompute_layers is None
                                        else x.recompute_layers),
                   schedule=col(lambda x: SCHEDULE_CODES[x.schedule]),
                   offload_opt=col(lambda x: OFFLOAD_CODES[x.offload_optimizer]),
                   offload_par=col(lambda x: OFFLOAD_CODES[x.offload_params]))

    def take(self, idx) -> "Candidates":
        """The candidates at the given indices (or boolean mask)."""
        return Candidates(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def layout(self, i: int, precision: str, optimizer: str) -> Layout:
        """Row i as a Layout."""
        inv = {v: k for k, v in SCHEDULE_CODES.items()}
        rec = {v: k for k, v in RECOMPUTE_CODES.items()}
        off = {v: k for k, v in OFFLOAD_CODES.items()}
        rl = int(self.recompute_layers[i])
        return Layout(tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]),
                      cp=int(self.cp[i]), ep=int(self.ep[i]), zero=int(self.zero[i]),
                      shard_group=int(self.shard[i]) or None, micro_batch=int(self.mb[i]),
                      schedule=inv[int(self.schedule[i])], chunks=int(self.chunks[i]),
                      sp=bool(self.sp[i]), recompute=rec[int(self.recompute[i])],
                      recompute_layers=None if rl < 0 else rl,
                      offload_optimizer=off[int(self.offload_opt[i])],
                      offload_params=off[int(self.offload_par[i])],
                      precision=precision, optimizer=optimizer)


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

    @property
    def flash(self) -> bool:
        """Flash (fused, causal) attention: stated, else on unless the model uses dropout."""
        return (not self.model.dropout) if self.flash_attention is None else self.flash_attention


# Precision recipe → the dtype whose peak FLOP/s the GEMMs run at.
COMPUTE_DTYPE = {"mixed": "bf16", "mixed-fp32-grads": "bf16", "fp8": "fp8", "fp32": "tf32",
                 "bf16-pure": "bf16"}


@dataclass(frozen=True)
class Shape:
    """Per-candidate quantities the memory and the time model both use (float arrays)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    mb: np.ndarray
    v: np.ndarray
    micro_batches: np.ndarray   # m = B / (b · DP), fractional where the batch does not divide
    layers: tuple[np.ndarray, np.ndarray, np.ndarray]   # (first, middle, last) stage
    shard: np.ndarray           # ZeRO sharding degree
    vocab_padded: np.ndarray
    state_bytes: tuple[float, float, float]   # (weight, gradient, K) bytes per parameter
    act_bytes: float


def shape(p: Problem, c: Candidates) -> Shape:
    """The layout columns as floats plus what follows from them: micro-batches per step, layers
    per stage (engine.stages), shard degree, padded vocabulary, bytes per parameter."""
    from .engine.budget import padded_vocab
    from .engine.memory import optimizer_bytes_per_param
    from .engine.stages import stage_layers

    f64 = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, dp, cp, ep, mb, v = (f64(x) for x in (c.tp, c.pp, c.dp, c.cp, c.ep, c.mb, c.chunks))
    first, middle, last = stage_layers(p.model.layers, pp, v)
    return Shape(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, mb=mb, v=v,
                 micro_batches=p.global_batch / (mb * dp),
                 layers=(f64(first), f64(middle), f64(last)),
                 shard=np.where(c.shard > 0, f64(c.shard), dp * cp),
                 vocab_padded=f64(padded_vocab(p.model.vocab, tp)),
                 state_bytes=optimizer_bytes_per_param(p.precision, p.optimizer),
                 act_bytes=4.0 if p.precision == "fp32" else 2.0)


def full_recomputed(c: Candidates, n_layers: np.ndarray) -> np.ndarray:
    """Layers of a stage that full recomputation redoes (all, or --recompute-layers of them)."""
    return np.where(c.recompute == act.RECOMPUTE_FULL,
                    np.where(c.recompute_layers < 0, n_layers,
                             np.minimum(c.recompute_layers, n_layers)), 0.0)
