"""Which pieces a ModelSpec's blocks hold, per layer: the MoE pattern, attention windows, MLA,
shared experts, QK-norm, sinks, multi-token prediction. The arithmetic of each piece is one
function in ``planner.engine.params``; this module only composes them for a spec.

Layer pattern (transformers 5.24.0 modeling code, the configuration classes' rules):
- layer i is MoE iff i ≥ ``dense_layers`` (DeepSeek/GLM ``first_k_dense_replace``) and
  (i+1) % ``moe_every`` == 0 (Qwen2-MoE ``decoder_sparse_step``, Llama 4
  ``interleave_moe_layer_step``: moe_layers = range(step−1, L, step)) and i is not in
  ``mlp_only_layers`` (Qwen2-MoE);
- with a ``window``, layer i attends globally iff ``global_every`` and (i+1) % global_every == 0
  (Gemma 2/GPT-OSS 2, Gemma 3 ``sliding_window_pattern`` 6, Llama 4 ``no_rope_layer_interval`` 4).
"""

from __future__ import annotations

from typing import Any

from planner.engine import params as P
from planner.engine.arrays import Num

# Each function takes the ModelSpec as ``m`` (typed Any: planner.specs.model imports this
# module, so naming the class here would be an import cycle).


def _in_pattern(m: Any, i: int) -> bool:
    return i >= m.dense_layers and (i + 1) % m.moe_every == 0


def moe_layer_count(m: Any) -> int:
    """Number of MoE layers: multiples of k in (d, L], less the listed dense-only ones."""
    if not m.is_moe:
        return 0
    k, d = m.moe_every, min(m.dense_layers, m.layers)
    listed = sum(1 for i in set(m.mlp_only_layers) if i < m.layers and _in_pattern(m, i))
    return m.layers // k - d // k - listed


def moe_layer_ids(m: Any) -> tuple[int, ...]:
    """0-based indices of the MoE layers."""
    if not m.is_moe:
        return ()
    return tuple(i for i in range(m.layers)
                 if _in_pattern(m, i) and i not in m.mlp_only_layers)


def windowed_layer_count(m: Any) -> int:
    """Layers attending within ``window`` (all but every ``global_every``-th)."""
    if m.window is None:
        return 0
    return m.layers - (m.layers // m.global_every if m.global_every else 0)


def layer_windows(m: Any) -> tuple[int, ...]:
    """Per layer its attention span in tokens, 0 for full attention."""
    w = m.window or 0
    return tuple(0 if not w or (m.global_every and (i + 1) % m.global_every == 0) else w
                 for i in range(m.layers))


def attention_block_params(m: Any) -> int:
    """One block's attention and norms: MLA or grouped-query projections (+ biases), QK-norm
    scales, attention sinks (one logit per head), and ``layer_norms`` norms."""
    h, a, k, d = m.hidden, m.heads, m.kv_heads, m.head_dim
    out_bias = m.out_bias or m.linear_bias
    if m.kv_lora_rank is not None:
        rq, rkv, dr = m.q_lora_rank or 0, m.kv_lora_rank, m.qk_rope_dim
        attn = (P.mla_matmul_params(h, a, rq, rkv, d - dr, dr, m.value_dim)
                + P.mla_norm_params(rq, rkv)
                # DeepSeek's attention_bias: q_a (or q) and kv_a projections, and o_proj
                + ((rq or a * d) + rkv + dr if m.qkv_bias else 0) + (h if out_bias else 0))
    else:
        attn = P.attention_params(h, a, k, d, m.qkv_bias, out_bias)
    if m.qk_norm != "none":
        attn += P.qk_norm_params(a, k, d, m.qk_norm == "full")
    sinks = a if m.attention_sinks else 0
    return int(attn + sinks + m.layer_norms * P.norm_params(h, m.norm_bias))


def moe_mlp(m: Any, active: bool) -> int:
    """One MoE block's MLP side: routed experts (all, or top-k when ``active``), shared experts,
    router (+bias) and the shared-expert gate."""
    return int(P.moe_mlp_params(m.hidden, m.expert_width, m.experts, m.shared_experts, m.gated,
                                m.linear_bias, m.experts_per_token if active else None,
                                m.shared_expert_ffn, m.router_bias, m.shared_expert_gate))


def attention_matmul(m: Any) -> int:
    """Weight-matrix entries of one block's attention projections."""
    if m.kv_lora_rank is not None:
        return int(P.mla_matmul_params(m.hidden, m.heads, m.q_lora_rank or 0, m.kv_lora_rank,
                                       m.head_dim - m.qk_rope_dim, m.qk_rope_dim, m.value_dim))
    return int(P.attention_matmul_params(m.hidden, m.heads, m.kv_heads, m.head_dim))


def matmul_params_per_token(m: Any) -> int:
    """L attention blocks + dense MLPs + MoE blocks' top-k, shared and router GEMMs + the
    logits matmul V·h (tied or not); the embedding lookup is not a matmul."""
    dense = P.mlp_matmul_params(m.hidden, m.ffn, m.gated)
    moe = (P.moe_mlp_matmul_params(m.hidden, m.expert_width, m.experts, m.experts_per_token,
                                   m.shared_experts, m.gated, m.shared_expert_ffn,
                                   m.shared_expert_gate) if m.is_moe else 0.0)
    head = P.embedding_params(m.vocab, m.hidden)
    return int(m.layers * attention_matmul(m) + m.dense_layer_count * dense
               + m.moe_layers * moe + head)


def activation_ffn(m: Any, routed_load: Num = 1.0) -> Num:
    """Mean MLP width per layer a token's saved activations span: ffn in dense blocks,
    load·k·f_e + n_shared·f_s in MoE blocks (load: the routed rows over the mean)."""
    if not m.is_moe:
        return float(m.ffn)
    shared = m.shared_experts * (m.shared_expert_ffn or m.expert_width)
    moe = routed_load * m.experts_per_token * m.expert_width + shared
    return (m.dense_layer_count * m.ffn + m.moe_layers * moe) / m.layers


def score_dim(m: Any, seq_len: float, causal: bool) -> float:
    """attn_dim × Σ_layers keys_l / (L·keys_full), keys from ``engine.params.mean_keys``."""
    n_win = windowed_layer_count(m)
    if not n_win:
        return m.attn_dim
    keys = float(P.mean_keys(seq_len, m.window or 0, m.window_kind == "chunked", causal))
    share = ((m.layers - n_win) * seq_len + n_win * keys) / (m.layers * seq_len)
    return m.attn_dim * share


def mtp_params(m: Any) -> int:
    """Multi-token-prediction modules (DeepSeek-V3 report Sec. 2.2, Fig. 3): per module two
    RMSNorms on its inputs, the projection M ∈ R^{h×2h}, one transformer block (an MoE block in
    an MoE model) and the output head's norm; embedding and output head are shared with the
    main model (DeepSeek's README: 11.5B unique MTP parameters)."""
    if not m.mtp_layers:
        return 0
    block = m.moe_layer_params() if m.is_moe else m.layer_params()
    return int(m.mtp_layers * (3 * P.norm_params(m.hidden, m.norm_bias)
                               + 2 * m.hidden * m.hidden + block))


def kind(m: Any) -> str:
    """The architecture in a few words for ``describe``."""
    parts = []
    if m.is_moe:
        shared = f" +{m.shared_experts} shared" if m.shared_experts else ""
        parts.append(f"MoE {m.experts}x top-{m.experts_per_token}{shared}, "
                     f"{m.moe_layers}/{m.layers} MoE layers, "
                     f"{m.active_param_count() / 1e9:.2f}B active")
    else:
        parts.append("dense")
    if m.is_mla:
        parts.append(f"MLA q{m.q_lora_rank or '-'}/kv{m.kv_lora_rank}")
    if m.window is not None:
        every = f", global every {m.global_every}" if m.global_every else ""
        parts.append(f"{m.window_kind} window {m.window}{every}")
    if m.mtp_layers:
        parts.append(f"+{m.mtp_param_count() / 1e9:.2f}B MTP")
    if m.vision_params:
        parts.append(f"+{m.vision_params / 1e9:.2f}B vision not planned")
    return "; ".join(parts)
