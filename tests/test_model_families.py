"""Today's model families read right: dtplan's exact counts equal transformers' own (its model
classes built on the meta device, configs only), an unknown model_type is refused (exit 2), and
the JSON outputs carry total and active parameters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planner.specs.hf_config import SUPPORTED, model_from_config
from planner.specs.presets import get_preset
from planner.specs.presets_modern import PUBLISHED_CONFIGS

from conftest import run_dtplan

# Published configs' size fields (the reader tests below; transformers' counts of every preset's
# own fields are checked in test_presets_equal_transformers), one or more per supported type.
CONFIGS: dict[str, dict[str, Any]] = {
    # deepseek-v3: size fields of its published config.json
    'deepseek-v3': {"attention_bias": False, "first_k_dense_replace": 3, "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False, "v_head_dim": 128, "vocab_size": 129280},
    # kimi-k2: size fields of its published config.json
    'kimi-k2': {"attention_bias": False, "first_k_dense_replace": 1, "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "model_type": "kimi_k2", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 384, "n_shared_experts": 1, "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False, "v_head_dim": 128, "vocab_size": 163840},
    # deepseek-v2-lite: size fields of its published config.json
    'deepseek-v2-lite': {"attention_bias": False, "first_k_dense_replace": 1, "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512, "model_type": "deepseek_v2", "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "q_lora_rank": None},
    # qwen3-8b: size fields of its published config.json
    'qwen3-8b': {"attention_bias": False, "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 151936},
    # qwen3-0.6b: size fields of its published config.json
    'qwen3-0.6b': {"attention_bias": False, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "sliding_window": None, "tie_word_embeddings": True, "vocab_size": 151936},
    # qwen3-30b-a3b: size fields of its published config.json
    'qwen3-30b-a3b': {"attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 151936},
    # qwen3-235b-a22b: size fields of its published config.json
    'qwen3-235b-a22b': {"attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 151936},
    # qwen1.5-moe-a2.7b: size fields of its published config.json
    'qwen1.5-moe-a2.7b': {"hidden_size": 2048, "intermediate_size": 5632, "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "sliding_window": 32768, "tie_word_embeddings": False, "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60},
    # llama4-scout: size fields of its published config.json
    'llama4-scout': {"model_type": "llama4", "text_config": {"attention_bias": False, "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 1, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16, "use_qk_norm": True, "vocab_size": 202048, "tie_word_embeddings": False}, "vision_config": {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "num_channels": 3, "pixel_shuffle_ratio": 0.5, "vision_output_dim": 4096, "projector_input_dim": 4096, "projector_output_dim": 4096, "multi_modal_projector_bias": False}},
    # llama4-maverick: size fields of its published config.json
    'llama4-maverick': {"model_type": "llama4", "text_config": {"attention_bias": False, "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128, "use_qk_norm": False, "vocab_size": 202048, "tie_word_embeddings": False}, "vision_config": {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "num_channels": 3, "pixel_shuffle_ratio": 0.5, "vision_output_dim": 4096, "projector_input_dim": 4096, "projector_output_dim": 4096, "multi_modal_projector_bias": False}},
    # gemma2-9b: size fields of its published config.json
    'gemma2-9b': {"attention_bias": False, "head_dim": 256, "hidden_size": 3584, "intermediate_size": 14336, "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 256000, "tie_word_embeddings": True},
    # gemma3-1b: size fields of its published config.json
    'gemma3-1b': {"attention_bias": False, "head_dim": 256, "hidden_size": 1152, "intermediate_size": 6912, "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144, "tie_word_embeddings": True},
    # gemma3-4b: size fields of its published config.json
    'gemma3-4b': {"model_type": "gemma3", "tie_word_embeddings": True, "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024, "sliding_window_pattern": 6, "vocab_size": 262208, "attention_bias": False}, "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16, "num_channels": 3, "image_size": 896, "patch_size": 14, "layer_norm_eps": 1e-06, "vision_use_head": False, "model_type": "siglip_vision_model"}},
    # gpt-oss-20b: size fields of its published config.json
    'gpt-oss-20b': {"attention_bias": True, "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"], "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088},
    # gpt-oss-120b: size fields of its published config.json
    'gpt-oss-120b': {"attention_bias": True, "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"], "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128, "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088},
    # mistral-7b-v0.3: size fields of its published config.json
    'mistral-7b-v0.3': {"hidden_size": 4096, "intermediate_size": 14336, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32768},
    # mixtral-8x7b: size fields of its published config.json
    'mixtral-8x7b': {"hidden_size": 4096, "intermediate_size": 14336, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000},
    # phi3-mini-4k: size fields of its published config.json
    'phi3-mini-4k': {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "sliding_window": 2047, "tie_word_embeddings": False, "attention_bias": False},
    # olmo2-7b: size fields of its published config.json
    'olmo2-7b': {"hidden_size": 4096, "intermediate_size": 11008, "model_type": "olmo2", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "tie_word_embeddings": False, "vocab_size": 100352, "attention_bias": False},
    # granite-3.0-8b: size fields of its published config.json
    'granite-3.0-8b': {"model_type": "granite", "vocab_size": 49155, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False, "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12800},
    # granite-3.0-1b-a400m: size fields of its published config.json
    'granite-3.0-1b-a400m': {"model_type": "granitemoe", "vocab_size": 49155, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 512, "num_local_experts": 32, "num_experts_per_tok": 8},
    # glm-4.5-air: size fields of its published config.json
    'glm-4.5-air': {"model_type": "glm4_moe", "attention_bias": True, "head_dim": 128, "vocab_size": 151552, "tie_word_embeddings": False, "n_shared_experts": 1, "num_experts_per_tok": 8, "num_nextn_predict_layers": 1, "num_attention_heads": 96, "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 46, "n_routed_experts": 128, "first_k_dense_replace": 1, "use_qk_norm": False},
}

# model type -> transformers' model_type (Kimi-K2 publishes kimi_k2 with the DeepSeek-V3 classes)
TX_TYPE = {"kimi_k2": "deepseek_v3"}
NESTED = {"llama4", "gemma3"}


def _transformers_count(cfg: dict[str, Any]) -> tuple[int, int]:
    """(language model parameters, vision tower + projector parameters) as transformers builds
    the model on the meta device (tied weights counted once)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(cfg)
    mtype = TX_TYPE.get(fields.pop("model_type"), cfg["model_type"])
    config = transformers.AutoConfig.for_model(mtype, **fields)
    auto = (transformers.AutoModelForImageTextToText if mtype in NESTED
            else transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(config)
    text = vision = 0
    for name, p in model.named_parameters():   # shared (tied) tensors are yielded once
        if "vision" in name or "multi_modal_projector" in name:
            vision += p.numel()
        else:
            text += p.numel()
    return text, vision


def test_every_supported_type_has_a_published_config():
    covered = {c["model_type"] for c in CONFIGS.values()}
    legacy = {"llama", "gpt2", "gpt_neox", "falcon", "refinedweb", "refinedwebmodel",
              "qwen2", "gemma3_text", "llama4_text", "qwen2_moe"}   # tests/test_models.py, nested
    assert set(SUPPORTED) - covered <= legacy


def test_nested_text_config_read_and_vision_stated():
    cfg = CONFIGS["gemma3-4b"]
    spec = model_from_config(cfg, "gemma3-4b/config.json")
    # Gemma 3 report: 417M vision + 675M embedding + 3,209M non-embedding
    assert spec.param_count() == 3_880_263_168 and spec.vision_params == 419_816_304
    assert "vision tower 419,816,304 parameters" in spec.source
    assert (spec.window, spec.global_every, spec.qk_norm, spec.layer_norms) == (1024, 6, "head", 4)


@pytest.mark.parametrize("name,total,active", [
    ("deepseek-v3", 671_026_404_352, 37_552_282_624),     # 671B / 37B (README)
    ("kimi-k2", 1_026_408_209_408, 32_861_477_888),       # 1T / 32B
    ("qwen3-235b-a22b", 235_093_634_560, 22_190_763_520),  # 235B / 22B
    ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),     # 116.83B; 5.13B active excl. embedding
    ("llama4-maverick", 400_711_848_960, 17_184_691_200),  # 400B with 0.87B vision / 17B
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),     # 46.7B / 12.9B
])
def test_published_totals_and_active(name, total, active):
    spec = model_from_config(CONFIGS[name], f"{name}/config.json")
    assert (spec.param_count(), spec.active_param_count()) == (total, active)


def test_deepseek_v3_structure():
    spec = model_from_config(CONFIGS["deepseek-v3"], "ds/config.json")
    assert spec.moe_layer_ids() == tuple(range(3, 61)) and spec.is_mla
    assert (spec.head_dim, spec.value_dim, spec.q_lora_rank, spec.kv_lora_rank) == (192, 128, 1536, 512)
    # MTP module beside the total: README's 11.5B unique MTP parameters
    assert 11.5e9 < spec.mtp_param_count() < 11.7e9
    # V2-Lite's explicit q_lora_rank null is a direct q projection, not the 1536 default
    lite = model_from_config(CONFIGS["deepseek-v2-lite"], "lite/config.json")
    assert lite.q_lora_rank == 0 and lite.param_count() == 15_706_484_224


def test_layer_patterns():
    maverick = model_from_config(CONFIGS["llama4-maverick"], "m/config.json")
    assert maverick.moe_layer_ids() == tuple(range(1, 48, 2))
    assert maverick.layer_windows()[:4] == (8192, 8192, 8192, 0)
    oss = model_from_config(CONFIGS["gpt-oss-20b"], "o/config.json")
    assert oss.layer_windows()[:4] == (128, 0, 128, 0) and oss.attention_sinks


def test_windows_cut_attention_flops():
    oss = model_from_config(CONFIGS["gpt-oss-20b"], "o/config.json")
    full = model_from_config({**CONFIGS["gpt-oss-20b"], "sliding_window": 0}, "o/config.json")
    s = 131072
    # half the layers see 128 keys instead of s: the score term nearly halves
    ratio = (oss.training_flops_per_token(s) - 6 * oss.matmul_params_per_token()) / \
        (full.training_flops_per_token(s) - 6 * full.matmul_params_per_token())
    assert ratio == pytest.approx((1 + 128 / s) / 2)


def test_unknown_model_type_exits_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["qwen3-8b"], "model_type": "acme_lm"}))
    r = run_dtplan("models", "--model-config", path)
    assert r.code == 2, r.stderr
    line = r.stderr.strip()
    assert '"acme_lm" is not a supported model type' in line and "\n" not in line
    for t in ("deepseek_v3", "gemma3", "gpt_oss", "llama4", "qwen3_moe", "--experts"):
        assert t in line


def test_models_model_config_json_counts(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["deepseek-v3"], "made_up_field": 1}))
    r = run_dtplan("models", "--model-config", path, "-f", "json")
    assert r.code == 0, r.stderr
    (m,) = json.loads(r.stdout)["models"]
    assert (m["params"], m["active_params"], m["moe_layers"]) == \
        (671_026_404_352, 37_552_282_624, 58)
    text = run_dtplan("models", "--model-config", path).stdout
    assert "671,026,404,352" in text and "not understood (not used): made_up_field" in text


def test_estimate_json_carries_total_and_active():
    r = run_dtplan("estimate", "--model", "mixtral-8x7b", "--gpus", "16", "--tp", "2",
                   "-f", "json")
    data = json.loads(r.stdout)
    assert (data["params"], data["active_params"]) == (46_702_792_704, 12_879_925_248)


@pytest.mark.parametrize("entry", PUBLISHED_CONFIGS, ids=[e[0] for e in PUBLISHED_CONFIGS])
def test_presets_equal_transformers(entry):
    # each preset's own config fields, built by transformers: its total and vision tower agree
    name, _, mtype, _, _, fields = entry
    text, vision = _transformers_count({"model_type": mtype, **fields})
    assert (get_preset(name).param_count(), get_preset(name).vision_params) == (text, vision)


def test_moe_shape_flags_count_exactly():
    # 4 layers, h 512, 8 heads, SwiGLU (ffn 1536), vocab 1000; 8 experts of 256, top-2, one
    # shared, the first layer dense. By hand: embedding + head 2·512,000, final norm 512;
    # attention 4·512² + 2 norms = 1,049,600 per layer; dense MLP 3·512·1536 = 2,359,296;
    # MoE MLP 8·393,216 + shared 393,216 + router 4,096 = 3,543,040 (active 1,183,744).
    flags = ["--layers", "4", "--hidden", "512", "--heads", "8", "--mlp", "swiglu",
             "--vocab", "1000", "--experts", "8", "--experts-per-token", "2",
             "--expert-ffn", "256", "--shared-experts", "1", "--dense-layers", "1",
             "--gpus", "8", "-f", "json"]
    data = run_dtplan("estimate", *flags).json()
    fixed = 1_024_512 + 4 * 1_049_600 + 2_359_296
    assert (data["params"], data["active_params"]) == (fixed + 3 * 3_543_040,
                                                       fixed + 3 * 1_183_744)
    # MoE every 2nd layer after the dense first: layers 1 and 3, layer 2 dense too
    every = run_dtplan("estimate", *flags, "--moe-every", "2").json()
    assert every["params"] == fixed + 2_359_296 + 2 * 3_543_040
    bad = run_dtplan("estimate", *flags[:-2], "--experts-per-token", "9")
    assert bad.code == 2 and "--experts-per-token" in bad.stderr


def test_mean_keys_by_window():
    from planner.engine.params import mean_keys
    s = 8192.0
    assert mean_keys(s) == s and mean_keys(s, causal=True) == s            # full (½ applied later)
    # causal sliding window w: Σ_i min(i, w) / s ≈ w − w²/(2s), returned ×2 (full-length units)
    assert mean_keys(s, 1024, causal=True) == pytest.approx(2 * (1024 - 1024**2 / (2 * s)))
    brute = sum(min(i, 1024) for i in range(1, 8193)) / s
    assert mean_keys(s, 1024, causal=True) / 2 == pytest.approx(brute, rel=1e-3)
    # chunked: a query sees the earlier tokens of its chunk; 4 chunks of 2048 → 2048/2 each
    assert mean_keys(s, 2048, chunked=True, causal=True) / 2 == pytest.approx(1024)
    assert mean_keys(s, 16384, causal=True) == s                           # window ≥ s: full


def test_mla_activations_use_latents_and_value_width():
    from planner.engine.activations import layer_activation_terms
    kw = dict(mlp="swiglu", dropout=False, flash=True)
    mla = layer_activation_terms(4096, 1, 7168, 128, 128, 192, 2048, v_head_dim=128,
                                 latent=1536 + 512, **kw)
    assert mla["mla_latent"] == 4096 * 2 * 2 * (1536 + 512)     # 2 copies × 2 bytes
    assert mla["v"] == 4096 * 2 * 128 * 128 and mla["q"] == 4096 * 2 * 128 * 192
    assert mla["proj_in"] == 4096 * 2 * 128 * 128
    gqa = layer_activation_terms(4096, 1, 7168, 128, 128, 192, 2048, **kw)
    assert "mla_latent" not in gqa and gqa["v"] == 4096 * 2 * 128 * 192
