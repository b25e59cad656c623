"""Readers for today's Hugging Face ``model_type`` families, field by field as transformers
builds each model (transformers 5.24.0, ``models/<type>/configuration_<type>.py`` for the
defaults and ``modeling_<type>.py`` for which field sizes what).

Each reader returns ModelSpec fields; a field the config omits is taken from its type's
default (``DEFAULTS``, the configuration class's keyword default) and named in the output.
The core sizes (hidden_size, num_hidden_layers, num_attention_heads, vocab_size and the MLP
width) are required: a config without them is not the model it names.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.specs.hf_fields import ConfigFields, check_rope, dropout, heads, int_list, string_list

_TX = "transformers 5.24.0 configuration classes"

# Size-relevant keyword defaults of each configuration class (transformers 5.24.0).
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "mistral": {"tie_word_embeddings": False, "sliding_window": 4096},
    "mixtral": {"tie_word_embeddings": False, "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2": {"tie_word_embeddings": False, "use_sliding_window": False},
    "qwen2_moe": {"tie_word_embeddings": False, "num_experts": 60, "num_experts_per_tok": 4,
                  "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                  "decoder_sparse_step": 1, "qkv_bias": True, "use_sliding_window": False},
    "qwen3": {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128,
              "use_sliding_window": False},
    "qwen3_moe": {"tie_word_embeddings": False, "attention_bias": False, "num_experts": 128,
                  "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "decoder_sparse_step": 1, "use_sliding_window": False},
    "phi3": {"tie_word_embeddings": False},
    "olmo2": {"tie_word_embeddings": False, "attention_bias": False},
    "granite": {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "granitemoe": {"tie_word_embeddings": False, "attention_bias": False,
                   "num_local_experts": 8, "num_experts_per_tok": 2},
    "gemma2": {"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256,
               "sliding_window": 4096},
    "gemma3_text": {"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256,
                    "sliding_window": 4096, "sliding_window_pattern": 6},
    "gpt_oss": {"tie_word_embeddings": False, "attention_bias": True, "head_dim": 64,
                "num_local_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128},
    "llama4_text": {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128,
                    "num_local_experts": 16, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 1, "intermediate_size_mlp": 16384,
                    "attention_chunk_size": 8192, "no_rope_layer_interval": 4},
    "deepseek_v2": {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                    "n_routed_experts": 64, "moe_intermediate_size": 1407,
                    "n_shared_experts": 2, "first_k_dense_replace": 0, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128},
    "deepseek_v3": {"tie_word_embeddings": False, "attention_bias": False,
                    "n_routed_experts": 256, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048, "n_shared_experts": 1,
                    "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                    "num_nextn_predict_layers": 1},
    "glm4_moe": {"tie_word_embeddings": False, "attention_bias": False,
                 "n_routed_experts": 128, "num_experts_per_tok": 8,
                 "moe_intermediate_size": 1408, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "use_qk_norm": False,
                 "num_nextn_predict_layers": 1},
}
# Kimi-K2 publishes model_type "kimi_k2" with DeepseekV3ForCausalLM: the deepseek_v3 layout.
ALIASES = {"kimi_k2": "deepseek_v3"}
# Multimodal wrappers: the language model sits in text_config under this type.
NESTED = {"llama4": "llama4_text", "gemma3": "gemma3_text"}


def _base(c: ConfigFields, *, attn_bias: bool = False) -> dict[str, Any]:
    """The Llama-style decoder every family starts from (SwiGLU, RMSNorm, RoPE). With
    ``attn_bias`` the type's ``attention_bias`` puts a bias on q, k, v and o (Llama, Qwen3)."""
    hidden = c.int("hidden_size")
    n_heads, kv, head_dim = heads(c, hidden, "num_attention_heads", "num_key_value_heads")
    bias = c.bool("attention_bias") if attn_bias else False
    check_rope(c)
    return dict(layers=c.int("num_hidden_layers"), hidden=hidden, heads=n_heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("intermediate_size"), mlp="swiglu",
                vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings"),
                position="rope", max_positions=c.optional_int("max_position_embeddings"),
                qkv_bias=bias, out_bias=bias, norm="rmsnorm",
                dropout=dropout(c, ("attention_dropout",), 0.0))


def _windows(c: ConfigFields, notes: list[str], key: str, kind: str,
             every_key: str | None, every_default: int = 0) -> dict[str, Any]:
    """window, window_kind, global_every from the window size and ``layer_types`` (or the
    type's period key): layers typed "full_attention" attend globally."""
    window = c.optional_int(key, allow_zero=True)
    if not window:
        return {}
    types = string_list(c, "layer_types")
    every = (c.optional_int(every_key, allow_zero=True) if every_key else None) \
        or every_default
    if types is not None:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        every = full[0] + 1 if full else 0
        periodic = {i for i in range(len(types)) if every and (i + 1) % every == 0}
        if set(full) != periodic:
            notes.append(f"layer_types: full-attention layers {full[:8]} are not every "
                         f"{every}-th; counted as every {every}-th")
    return dict(window=window, window_kind=kind, global_every=every)


def _qwen_window(c: ConfigFields, notes: list[str]) -> None:
    c.get("sliding_window")   # used only with use_sliding_window
    if c.bool("use_sliding_window"):
        notes.append(f"use_sliding_window: sliding window {c.get('sliding_window')} on layers "
                     f">= max_window_layers {c.get('max_window_layers')} not modelled; "
                     "full attention counted (more FLOPs than run)")


def _moe(c: ConfigFields, experts_key: str, width_key: str | None, **extra: Any) -> dict[str, Any]:
    """Routed experts: count, top-k, per-expert width (None: the dense ``ffn``)."""
    experts = c.int(experts_key, 0, allow_zero=True)
    if not experts:
        return {}
    top_k = c.int("num_experts_per_tok")
    if top_k > experts:
        raise c.fail("num_experts_per_tok", f"must be at most {experts_key} ({experts}); "
                                            f"got {top_k}")
    width = c.int(width_key) if width_key else None
    return dict(experts=experts, experts_per_token=top_k, expert_ffn=width, **extra)


def _dense_first(c: ConfigFields, fields: dict[str, Any]) -> int:
    first = c.int("first_k_dense_replace", 0, allow_zero=True)
    if fields.get("experts") and first >= fields["layers"]:
        raise c.fail("first_k_dense_replace", f"must be below num_hidden_layers "
                                              f"({fields['layers']})")
    return first


def llama(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """llama / granite: attention_bias on q, k, v, o; mlp_bias on the MLP."""
    return {**_base(c, attn_bias=True), "linear_bias": c.bool("mlp_bias")}


def mistral(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """mistral / phi3 (fused qkv and gate_up: the same counts): sliding window on every layer."""
    return {**_base(c), **_windows(c, notes, "sliding_window", "sliding", None)}


def mixtral(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Every layer MoE, experts of width intermediate_size, router h·E without bias."""
    return {**_base(c), **_moe(c, "num_local_experts", None),
            **_windows(c, notes, "sliding_window", "sliding", None)}


def qwen2(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Qwen2: q/k/v always carry a bias (o does not)."""
    _qwen_window(c, notes)
    return {**_base(c), "qkv_bias": True}


def qwen2_moe(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Qwen2-MoE: MoE iff (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers; one
    shared expert of shared_expert_intermediate_size behind a sigmoid gate Linear(h, 1)."""
    _qwen_window(c, notes)
    shared = c.int("shared_expert_intermediate_size", allow_zero=True)
    moe = _moe(c, "num_experts", "moe_intermediate_size",
               moe_every=c.int("decoder_sparse_step"), mlp_only_layers=int_list(c, "mlp_only_layers"),
               shared_experts=1 if shared else 0, shared_expert_ffn=shared or None,
               shared_expert_gate=bool(shared))
    return {**_base(c), "qkv_bias": c.bool("qkv_bias"), **moe}


def qwen3(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Qwen3: per-head q/k RMSNorm; attention_bias on q, k, v, o."""
    _qwen_window(c, notes)
    return {**_base(c, attn_bias=True), "qk_norm": "head"}


def qwen3_moe(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Qwen3-MoE: as Qwen3, experts on Qwen2-MoE's pattern, no shared expert."""
    return {**qwen3(c, notes), **_moe(c, "num_experts", "moe_intermediate_size",
                                      moe_every=c.int("decoder_sparse_step"),
                                      mlp_only_layers=int_list(c, "mlp_only_layers"))}


def olmo2(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """OLMo 2: q/k RMSNorm over the full projection width; two (post-)norms per block."""
    return {**_base(c, attn_bias=True), "qk_norm": "full"}


def granitemoe(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """GraniteMoE: every layer MoE; intermediate_size is the per-expert width."""
    return {**_base(c, attn_bias=True), **_moe(c, "num_local_experts", None)}


def gemma2(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Gemma 2: GeGLU (gated), four RMSNorms per block, sliding and global layers alternating."""
    return {**_base(c, attn_bias=True), "layer_norms": 4,
            **_windows(c, notes, "sliding_window", "sliding", None, 2)}


def gemma3_text(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Gemma 3: as Gemma 2 with per-head q/k RMSNorm, global every sliding_window_pattern (6)."""
    return {**_base(c, attn_bias=True), "layer_norms": 4, "qk_norm": "head",
            **_windows(c, notes, "sliding_window", "sliding", "sliding_window_pattern")}


def gpt_oss(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """GPT-OSS: biases on q, k, v, o, router and experts; one sink logit per head; sliding
    (128) and full layers alternating; experts of width intermediate_size, no dense MLP."""
    if c.get("quantization_config") is not None:
        notes.append("quantization_config: experts stored in MXFP4 on disk; the count is "
                     "unchanged and training runs in the precision recipe planned")
    return {**_base(c, attn_bias=True), "linear_bias": True, "router_bias": True,
            "attention_sinks": True, **_moe(c, "num_local_experts", None),
            **_windows(c, notes, "sliding_window", "sliding", None, 2)}


def llama4_text(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """Llama 4: MoE layers range(step−1, L, step), each with a shared expert; routed and shared
    experts of width intermediate_size, dense layers intermediate_size_mlp; chunked attention
    except every no_rope_layer_interval-th layer (global, NoPE); its QK L2-norm has no weights."""
    fields = _base(c, attn_bias=True)
    moe = _moe(c, "num_local_experts", "intermediate_size", shared_experts=1,
               moe_every=c.int("interleave_moe_layer_step"))
    listed = int_list(c, "moe_layers")
    if moe and listed:
        step = moe["moe_every"]
        if set(listed) != set(range(step - 1, fields["layers"], step)):
            notes.append(f"moe_layers {list(listed)[:6]}... not every {step}-th layer; "
                         f"counted as every {step}-th")
    return {**fields, "ffn": c.int("intermediate_size_mlp"), **moe,
            **_windows(c, notes, "attention_chunk_size", "chunked", "no_rope_layer_interval")}


def deepseek(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """DeepSeek-V2/V3 (and Kimi-K2): MLA; MoE iff i ≥ first_k_dense_replace with
    n_shared_experts shared experts of moe_intermediate_size; num_nextn_predict_layers MTP
    modules (not built by transformers, stated beside the total). An explicit
    ``q_lora_rank: null`` (V2-Lite) means a direct q projection, not the default rank."""
    hidden = c.int("hidden_size")
    n_heads = c.int("num_attention_heads")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    q_rank = 0 if "q_lora_rank" in c.data and c.get("q_lora_rank") is None \
        else c.int("q_lora_rank")
    c.get("num_key_value_heads")   # MLA: every head has its own K and V from the latent
    c.get("head_dim")              # the rope dim in transformers; MLA uses the qk dims
    check_rope(c)
    bias = c.bool("attention_bias")
    fields: dict[str, Any] = dict(
        layers=c.int("num_hidden_layers"), hidden=hidden, heads=n_heads, kv_heads=n_heads,
        head_dim=nope + rope, ffn=c.int("intermediate_size"), mlp="swiglu",
        vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings"),
        position="rope", max_positions=c.optional_int("max_position_embeddings"),
        qkv_bias=bias, out_bias=bias, linear_bias=c.bool("mlp_bias"), norm="rmsnorm",
        dropout=dropout(c, ("attention_dropout",), 0.0), q_lora_rank=q_rank,
        kv_lora_rank=c.int("kv_lora_rank"), qk_rope_dim=rope, v_head_dim=c.int("v_head_dim"),
        mtp_layers=c.int("num_nextn_predict_layers", 0, allow_zero=True))
    fields.update(_moe(c, "n_routed_experts", "moe_intermediate_size",
                       shared_experts=c.int("n_shared_experts", 0, allow_zero=True)))
    if fields.get("experts"):
        fields["dense_layers"] = _dense_first(c, fields)
        fields.update(_route_groups(c))
    freq = c.get("moe_layer_freq")
    if freq not in (None, 1):
        notes.append(f"moe_layer_freq {freq} ignored, as transformers' modeling code does")
    return fields


def _route_groups(c: ConfigFields) -> dict[str, Any]:
    """Group-limited routing: topk_group of n_group expert groups per token where the router
    applies it (transformers' DeepseekV3TopkRouter always; V2 under topk_method
    group_limited_greedy); a limit of every group is none."""
    method, groups, topk = c.get("topk_method"), c.get("n_group"), c.get("topk_group")
    grouped = c.get("model_type") in ("deepseek_v3", "kimi_k2") or method in (
        "group_limited_greedy", "noaux_tc")
    if grouped and isinstance(groups, int) and isinstance(topk, int) and 0 < topk < groups:
        return {"route_groups": groups, "route_group_topk": topk}
    return {}


def glm4_moe(c: ConfigFields, notes: list[str]) -> dict[str, Any]:
    """GLM-4.5: attention_bias on q, k, v only; optional per-head QK-norm; MoE iff
    i ≥ first_k_dense_replace with n_shared_experts shared experts; MTP modules beside."""
    fields = {**_base(c, attn_bias=True), "out_bias": False,
              "qk_norm": "head" if c.bool("use_qk_norm") else "none",
              "mtp_layers": c.int("num_nextn_predict_layers", 0, allow_zero=True)}
    fields.update(_moe(c, "n_routed_experts", "moe_intermediate_size",
                       shared_experts=c.int("n_shared_experts", 0, allow_zero=True)))
    if fields.get("experts"):
        fields["dense_layers"] = _dense_first(c, fields)
    return fields


READERS: dict[str, Callable[[ConfigFields, list[str]], dict[str, Any]]] = {
    "llama": llama, "granite": llama, "mistral": mistral, "phi3": mistral, "mixtral": mixtral,
    "qwen2": qwen2, "qwen2_moe": qwen2_moe, "qwen3": qwen3, "qwen3_moe": qwen3_moe,
    "olmo2": olmo2, "granitemoe": granitemoe, "gemma2": gemma2, "gemma3_text": gemma3_text,
    "gpt_oss": gpt_oss, "llama4_text": llama4_text, "deepseek_v2": deepseek,
    "deepseek_v3": deepseek, "glm4_moe": glm4_moe,
}
