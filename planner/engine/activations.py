"""Activation memory, derived per operation from tensor shapes.

Source: Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*
(arXiv 2205.05198), Sec. 4.1-4.3 and 5. The paper counts, for one GPT layer (GeLU 4h MLP,
multi-head attention, dropout, 16-bit activations, 1-byte dropout masks), the tensors autograd
keeps for the backward pass: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh, i.e.
sbh(34 + 5as/h). Here the same count is written one stored tensor at a time (`_op_table`), so a
Llama-style layer (SwiGLU, grouped-query attention, no dropout, flash attention) gets its own
coefficients from the same table instead of borrowing the paper's 34.

Each stored tensor has
- bytes per local token (its element count per token times its byte width),
- a region saying which parallel degree divides it:
  "seq" - outside the tensor-parallel matmuls: replicated over TP ranks, split by TP only
          under sequence parallelism (Korthikanti Sec. 4.2.2);
  "tp"  - inside the TP-sharded region (heads or ffn columns split over t ranks);
  "kv"  - the K/V heads, split over min(t, kv_heads) ranks (a KV head cannot be split, so
          with fewer KV heads than ranks they are replicated),
- whether selective recomputation drops it (the attention core: QKᵀ → softmax → dropout →
  attention over V; Korthikanti Sec. 5).
Context parallelism c splits the sequence, so every tensor is counted on s/c local tokens;
without flash attention the local scores are (s/c)×s per head.

Not counted, as in the paper: LayerNorm/RMSNorm statistics (1-2 fp32 per token), token ids
(8 bytes per token), RoPE (a rotation, its backward needs only cos/sin), and the transient
peak of recomputing one layer during its backward (see `stage_activation_bytes`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeAlias

import numpy as np

from planner.engine.arrays import Num, out

Mlp: TypeAlias = Literal["gelu", "swiglu"]

RECOMPUTE_NONE = 0
RECOMPUTE_SELECTIVE = 1
RECOMPUTE_FULL = 2

MASK_BYTES = 1.0  # dropout masks are stored as bytes (Korthikanti Sec. 4.1)
LSE_BYTES = 4.0  # flash attention keeps its softmax log-sum-exp in fp32

# The tensor a fully recomputed layer keeps: its input, which is also the first norm's input.
LAYER_INPUT = "attn_norm_in"

# Saved tensors the memory model counts but the time model's memory-pass proxy leaves out: its
# eager-kernel factor (evaluation/timing_terms.py KERNEL_MEMORY_FACTOR) was fitted on the fused
# tensor set, and already prices eager PyTorch's extra reads and writes.
MEMORY_ONLY_TERMS = ("swiglu_silu_out",)

# What each stored tensor is ("width" is the activation byte width, 2 for 16-bit):
# - attn_norm_in: attention LayerNorm/RMSNorm input = layer input: h × width
# - qkv_in: QKV projection input (norm output): h × width
# - mla_latent: MLA compressed q and kv, each kept twice (norm and up-projection inputs): 2·(r_q + r_kv) × width
# - q: Q kept for QKᵀ (or flash backward): a·d × width, ÷t
# - k: K kept for QKᵀ: k·d × width, ÷min(t, k)
# - v: V kept for attention over V: k·d × width, ÷min(t, k)
# - scores_softmax: softmax output, s_kv scores per head: a·s_kv × width, ÷t, selective drops
# - scores_dropout_mask: dropout mask on the scores: a·s_kv × 1 byte, ÷t, selective drops
# - scores_dropout_out: dropout output (input of attention over V): a·s_kv × width, ÷t, selective drops
# - softmax_lse: flash attention log-sum-exp: a × 4 bytes (fp32), ÷t, selective drops
# - proj_in: output projection input (attention output): a·d × width, ÷t
# - attn_dropout_mask: dropout mask after the output projection: h × 1 byte
# - mlp_norm_in: MLP LayerNorm/RMSNorm input: h × width
# - fc1_in: first MLP matmul input (norm output): h × width
# - fc1_out: fc1 output = GeLU input: f × width, ÷t
# - gelu_out: GeLU output = fc2 input: f × width, ÷t
# - swiglu_gate: gate projection output (SiLU input): f × width, ÷t
# - swiglu_up: up projection output: f × width, ÷t
# - swiglu_silu_out: SiLU(gate), kept by an eager (unfused) SwiGLU's product: f × width, ÷t
# - swiglu_product: SiLU(gate)·up = down-projection input: f × width, ÷t
# - mlp_dropout_mask: dropout mask after the MLP: h × 1 byte


class _Op(NamedTuple):
    name: str
    bytes_per_token: Num  # per local query token of one sequence
    region: str  # "seq", "tp" or "kv"
    selective: bool  # dropped by selective recomputation


def _op_table(hidden: Num, heads: Num, kv_heads: Num, head_dim: Num, ffn: Num, key_len: Num,
              *, mlp: Mlp, dropout: bool, flash: bool, width: Num, v_dim: Num | None = None,
              latent: Num = 0.0, fused_swiglu: bool = True,
              norm_width: Num | None = None) -> list[_Op]:
    """The tensors one transformer layer stores for backward, in forward order.

    Multi-head latent attention (DeepSeek-V2/V3) passes ``v_dim`` (d_v: V and the attention
    output are a·d_v wide, Q and K a·d_qk) and ``latent``: the compressed q and kv the down
    projections write, each kept as its RMSNorm's input and as the up projection's input,
    2·(r_q + r_kv) per token, outside the tensor-parallel region (Megatron-Core's MLA runs the
    down projections unsplit).

    GPT case (a·d = h, k = a, f = 4h, dropout, no flash), bytes per token:
    seq region 2h+2h+h+2h+2h+h = 10h; TP region 2h+2h+2h+2h+8h+8h = 24h plus 5·a·s scores
    bytes, i.e. Korthikanti's sbh(10 + 24/t + 5as/(ht)).
    """
    h, a, k, d, f = hidden, heads, kv_heads, head_dim, ffn
    dv = d if v_dim is None else v_dim
    nw = width if norm_width is None else norm_width  # a norm that upcasts saves its fp32 copy
    ops = [
        _Op("attn_norm_in", nw * h, "seq", False),
        _Op("qkv_in", width * h, "seq", False),
    ]
    if np.any(np.asarray(latent) > 0):
        ops.append(_Op("mla_latent", width * 2.0 * latent, "seq", False))
    ops += [
        _Op("q", width * a * d, "tp", False),
        _Op("k", width * k * d, "kv", False),
        _Op("v", width * k * dv, "kv", False),
    ]
    if flash:
        # Flash attention recomputes the scores in its backward from Q, K, V, the output and
        # the row log-sum-exp; its dropout mask is regenerated from the RNG state.
        ops.append(_Op("softmax_lse", LSE_BYTES * a, "tp", True))
    else:
        scores = a * key_len  # one row of s_kv scores per head for each query token
        # Softmax backward needs its output; with dropout, attention over V needs the dropped
        # copy and dropout backward the mask. Without dropout the softmax output serves both.
        ops.append(_Op("scores_softmax", width * scores, "tp", True))
        if dropout:
            ops.append(_Op("scores_dropout_mask", MASK_BYTES * scores, "tp", True))
            ops.append(_Op("scores_dropout_out", width * scores, "tp", True))
    ops.append(_Op("proj_in", width * a * dv, "tp", False))
    if dropout:
        ops.append(_Op("attn_dropout_mask", MASK_BYTES * h, "seq", False))
    ops += [
        _Op("mlp_norm_in", nw * h, "seq", False),
        _Op("fc1_in", width * h, "seq", False),
    ]
    if mlp == "gelu":
        ops += [
            _Op("fc1_out", width * f, "tp", False),
            _Op("gelu_out", width * f, "tp", False),
        ]
    elif mlp == "swiglu":
        # A fused SwiGLU keeps gate and up (its inputs) and the down projection keeps the
        # product; an eager one (F.silu(gate) * up) also keeps SiLU(gate), the product's
        # operand for up's gradient: one more f.
        ops += [
            _Op("swiglu_gate", width * f, "tp", False),
            _Op("swiglu_up", width * f, "tp", False),
        ]
        if not fused_swiglu:
            ops.append(_Op("swiglu_silu_out", width * f, "tp", False))
        ops.append(_Op("swiglu_product", width * f, "tp", False))
    else:
        raise ValueError(f"mlp must be 'gelu' or 'swiglu', not {mlp!r}")
    if dropout:
        ops.append(_Op("mlp_dropout_mask", MASK_BYTES * h, "seq", False))
    return ops


def layer_activation_terms(seq: Num, micro_batch: Num, hidden: Num, heads: Num, kv_heads: Num,
                           head_dim: Num, ffn: Num, *, mlp: Mlp = "gelu", dropout: bool = True,
                           flash: bool = False, tp: Num = 1, sp: Num = 0, cp: Num = 1,
                           recompute: Num = RECOMPUTE_NONE, bytes_per_elem: Num = 2,
                           v_head_dim: Num | None = None,
                           latent: Num = 0.0, fused_swiglu: bool = True,
                           norm_bytes: Num | None = None) -> dict[str, Num]:
    """Bytes one layer stores for one micro-batch on one GPU, per stored tensor (the tensors listed above).

    term = (s/c)·b·bytes_per_token / divisor, divisor t ("tp"), min(t, k) ("kv"), t if sp
    else 1 ("seq"). Selective recompute zeroes the attention-core terms; full recompute keeps
    only the layer input 2·(s/c)·b·h (÷t with SP) (Korthikanti Sec. 4.2-5). `norm_bytes`: what
    a norm saves of each input element where it differs from the width (an RMSNorm that
    upcasts keeps the fp32 copy, 4; under full recompute the checkpoint keeps the input at the
    width). Attention
    windows change nothing here: flash attention stores no scores, and the unfused path
    materialises the full masked s×s matrix whatever the window.
    """
    t = np.asarray(tp, dtype=float)
    c = np.asarray(cp, dtype=float)
    r = np.asarray(recompute)
    s = np.asarray(seq, dtype=float)
    local_tokens = s / c * np.asarray(micro_batch, dtype=float)
    divisors = {
        "tp": t,
        "kv": np.minimum(t, np.asarray(kv_heads, dtype=float)),
        "seq": np.where(np.asarray(sp) != 0, t, 1.0),
    }
    table = _op_table(np.asarray(hidden, dtype=float), np.asarray(heads, dtype=float),
                      np.asarray(kv_heads, dtype=float), np.asarray(head_dim, dtype=float),
                      np.asarray(ffn, dtype=float), s, mlp=mlp, dropout=dropout, flash=flash,
                      width=np.asarray(bytes_per_elem, dtype=float), v_dim=v_head_dim,
                      latent=latent, fused_swiglu=fused_swiglu, norm_width=norm_bytes)
    raw = {}
    for op in table:
        kept: Num
        if op.name == LAYER_INPUT:
            kept = 1.0 if norm_bytes is None else np.where(
                r == RECOMPUTE_FULL, np.asarray(bytes_per_elem) / norm_bytes, 1.0)
        elif op.selective:
            kept = np.where(r == RECOMPUTE_NONE, 1.0, 0.0)
        else:
            kept = np.where(r == RECOMPUTE_FULL, 0.0, 1.0)
        raw[op.name] = local_tokens * op.bytes_per_token / divisors[op.region] * kept
    # Every term gets the full broadcast shape, so a printout can index any of them alike.
    shape = np.broadcast_shapes(*(np.shape(v) for v in raw.values()))
    return {name: out(v if np.shape(v) == shape and v.dtype == np.float64
                      else np.broadcast_to(v, shape).astype(float)) for name, v in raw.items()}


def terms_total(terms: dict[str, Num]) -> Num:
    """The sum of layer_activation_terms' terms, in their order."""
    return out(sum(np.asarray(v, dtype=float) for v in terms.values()))


def layer_activation_bytes(seq: Num, micro_batch: Num, hidden: Num, heads: Num, kv_heads: Num,
                           head_dim: Num, ffn: Num, *, mlp: Mlp = "gelu", dropout: bool = True,
                           flash: bool = False, tp: Num = 1, sp: Num = 0, cp: Num = 1,
                           recompute: Num = RECOMPUTE_NONE, bytes_per_elem: Num = 2) -> Num:
    """Bytes one transformer layer stores for one micro-batch: the sum of layer_activation_terms.

    GPT case reproduces Korthikanti Table 2: sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht));
    TP+SP: sbh(34 + 5as/h)/t; TP+selective: sbh(10 + 24/t); TP+SP+selective: 34sbh/t;
    full: 2sbh (÷t with SP).
    """
    terms = layer_activation_terms(seq, micro_batch, hidden, heads, kv_heads, head_dim, ffn,
                                   mlp=mlp, dropout=dropout, flash=flash, tp=tp, sp=sp, cp=cp,
                                   recompute=recompute, bytes_per_elem=bytes_per_elem)
    return terms_total(terms)


def stage_activation_bytes(per_layer_bytes: Num, layers_on_stage: Num, in_flight: Num, *,
                           full_recompute_layers: Num = 0, full_recompute_layer_bytes: Num = 0,
                           working_bytes: Num = 0) -> Num:
    """A pipeline stage's activation bytes with `in_flight` micro-batches held at its peak.

    in_flight × [(n − k)·A + k·A_full] + working, with n layers on the stage, k of them fully
    recomputed (they keep only their input, A_full), the rest keeping A each. `in_flight` is
    pipeline.micro_batches_in_flight (1F1B first stage: p, interleaved: p(1 + (p−1)/(pv))), so
    the first stage holds L layers' worth (Korthikanti Eq. 5-6). `working_bytes` is for the
    caller to add what exists once, not per micro-batch: e.g. one layer's full activations
    rebuilt during a recomputed layer's backward, which the paper's totals leave out.
    """
    n = np.asarray(layers_on_stage, dtype=float)
    k = np.minimum(np.asarray(full_recompute_layers, dtype=float), n)
    per_micro_batch = (n - k) * per_layer_bytes + k * np.asarray(full_recompute_layer_bytes)
    return out(np.asarray(in_flight, dtype=float) * per_micro_batch + working_bytes)


def embedding_activation_bytes(seq: Num, micro_batch: Num, hidden: Num, *, dropout: bool,
                               tp: Num = 1, sp: Num = 0, cp: Num = 1) -> Num:
    """Bytes the first stage's embedding stores per micro-batch: its dropout mask, s·b·h × 1 byte.

    ÷t with sequence parallel, ÷c with context parallel. The embedding output itself is the
    first layer's input, which that layer already stores (its norm input or, under full
    recompute, its checkpoint), so it is not counted twice; the lookup's backward needs only the
    token ids (8 bytes per token, negligible). Per in-flight micro-batch this is Korthikanti's
    extra first-stage term sbhp/t (Sec. 4.3, with SP).
    """
    if not dropout:
        return out(0.0 * np.asarray(seq, dtype=float))
    t = np.where(np.asarray(sp) != 0, np.asarray(tp, dtype=float), 1.0)
    tokens = np.asarray(seq, dtype=float) / np.asarray(cp, dtype=float) * micro_batch
    return out(tokens * np.asarray(hidden, dtype=float) * MASK_BYTES / t)


def output_layer_bytes(seq: Num, micro_batch: Num, hidden: Num, *, tp: Num = 1, sp: Num = 0,
                       cp: Num = 1, bytes_per_elem: Num = 2) -> Num:
    """The last stage's final norm input and output-layer input: 2 × s·b·h × width (÷t with SP).

    Korthikanti Sec. 4.3's 4sbh/t term (with SP, 16-bit); the logits are `logits_bytes`.
    """
    t = np.where(np.asarray(sp) != 0, np.asarray(tp, dtype=float), 1.0)
    tokens = np.asarray(seq, dtype=float) / np.asarray(cp, dtype=float) * micro_batch
    return out(2.0 * tokens * np.asarray(hidden, dtype=float) * bytes_per_elem / t)


def logits_bytes(seq: Num, micro_batch: Num, vocab: Num, tp: Num = 1, *,
                 logits_bytes_per_elem: Num = 4, copy_bytes_per_elem: Num = 2,
                 cp: Num = 1) -> Num:
    """Last stage's output logits for one micro-batch: (s/c)·b·V/t × (4 + 2) bytes by default.

    Megatron's vocab-parallel cross-entropy casts the 16-bit logits to fp32 and keeps the fp32
    softmax for backward (4 bytes); the output layer's 16-bit logits (2 bytes) are alive beside
    it while the loss runs, so the peak holds both. Korthikanti Sec. 4.3 counts the fp32 part
    only (4sbv/t): pass copy_bytes_per_elem=0 for that. At long sequence and large vocabulary
    this can exceed a whole layer's activations.
    """
    tokens = np.asarray(seq, dtype=float) / np.asarray(cp, dtype=float) * micro_batch
    per_elem = np.asarray(logits_bytes_per_elem, dtype=float) + copy_bytes_per_elem
    return out(tokens * np.asarray(vocab, dtype=float) / np.asarray(tp, dtype=float) * per_elem)
