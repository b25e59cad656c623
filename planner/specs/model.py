"""The model being planned: a decoder-only transformer shape, and what it costs in parameters/FLOPs.

All arithmetic lives in ``planner.engine.params``; this module only says which pieces a model
has. Layout assumed: embedding (+ learned positions), L blocks of [norm, attention, norm, MLP],
final norm, LM head. MoE models replace the MLP by routed experts after ``dense_layers`` dense
blocks (DeepSeek's ``first_k_dense_replace``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from planner.engine import params as P
from planner.engine.arrays import Num
from planner.errors import InputError, named
from planner.specs import model_parts as MP
from planner.specs.records import FORBID, adapter

Positive = Annotated[int, Field(gt=0)]   # a positive integer (pydantic's PositiveInt)
NonNegative = Annotated[int, Field(ge=0)]


@functools.lru_cache(maxsize=256)
def _counted(spec: "ModelSpec", active: bool) -> int:
    # A frozen spec's count depends on its fields alone, which key the cache (a `fit` asks
    # ~45 times, 30 µs each: the nearest preset's scan, resilience, the estimate).
    return spec._count(active)


def _head_dim(hidden: Any, heads: Any) -> Any:
    """head_dim when not given: hidden ÷ heads, which must divide."""
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads}) "
                         "when head_dim is not given")
    return hidden // heads


def fill_defaults(data: Any) -> Any:
    """A shape's kv_heads and head_dim where it leaves them out: kv_heads = heads (multi-head
    attention), head_dim = hidden ÷ heads. Optional on input, always concrete on the spec, so
    downstream code never repeats the "None means ..." rule."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    heads, hidden = data.get("heads"), data.get("hidden")
    if data.get("kv_heads") is None and heads is not None:
        data["kv_heads"] = heads
    if data.get("head_dim") is None and isinstance(heads, int) and isinstance(hidden, int) \
            and heads > 0 and hidden > 0:
        data["head_dim"] = _head_dim(hidden, heads)
    return data


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    ``mlp``: "gelu" is any plain 2-matrix MLP (GeLU, ReLU as in OPT); "swiglu" any gated
    3-matrix MLP (SwiGLU, GeGLU). ``linear_bias`` covers attention-output and MLP biases
    (GPT-style); ``qkv_bias`` the q/k/v projections only (Qwen2 sets just this one).
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    name: str | None = None
    layers: Positive
    hidden: Positive
    heads: Positive
    kv_heads: Positive   # fill_defaults: heads (multi-head attention)
    head_dim: Positive   # fill_defaults: hidden // heads
    ffn: Positive    # dense-layer MLP width
    mlp: Literal["gelu", "swiglu"]
    vocab: Positive
    tied_embeddings: bool
    position: Literal["learned", "rope", "alibi", "none"]
    max_positions: Annotated[int | None, Field(gt=0)] = None
    qkv_bias: bool = False
    linear_bias: bool = False
    norm: Literal["layernorm", "rmsnorm"]
    dropout: bool = False
    experts: NonNegative = 0
    experts_per_token: NonNegative = 0
    expert_ffn: Annotated[int | None, Field(gt=0)] = None
    shared_experts: NonNegative = 0
    dense_layers: NonNegative = 0
    # ---- architecture beyond the Llama block (specs/model_parts.py counts them) ----
    moe_every: Positive = 1            # MoE in layers with (i+1) % k == 0 (Qwen2-MoE, Llama 4)
    mlp_only_layers: tuple[NonNegative, ...] = ()   # dense despite the pattern (Qwen2-MoE)
    shared_expert_ffn: Annotated[int | None, Field(gt=0)] = None   # default expert width
    shared_expert_gate: bool = False   # Qwen2-MoE's sigmoid gate, Linear(h, 1)
    router_bias: bool = False          # GPT-OSS
    route_groups: NonNegative = 0      # n_group: experts in equal groups (0: no group limit)
    route_group_topk: NonNegative = 0  # topk_group: groups a token may use (DeepSeek-V3: 4/8)
    out_bias: bool = False             # attention output bias alone (Llama attention_bias)
    layer_norms: Positive = 2          # norms per block (Gemma 2/3: 4)
    qk_norm: Literal["none", "head", "full"] = "none"   # Qwen3/Gemma 3 per head, OLMo 2 full
    attention_sinks: bool = False      # GPT-OSS: one learned logit per head
    q_lora_rank: Annotated[int | None, Field(ge=0)] = None   # MLA (0: direct q projection)
    kv_lora_rank: Annotated[int | None, Field(gt=0)] = None  # MLA when set
    qk_rope_dim: NonNegative = 0       # MLA decoupled rope dims (head_dim = nope + rope)
    v_head_dim: Annotated[int | None, Field(gt=0)] = None    # default head_dim
    window: Annotated[int | None, Field(gt=0)] = None        # local attention span (tokens)
    window_kind: Literal["sliding", "chunked"] = "sliding"
    global_every: NonNegative = 0      # with a window: layers (i+1) % k == 0 attend globally
    mtp_layers: NonNegative = 0        # multi-token-prediction modules (not in the total)
    vision_params: NonNegative = 0     # a vision tower beside the language model, not planned
    inferred: bool = False
    source: str

    @classmethod
    def with_defaults(cls, **fields: Any) -> ModelSpec:
        """A spec from a shape that may leave kv_heads and head_dim out (``fill_defaults``)."""
        return cls(**fill_defaults(fields))

    def __post_init__(self) -> None:
        """The cross-field rules (ValueError; at the boundary pydantic reports it as its own)."""
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.position == "learned" and self.max_positions is None:
            raise ValueError("learned positions need max_positions (size of the position table)")
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise ValueError(f"experts_per_token must be in 1..experts ({self.experts}), "
                                 f"got {self.experts_per_token}")
            if self.route_groups and (self.experts % self.route_groups
                                      or not 1 <= self.route_group_topk <= self.route_groups):
                raise ValueError(f"route_groups ({self.route_groups}) must divide experts and "
                                 f"route_group_topk ({self.route_group_topk}) be in 1..groups")
            if self.moe_layers < 1:
                raise ValueError(f"no MoE layer: dense_layers ({self.dense_layers}), moe_every "
                                 f"({self.moe_every}) and mlp_only_layers leave none of the "
                                 f"{self.layers} layers")
        elif self.experts_per_token or self.shared_experts or self.dense_layers \
                or self.expert_ffn is not None:
            raise ValueError("experts_per_token, shared_experts, dense_layers and expert_ffn "
                             "need experts > 0")
        if self.is_mla and (self.kv_heads != self.heads or self.qk_rope_dim >= self.head_dim):
            raise ValueError("MLA (kv_lora_rank) needs kv_heads = heads and head_dim = qk nope "
                             f"+ rope dims above qk_rope_dim ({self.qk_rope_dim})")
        if self.global_every and self.window is None:
            raise ValueError("global_every needs a window")

    # ---- structure -------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    @property
    def norm_bias(self) -> bool:
        return self.norm == "layernorm"

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def qk_nope_dim(self) -> int:
        """MLA's per-head query/key width without rotary position (head_dim − rope dims)."""
        return self.head_dim - self.qk_rope_dim

    @property
    def value_dim(self) -> int:
        """Per-head width of V and of the attention output (MLA's v_head_dim)."""
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    @property
    def attn_dim(self) -> float:
        """Mean of the concatenated query-key and value widths, a·(d_qk + d_v)/2: the
        attention-score FLOPs 4·s·(a·d) take QKᵀ over d_qk and scores·V over d_v (a·d for GQA)."""
        return self.heads * (self.head_dim + self.value_dim) / 2

    @property
    def moe_layers(self) -> int:
        return MP.moe_layer_count(self)

    @property
    def dense_layer_count(self) -> int:
        return self.layers - self.moe_layers

    @property
    def expert_width(self) -> int:
        return self.expert_ffn if self.expert_ffn is not None else self.ffn

    def moe_layer_ids(self) -> tuple[int, ...]:
        """The indices of the MoE layers (0-based), the per-layer pattern."""
        return MP.moe_layer_ids(self)

    def layer_windows(self) -> tuple[int, ...]:
        """Per layer, the attention span in tokens (0: full attention)."""
        return MP.layer_windows(self)

    # ---- parameter counts (exact integers) -----------------------------------------------------

    def attention_layer_params(self) -> int:
        """One block's attention with its norms (the block's ``layer_norms``)."""
        return MP.attention_block_params(self)

    def layer_params(self) -> int:
        """One dense block: attention + MLP of width ``ffn`` + the block's norms."""
        return int(self.attention_layer_params()
                   + P.mlp_params(self.hidden, self.ffn, self.gated, self.linear_bias))

    def moe_layer_params(self, active: bool = False) -> int:
        """One MoE block: attention + all experts (or top-k if ``active``) + shared + router + norms."""
        if not self.is_moe:
            return 0
        return int(self.attention_layer_params() + MP.moe_mlp(self, active))

    def expert_mlp_params(self) -> int:
        """One routed expert's MLP (weights and biases)."""
        return int(P.mlp_params(self.hidden, self.expert_width, self.gated, self.linear_bias))

    def routed_expert_params(self) -> int:
        """The routed experts' parameters (what expert parallelism splits): MoE layers ×
        experts × one expert MLP; shared experts and the router stay replicated."""
        return self.moe_layers * self.experts * self.expert_mlp_params() if self.is_moe else 0

    def embedding_params(self) -> int:
        """Token embedding plus learned position table (0 rows for rope/alibi/none)."""
        positions = self.max_positions or 0 if self.position == "learned" else 0
        return int(P.embedding_params(self.vocab, self.hidden)
                   + P.position_params(positions, self.hidden))

    def head_params(self) -> int:
        """LM head weights not shared with the embedding (0 when tied)."""
        return int(P.lm_head_params(self.vocab, self.hidden, self.tied_embeddings))

    def final_norm_params(self) -> int:
        return int(P.norm_params(self.hidden, self.norm_bias))

    def _count(self, active: bool) -> int:
        # two block kinds, so a product per kind (a per-layer list is 10^7 ints at 10^7 layers)
        blocks = (self.dense_layer_count * self.layer_params()
                  + self.moe_layers * self.moe_layer_params(active))
        return (self.embedding_params() + blocks + self.final_norm_params() + self.head_params())

    def param_count(self) -> int:
        """All trainable parameters of the language model (transformers' count: the MTP modules
        and a vision tower are stated apart, as the published totals do)."""
        return _counted(self, False)

    def active_param_count(self) -> int:
        """Parameters one token uses: as param_count but MoE blocks hold only top-k experts."""
        return _counted(self, True)

    def mtp_param_count(self) -> int:
        """The multi-token-prediction modules (DeepSeek-V3 Sec. 2.2), beside the total."""
        return MP.mtp_params(self)

    # ---- FLOPs -------------------------------------------------------------------------------

    def matmul_params_per_token(self) -> int:
        """Weight-matrix entries each token is multiplied through (incl. LM head, excl. embedding)."""
        return MP.matmul_params_per_token(self)

    def activation_ffn(self, routed_load: Num = 1.0) -> Num:
        """Mean MLP width a token's activations pass through per layer: ffn in dense blocks,
        top-k routed (× their load over the mean) + shared expert widths in MoE blocks,
        averaged over the layers."""
        return MP.activation_ffn(self, routed_load)

    def score_dim(self, seq_len: float, causal: bool = False) -> float:
        """attn_dim × the layers' mean share of full-attention keys (windows): the a·d the
        score term 4·s·(a·d) takes so windowed layers cost their window (``mean_keys``)."""
        return MP.score_dim(self, seq_len, causal)

    def training_flops_per_token(self, seq_len: int, causal: bool = False) -> float:
        """Model FLOPs (fwd + bwd, no recompute) per token at sequence length ``seq_len``."""
        return float(P.training_flops_per_token(self.matmul_params_per_token(), self.layers,
                                                seq_len, self.score_dim(seq_len, causal), causal))

    def describe(self) -> str:
        """One line for reports; inferred shapes say so, so nobody mistakes them for their model."""
        text = (f"{self.name or 'model'}: {self.param_count() / 1e9:.2f}B params "
                f"({MP.kind(self)}), L={self.layers} h={self.hidden} "
                f"heads={self.heads}/{self.kv_heads} ffn={self.ffn} vocab={self.vocab} "
                f"[{self.source}]")
        return ("INFERRED " + text) if self.inferred else text


# ---- shape from a bare parameter count ----------------------------------------------------------

INFER_VOCAB = 128256          # Llama-3 tokenizer: large modern vocabularies dominate small models
INFER_HEAD_DIM = 128          # Llama, GPT-3 ≥ 6.7B, Mistral, Qwen2-72B
INFER_KV_HEADS = 8            # Llama-2-70B / Llama-3 GQA groups; = heads when heads ≤ 8
INFER_ASPECT = 128            # hidden/layers: 4096/32, 12288/96, 16384/126 in Llama-3 and GPT-3
INFER_HIDDEN_STEP = 1024      # hidden a multiple of 8·head_dim, so heads divide by 8 (TP ≤ 8)
INFER_MIN, INFER_MAX = 3e8, 1e14

INFER_RULE = ("shape inferred from a bare parameter count: Llama-style dense decoder (SwiGLU, "
              "RMSNorm, RoPE, untied, vocab 128256, head_dim 128, up to 8 KV heads, ffn 8h/3 "
              "rounded up to 256), hidden a multiple of 1024 with hidden/layers nearest 128, "
              "layers solved for the count; not a real model")


def _short_count(n: float) -> str:
    for scale, suffix in ((1e12, "t"), (1e9, "b"), (1e6, "m")):
        if n >= scale:
            return f"{n / scale:.4g}{suffix}"
    return f"{n:.4g}"


def _inferred_shape(hidden: int, layers: int, n: float) -> ModelSpec:
    heads = hidden // INFER_HEAD_DIM
    # Llama FeedForward: 2/3 of 4h, rounded up to multiple_of (ECOSYSTEM.md §6.2 derivation).
    ffn = 256 * math.ceil((8 * hidden / 3) / 256)
    return ModelSpec(name=f"inferred-{_short_count(n)}", layers=layers, hidden=hidden, heads=heads,
                     kv_heads=min(INFER_KV_HEADS, heads), head_dim=INFER_HEAD_DIM, ffn=ffn,
                     mlp="swiglu", vocab=INFER_VOCAB, tied_embeddings=False, position="rope",
                     max_positions=None, norm="rmsnorm", dropout=False, inferred=True,
                     source=f"{INFER_RULE} (target {n:.4g})")


# The boundary: a user's shape (a plan's inline model, a config.json, flags) with kv_heads and
# head_dim filled where left out, then validated.
_USER_SHAPE = Annotated[ModelSpec, BeforeValidator(fill_defaults)]


def validate_model(data: Any) -> ModelSpec:
    """A user's shape validated into a ModelSpec (pydantic.ValidationError on bad input)."""
    spec: ModelSpec = adapter(_USER_SHAPE).validate_python(data)
    return spec


def model_from_params(n: float) -> ModelSpec:
    """A standard dense decoder whose exact parameter count is close to ``n`` (see INFER_RULE).

    For each hidden size h (multiples of 1024) the layer count is solved from
    n = fixed(h) + L·layer(h); among those the shape with h/L closest to 128 (log scale) wins.
    The count misses n by at most half a layer: under 3% from 3e8 up, about 2% from 1e9 up.
    """
    try:
        n = float(n)
    except (TypeError, ValueError):
        raise InputError(named("params"), f"must be a number of parameters, got {n!r}") from None
    if not math.isfinite(n) or not INFER_MIN <= n <= INFER_MAX:
        raise InputError(named("params"), f"must be between {INFER_MIN:.0e} and {INFER_MAX:.0e} "
                                     f"to infer a shape, got {n:g}")
    best: tuple[float, ModelSpec] | None = None
    hidden = INFER_HIDDEN_STEP
    while True:
        probe = _inferred_shape(hidden, 1, n)
        layer = probe.layer_params()
        layers = round((n - (probe.param_count() - layer)) / layer)
        if layers < 1:
            break
        score = abs(math.log(hidden / layers / INFER_ASPECT))
        if best is None or score < best[0]:
            best = (score, _inferred_shape(hidden, layers, n))
        elif hidden / layers > INFER_ASPECT:
            break  # past the aspect target the score only grows with hidden
        hidden += INFER_HIDDEN_STEP
    if best is None:  # unreachable for n ≥ INFER_MIN; kept so the error is readable if limits move
        raise InputError(named("params"), f"{n:g} is too small to infer a shape")
    return best[1]
