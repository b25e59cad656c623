"""Parameter counts and training FLOPs of decoder-only transformers, piece by piece.

Symbols: h hidden, a query heads, k KV heads, d head dim, f FFN width, E experts, V vocab,
L layers, s sequence length. Counting follows ECOSYSTEM.md §6.2 (HF module shapes); the GPT
checks are Narayanan et al. SC21 Eq. 2 and Korthikanti et al. 2022 Appendix A Eq. 7.
"Matmul parameters" are the weight matrices a token is multiplied through: they set FLOPs.
Biases and norm scales are parameters but cost O(h) elementwise work, so they are left out there.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import FloatArray, Num, out


def _f(x: Num) -> FloatArray:
    return np.asarray(x, dtype=float)


def attention_matmul_params(hidden: Num, heads: Num, kv_heads: Num, head_dim: Num) -> Num:
    """Weights of q, k, v, o with grouped-query attention: h·a·d + 2·h·k·d + a·d·h.

    k = a is multi-head attention, k = 1 multi-query (ECOSYSTEM.md §6.2).
    """
    h, a, k, d = _f(hidden), _f(heads), _f(kv_heads), _f(head_dim)
    return out(h * a * d + 2.0 * h * k * d + a * d * h)


def attention_params(hidden: Num, heads: Num, kv_heads: Num, head_dim: Num,
                     qkv_bias: Num = False, out_bias: Num = False) -> Num:
    """Attention weights plus biases: q/k/v bias a·d + 2·k·d (Qwen2, GPT), output bias h (GPT)."""
    h, a, k, d = _f(hidden), _f(heads), _f(kv_heads), _f(head_dim)
    bias = np.where(qkv_bias, a * d + 2.0 * k * d, 0.0) + np.where(out_bias, h, 0.0)
    return out(_f(attention_matmul_params(h, a, k, d)) + bias)


def mlp_matmul_params(hidden: Num, ffn: Num, gated: Num = False) -> Num:
    """MLP weights: 2·h·f for a plain up/down MLP (GeLU, ReLU), 3·h·f for gated (SwiGLU: gate, up, down)."""
    h, f = _f(hidden), _f(ffn)
    return out(np.where(gated, 3.0, 2.0) * h * f)


def mlp_params(hidden: Num, ffn: Num, gated: Num = False, bias: Num = False) -> Num:
    """MLP weights plus biases: one f-bias per up-type matrix (1 plain, 2 gated) and h on down."""
    h, f = _f(hidden), _f(ffn)
    up_mats = np.where(gated, 2.0, 1.0)
    return out(_f(mlp_matmul_params(h, f, gated)) + np.where(bias, up_mats * f + h, 0.0))


def norm_params(hidden: Num, bias: Num = False) -> Num:
    """One normalisation layer: RMSNorm has a scale only (h); LayerNorm scale and shift (2h)."""
    return out(_f(hidden) * np.where(bias, 2.0, 1.0))


def router_params(hidden: Num, experts: Num) -> Num:
    """MoE router: one h × E linear without bias (Mixtral, ECOSYSTEM.md §6.2)."""
    return out(_f(hidden) * _f(experts))


def moe_mlp_params(hidden: Num, expert_ffn: Num, experts: Num, shared_experts: Num = 0,
                   gated: Num = True, bias: Num = False, routed: Num | None = None) -> Num:
    """MoE block: (routed + shared) expert MLPs of width f_e, plus the router h·E.

    ``routed`` defaults to E (total count); pass the top-k for the parameters one token
    passes through (active count). The router is always h·E: every token scores every expert.
    """
    per_expert = _f(mlp_params(hidden, expert_ffn, gated, bias))
    n = _f(experts if routed is None else routed)
    return out((n + _f(shared_experts)) * per_expert + _f(router_params(hidden, experts)))


def moe_mlp_matmul_params(hidden: Num, expert_ffn: Num, experts: Num, experts_per_token: Num,
                          shared_experts: Num = 0, gated: Num = True) -> Num:
    """Matmul weights one token goes through in an MoE block: (top-k + shared) experts + router h·E."""
    per_expert = _f(mlp_matmul_params(hidden, expert_ffn, gated))
    return out((_f(experts_per_token) + _f(shared_experts)) * per_expert
               + _f(router_params(hidden, experts)))


def embedding_params(vocab: Num, hidden: Num) -> Num:
    """Token embedding table V·h."""
    return out(_f(vocab) * _f(hidden))


def position_params(positions: Num, hidden: Num) -> Num:
    """Learned absolute position table P·h (GPT-2, GPT-3, OPT); 0 for RoPE/ALiBi (pass P = 0)."""
    return out(_f(positions) * _f(hidden))


def lm_head_params(vocab: Num, hidden: Num, tied: Num = False) -> Num:
    """Output projection V·h; 0 extra parameters when tied to the embedding (GPT-2, Megatron default)."""
    return out(np.where(tied, 0.0, _f(vocab) * _f(hidden)))


def attention_score_forward_flops(tokens: Num, kv_len: Num, attn_dim: Num,
                                  causal: Num = False) -> Num:
    """Q·Kᵀ and scores·V forward, the one spelling of the attention-score term: 4·T·s_kv·(a·d),
    halved under ``causal`` (the kernel skips the masked tiles, as FlashAttention does).

    Korthikanti et al. 2022 Appendix A count the full s×s score matrix: 4·B·s²·h forward per
    layer; Dao 2023 (FlashAttention-2, Sec. 4) count the causal half.
    """
    return out(4.0 * _f(tokens) * _f(kv_len) * _f(attn_dim) * np.where(causal, 0.5, 1.0))


def attention_score_flops_per_token(layers: Num, seq_len: Num, attn_dim: Num,
                                    causal: Num = False) -> Num:
    """The score term for training, per token: forward plus a backward of twice the forward
    over L layers, 3·L·(4·s·(a·d)) = 12·L·s·(a·d) (halved under ``causal``)."""
    return out(3.0 * _f(layers) * _f(attention_score_forward_flops(1.0, seq_len, attn_dim, causal)))


def training_flops_per_token(matmul_params_per_token: Num, layers: Num, seq_len: Num,
                             attn_dim: Num, causal: Num = False) -> Num:
    """Model FLOPs per trained token, no recompute: 6·N_matmul + 12·L·s·(a·d).

    N_matmul includes the LM head (tied or not: the logits matmul runs) and excludes the
    embedding lookup. For dense GPT (12h² per layer) this is 72Lh² + 12Lsh + 6Vh, i.e.
    Korthikanti Eq. 7 / Narayanan Eq. 3 without recompute divided by B·s.
    """
    return out(6.0 * _f(matmul_params_per_token)
               + _f(attention_score_flops_per_token(layers, seq_len, attn_dim, causal)))


def gpt_params_eq2(layers: Num, hidden: Num, vocab: Num, seq_len: Num) -> Num:
    """Narayanan et al. SC21 Eq. 2: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)).

    Equals 12lh² + 13lh + Vh + sh: GPT layers with biases, tied embedding, learned positions;
    it omits the final LayerNorm (2h), which a full model count includes.
    """
    l, h, v, s = _f(layers), _f(hidden), _f(vocab), _f(seq_len)
    return out(12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h)))


def gpt_model_flops_eq7(batch: Num, layers: Num, seq_len: Num, hidden: Num, vocab: Num) -> Num:
    """Korthikanti et al. 2022 Eq. 7 model FLOPs per step: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL))."""
    b, l, s, h, v = _f(batch), _f(layers), _f(seq_len), _f(hidden), _f(vocab)
    return out(72.0 * b * l * s * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * l)))
