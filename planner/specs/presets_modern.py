"""Presets for today's families, built from their published config.json size fields through
the config reader (a preset and the file it cites plan alike); each source names the config
("as published": the Hub file's size fields; "assembled": each field's source) and the published
size. tests/test_model_families.py checks each against transformers' count of the same fields."""

from __future__ import annotations

from typing import Any

from planner.specs.hf_config import config_fields
from planner.specs.model import ModelSpec

# (preset, display name, model_type, aliases, source, size fields of the config.json)
PUBLISHED_CONFIGS: list[tuple[str, str, str, list[str], str, dict[str, Any]]] = [
    ('deepseek-v3', 'DeepSeek-V3', 'deepseek_v3',
     ['deepseek-ai/DeepSeek-V3', 'deepseek-ai/DeepSeek-V3-Base', 'deepseek-v3-671b'],
     'deepseek-ai/DeepSeek-V3 config.json as published; published size 671B main model; HF '
     "card '685B' = 671B + 14B MTP module / 37B (36.6B incl. 0.9B output head; excl. input "
     'embedding) active (deepseek-ai/DeepSeek-V3 README.md and README_WEIGHTS.md',
     {'attention_bias': False, 'first_k_dense_replace': 3, 'hidden_size': 7168,
      'intermediate_size': 18432, 'kv_lora_rank': 512, 'max_position_embeddings': 163840,
      'moe_intermediate_size': 2048, 'n_routed_experts': 256, 'n_shared_experts': 1,
      'num_attention_heads': 128, 'num_experts_per_tok': 8, 'num_hidden_layers': 61,
      'num_key_value_heads': 128, 'num_nextn_predict_layers': 1, 'q_lora_rank': 1536,
      'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64, 'tie_word_embeddings': False,
      'v_head_dim': 128, 'vocab_size': 129280, 'n_group': 8, 'topk_group': 4,
      'topk_method': 'noaux_tc'}),
    ('kimi-k2', 'Kimi-K2', 'kimi_k2',
     ['moonshotai/Kimi-K2-Instruct', 'moonshotai/Kimi-K2-Base'],
     'moonshotai/Kimi-K2-Instruct config.json as published; published size 1T (tech report: '
     '1.04T) / 32B active (moonshotai/Kimi-K2 README / Kimi K2 tech report arXiv 2507.20534)',
     {'attention_bias': False, 'first_k_dense_replace': 1, 'hidden_size': 7168,
      'intermediate_size': 18432, 'kv_lora_rank': 512, 'max_position_embeddings': 131072,
      'moe_intermediate_size': 2048, 'n_routed_experts': 384, 'n_shared_experts': 1,
      'num_attention_heads': 64, 'num_experts_per_tok': 8, 'num_hidden_layers': 61,
      'num_key_value_heads': 64, 'num_nextn_predict_layers': 0, 'q_lora_rank': 1536,
      'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64, 'tie_word_embeddings': False,
      'v_head_dim': 128, 'vocab_size': 163840}),
    ('deepseek-v2-lite', 'DeepSeek-V2-Lite', 'deepseek_v2',
     ['deepseek-ai/DeepSeek-V2-Lite'],
     'deepseek-ai/DeepSeek-V2-Lite config.json as published; published size 15.7B / 2.4B '
     'active (DeepSeek-V2 paper arXiv 2405.04434 (V2-Lite); deepseek-ai/DeepSeek-V2-Lite '
     'model)',
     {'attention_bias': False, 'first_k_dense_replace': 1, 'hidden_size': 2048,
      'intermediate_size': 10944, 'kv_lora_rank': 512, 'max_position_embeddings': 163840,
      'moe_intermediate_size': 1408, 'n_routed_experts': 64, 'n_shared_experts': 2,
      'num_attention_heads': 16, 'num_experts_per_tok': 6, 'num_hidden_layers': 27,
      'num_key_value_heads': 16, 'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64,
      'v_head_dim': 128, 'vocab_size': 102400, 'q_lora_rank': None}),
    ('qwen3-0.6b', 'Qwen3-0.6B', 'qwen3',
     ['Qwen/Qwen3-0.6B'],
     'Qwen/Qwen3-0.6B config.json as published; published size 0.6B (0.44B non-embedding) '
     '(Qwen/Qwen3-0.6B model card)',
     {'attention_bias': False, 'head_dim': 128, 'hidden_size': 1024, 'intermediate_size': 3072,
      'max_position_embeddings': 40960, 'num_attention_heads': 16, 'num_hidden_layers': 28,
      'num_key_value_heads': 8, 'sliding_window': None, 'tie_word_embeddings': True,
      'vocab_size': 151936}),
    ('qwen3-1.7b', 'Qwen3-1.7B', 'qwen3',
     ['Qwen/Qwen3-1.7B'],
     'Qwen/Qwen3-1.7B config.json as published; published size 1.7B (1.4B non-embedding) '
     '(Qwen/Qwen3-1.7B model card)',
     {'attention_bias': False, 'head_dim': 128, 'hidden_size': 2048, 'intermediate_size': 6144,
      'max_position_embeddings': 40960, 'num_attention_heads': 16, 'num_hidden_layers': 28,
      'num_key_value_heads': 8, 'sliding_window': None, 'tie_word_embeddings': True,
      'vocab_size': 151936}),
    ('qwen3-4b', 'Qwen3-4B', 'qwen3',
     ['Qwen/Qwen3-4B'],
     "assembled field by field (sizes: Lightning-AI/litgpt, litgpt/config.py ('Qwen3-4B{}' "
     'entry, which cites https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json); '
     'tie_word_embeddings: THUDM/slime, scripts/models/qwen3-4B.sh (no --untie-embeddings-and-'
     'output-weights) and the model card: 4.0B total vs 3.6B non-embedding = one 151936x2560 '
     'matrix; family_f); published size 4.0B (3.6B non-embedding) (Qwen/Qwen3-4B(-Base) model '
     'card',
     {'attention_bias': False, 'head_dim': 128, 'vocab_size': 151936,
      'max_position_embeddings': 40960, 'sliding_window': None, 'hidden_size': 2560,
      'intermediate_size': 9728, 'num_hidden_layers': 36, 'num_attention_heads': 32,
      'num_key_value_heads': 8, 'tie_word_embeddings': True}),
    ('qwen3-8b', 'Qwen3-8B', 'qwen3',
     ['Qwen/Qwen3-8B'],
     'Qwen/Qwen3-8B config.json as published; published size 8.2B (6.95B non-embedding) '
     '(Qwen/Qwen3-8B model card)',
     {'attention_bias': False, 'head_dim': 128, 'hidden_size': 4096, 'intermediate_size': 12288,
      'max_position_embeddings': 40960, 'num_attention_heads': 32, 'num_hidden_layers': 36,
      'num_key_value_heads': 8, 'sliding_window': None, 'tie_word_embeddings': False,
      'vocab_size': 151936}),
    ('qwen3-14b', 'Qwen3-14B', 'qwen3',
     ['Qwen/Qwen3-14B'],
     "assembled field by field (sizes: Lightning-AI/litgpt, litgpt/config.py ('Qwen3-14B{}' "
     'entry citing https://huggingface.co/Qwen/Qwen3-14B/blob/main/config.json); '
     'tie_word_embeddings: THUDM/slime, scripts/models/qwen3-14B.sh (--untie-embeddings-and-'
     'output-weights); model card 14.8B total vs 13.2B non-embedding; cross_check: '
     'THUDM/slime, scripts/models/qwen); published size 14.8B (13.2B non-embedding) '
     '(Qwen/Qwen3-14B model card',
     {'attention_bias': False, 'head_dim': 128, 'vocab_size': 151936,
      'max_position_embeddings': 40960, 'sliding_window': None, 'hidden_size': 5120,
      'intermediate_size': 17408, 'num_hidden_layers': 40, 'num_attention_heads': 40,
      'num_key_value_heads': 8, 'tie_word_embeddings': False}),
    ('qwen3-32b', 'Qwen3-32B', 'qwen3',
     ['Qwen/Qwen3-32B'],
     'Qwen/Qwen3-32B config.json as published; published size 32.8B (31.2B non-embedding) '
     '(Qwen/Qwen3-32B model card)',
     {'attention_bias': False, 'head_dim': 128, 'hidden_size': 5120, 'intermediate_size': 25600,
      'max_position_embeddings': 40960, 'num_attention_heads': 64, 'num_hidden_layers': 64,
      'num_key_value_heads': 8, 'sliding_window': None, 'tie_word_embeddings': False,
      'vocab_size': 151936}),
    ('qwen3-30b-a3b', 'Qwen3-30B-A3B', 'qwen3_moe',
     ['Qwen/Qwen3-30B-A3B'],
     'Qwen/Qwen3-30B-A3B config.json as published; published size 30.5B / 3.3B active '
     '(Qwen/Qwen3-30B-A3B model card)',
     {'attention_bias': False, 'decoder_sparse_step': 1, 'head_dim': 128, 'hidden_size': 2048,
      'intermediate_size': 6144, 'max_position_embeddings': 40960, 'mlp_only_layers': [],
      'moe_intermediate_size': 768, 'num_attention_heads': 32, 'num_experts': 128,
      'num_experts_per_tok': 8, 'num_hidden_layers': 48, 'num_key_value_heads': 4,
      'sliding_window': None, 'tie_word_embeddings': False, 'vocab_size': 151936}),
    ('qwen3-235b-a22b', 'Qwen3-235B-A22B', 'qwen3_moe',
     ['Qwen/Qwen3-235B-A22B'],
     'Qwen/Qwen3-235B-A22B config.json as published; published size 235B / 22B active '
     '(Qwen/Qwen3-235B-A22B model card)',
     {'attention_bias': False, 'decoder_sparse_step': 1, 'head_dim': 128, 'hidden_size': 4096,
      'intermediate_size': 12288, 'max_position_embeddings': 40960, 'mlp_only_layers': [],
      'moe_intermediate_size': 1536, 'num_attention_heads': 64, 'num_experts': 128,
      'num_experts_per_tok': 8, 'num_hidden_layers': 94, 'num_key_value_heads': 4,
      'sliding_window': None, 'tie_word_embeddings': False, 'vocab_size': 151936}),
    ('qwen1.5-moe-a2.7b', 'Qwen1.5-MoE-A2.7B', 'qwen2_moe',
     ['Qwen/Qwen1.5-MoE-A2.7B'],
     'Qwen/Qwen1.5-MoE-A2.7B config.json as published; published size 14.3B / 2.7B active '
     '(Qwen1.5-MoE blog / Qwen/Qwen1.5-MoE-A2.7B model card)',
     {'hidden_size': 2048, 'intermediate_size': 5632, 'max_position_embeddings': 32768,
      'num_attention_heads': 16, 'num_hidden_layers': 24, 'num_key_value_heads': 16,
      'sliding_window': 32768, 'tie_word_embeddings': False, 'vocab_size': 151936,
      'decoder_sparse_step': 1, 'moe_intermediate_size': 1408,
      'shared_expert_intermediate_size': 5632, 'num_experts_per_tok': 4, 'num_experts': 60}),
    ('gpt-oss-20b', 'gpt-oss-20b', 'gpt_oss',
     ['openai/gpt-oss-20b'],
     'openai/gpt-oss-20b config.json as published; published size 20.91B / 3.61B (excludes '
     'input embedding) active (OpenAI gpt-oss model card, arXiv 2508.10925, Table 1)',
     {'attention_bias': True, 'experts_per_token': 4, 'head_dim': 64, 'hidden_size': 2880,
      'intermediate_size': 2880, 'max_position_embeddings': 131072, 'num_attention_heads': 64,
      'num_experts_per_tok': 4, 'num_hidden_layers': 24, 'num_key_value_heads': 8,
      'num_local_experts': 32, 'sliding_window': 128, 'tie_word_embeddings': False,
      'vocab_size': 201088}),
    ('gpt-oss-120b', 'gpt-oss-120b', 'gpt_oss',
     ['openai/gpt-oss-120b'],
     'openai/gpt-oss-120b config.json as published; published size 116.83B / 5.13B (excludes '
     'input embedding) active (OpenAI gpt-oss model card, arXiv 2508.10925, Table 1)',
     {'attention_bias': True, 'experts_per_token': 4, 'head_dim': 64, 'hidden_size': 2880,
      'intermediate_size': 2880, 'max_position_embeddings': 131072, 'num_attention_heads': 64,
      'num_experts_per_tok': 4, 'num_hidden_layers': 36, 'num_key_value_heads': 8,
      'num_local_experts': 128, 'sliding_window': 128, 'tie_word_embeddings': False,
      'vocab_size': 201088}),
    ('llama4-scout', 'Llama-4-Scout-17B-16E', 'llama4',
     ['meta-llama/Llama-4-Scout-17B-16E', 'llama-4-scout'],
     'assembled field by field (text_config: ai-dynamo/aiconfigurator, aic-'
     'core/src/aiconfigurator_core/model_configs/meta-llama--'
     'Llama-4-Scout-17B-16E-Instruct_config.json (text_config copied as published; '
     'vision_config: aws-neuron/neuronx-distributed-inference '
     'test/unit/models/llama4/test_modelling_llama4.py (LLAMA4_SCOUT_MINIMAL_MOCK_CONFIG: '
     'hidden 1408, 34); published size 109B (incl. vision) / 17B active (meta-'
     'llama/Llama-4-Scout-17B-16E model card; huggingface/blog llama4-release.md)',
     {
      'text_config': {'attention_bias': False, 'attention_chunk_size': 8192, 'head_dim': 128,
                      'hidden_size': 5120, 'interleave_moe_layer_step': 1,
                      'intermediate_size': 8192, 'intermediate_size_mlp': 16384,
                      'max_position_embeddings': 10485760, 'num_attention_heads': 40,
                      'num_experts_per_tok': 1, 'num_hidden_layers': 48,
                      'num_key_value_heads': 8, 'num_local_experts': 16, 'use_qk_norm': True,
                      'vocab_size': 202048, 'tie_word_embeddings': False},
      'vision_config': {'hidden_size': 1408, 'intermediate_size': 5632, 'num_hidden_layers': 34,
                        'num_attention_heads': 16, 'image_size': 336, 'patch_size': 14,
                        'num_channels': 3, 'pixel_shuffle_ratio': 0.5,
                        'vision_output_dim': 4096, 'projector_input_dim': 4096,
                        'projector_output_dim': 4096}}),
    ('llama4-maverick', 'Llama-4-Maverick-17B-128E', 'llama4',
     ['meta-llama/Llama-4-Maverick-17B-128E', 'llama-4-maverick'],
     'assembled field by field (text_config: ai-dynamo/aiconfigurator, aic-'
     'core/src/aiconfigurator_core/model_configs/meta-llama--'
     'Llama-4-Maverick-17B-128E-Instruct_config.json (text_config copied as publi; '
     'vision_config: aws-neuron/neuronx-distributed-inference '
     'test/unit/models/llama4/test_modelling_llama4.py (LLAMA4_SCOUT_MINIMAL_MOCK_CONFIG: '
     'hidden 1408, 34); published size 400B (incl. vision) / 17B active (meta-'
     'llama/Llama-4-Maverick-17B-128E model card; huggingface/blog llama4-release)',
     {
      'text_config': {'attention_bias': False, 'attention_chunk_size': 8192, 'head_dim': 128,
                      'hidden_size': 5120, 'interleave_moe_layer_step': 2,
                      'intermediate_size': 8192, 'intermediate_size_mlp': 16384,
                      'max_position_embeddings': 1048576, 'num_attention_heads': 40,
                      'num_experts_per_tok': 1, 'num_hidden_layers': 48,
                      'num_key_value_heads': 8, 'num_local_experts': 128, 'use_qk_norm': False,
                      'vocab_size': 202048, 'tie_word_embeddings': False},
      'vision_config': {'hidden_size': 1408, 'intermediate_size': 5632, 'num_hidden_layers': 34,
                        'num_attention_heads': 16, 'image_size': 336, 'patch_size': 14,
                        'num_channels': 3, 'pixel_shuffle_ratio': 0.5,
                        'vision_output_dim': 4096, 'projector_input_dim': 4096,
                        'projector_output_dim': 4096}}),
    ('gemma3-1b', 'Gemma-3-1B', 'gemma3_text',
     ['google/gemma-3-1b-pt'],
     'google/gemma-3-1b-it config.json as published; published size 1B: 302M embedding + 698M '
     'non-embedding (Gemma 3 technical report arXiv 2503.19786, Table 1)',
     {'attention_bias': False, 'head_dim': 256, 'hidden_size': 1152, 'intermediate_size': 6912,
      'max_position_embeddings': 32768, 'num_attention_heads': 4, 'num_hidden_layers': 26,
      'num_key_value_heads': 1, 'sliding_window': 512, 'sliding_window_pattern': 6,
      'vocab_size': 262144, 'tie_word_embeddings': True}),
    ('gemma3-4b', 'Gemma-3-4B', 'gemma3',
     ['google/gemma-3-4b-pt'],
     'assembled field by field (text_config: huggingface/transformers, '
     'src/transformers/models/gemma3/convert_gemma3_weights.py (_VARIANTS, _VISION_CONFIG) '
     'gemma3_4b; vocab_size 262208 (checkpoint embeddin; vision_config: '
     'huggingface/transformers, src/transformers/models/gemma3/convert_gemma3_weights.py '
     '(_VARIANTS, _VISION_CONFIG) _VISION_CONFIG (SigLIP-So400m); published size 4B: 417M '
     'vision + 675M embedding + 3,209M non-embedding (Gemma 3 technical report arXiv '
     '2503.19786, Table 1)',
     {'tie_word_embeddings': True,
      'text_config': {'hidden_size': 2560, 'intermediate_size': 10240, 'num_hidden_layers': 34,
                      'num_attention_heads': 8, 'num_key_value_heads': 4, 'head_dim': 256,
                      'sliding_window': 1024, 'sliding_window_pattern': 6, 'vocab_size': 262208,
                      'max_position_embeddings': 131072, 'attention_bias': False},
      'vision_config': {'hidden_size': 1152, 'intermediate_size': 4304, 'num_hidden_layers': 27,
                        'num_attention_heads': 16, 'num_channels': 3, 'image_size': 896,
                        'patch_size': 14, 'layer_norm_eps': 1e-06, 'vision_use_head': False}}),
    ('gemma3-12b', 'Gemma-3-12B', 'gemma3',
     ['google/gemma-3-12b-pt'],
     'assembled field by field (text_config: huggingface/transformers, '
     'src/transformers/models/gemma3/convert_gemma3_weights.py (_VARIANTS, _VISION_CONFIG) '
     'gemma3_12b; vocab_size 262208 (checkpoint embeddi; vision_config: '
     'huggingface/transformers, src/transformers/models/gemma3/convert_gemma3_weights.py '
     '(_VARIANTS, _VISION_CONFIG) _VISION_CONFIG (SigLIP-So400m); published size 12B: 417M '
     'vision + 1,012M embedding + 10,759M non-embedding (Gemma 3 technical report arXiv '
     '2503.19786, Table 1)',
     {'tie_word_embeddings': True,
      'text_config': {'hidden_size': 3840, 'intermediate_size': 15360, 'num_hidden_layers': 48,
                      'num_attention_heads': 16, 'num_key_value_heads': 8, 'head_dim': 256,
                      'sliding_window': 1024, 'sliding_window_pattern': 6, 'vocab_size': 262208,
                      'max_position_embeddings': 131072, 'attention_bias': False},
      'vision_config': {'hidden_size': 1152, 'intermediate_size': 4304, 'num_hidden_layers': 27,
                        'num_attention_heads': 16, 'num_channels': 3, 'image_size': 896,
                        'patch_size': 14, 'layer_norm_eps': 1e-06, 'vision_use_head': False}}),
    ('gemma3-27b', 'Gemma-3-27B', 'gemma3',
     ['google/gemma-3-27b-pt'],
     'assembled field by field (text_config: huggingface/transformers, '
     'src/transformers/models/gemma3/convert_gemma3_weights.py (_VARIANTS, _VISION_CONFIG) '
     'gemma3_27b; vocab_size 262208 (checkpoint embeddi; vision_config: '
     'huggingface/transformers, src/transformers/models/gemma3/convert_gemma3_weights.py '
     '(_VARIANTS, _VISION_CONFIG) _VISION_CONFIG (SigLIP-So400m); published size 27B: 417M '
     'vision + 1,416M embedding + 25,600M non-embedding (Gemma 3 technical report arXiv '
     '2503.19786, Table 1)',
     {'tie_word_embeddings': True,
      'text_config': {'hidden_size': 5376, 'intermediate_size': 21504, 'num_hidden_layers': 62,
                      'num_attention_heads': 32, 'num_key_value_heads': 16, 'head_dim': 128,
                      'sliding_window': 1024, 'sliding_window_pattern': 6, 'vocab_size': 262208,
                      'max_position_embeddings': 131072, 'attention_bias': False},
      'vision_config': {'hidden_size': 1152, 'intermediate_size': 4304, 'num_hidden_layers': 27,
                        'num_attention_heads': 16, 'num_channels': 3, 'image_size': 896,
                        'patch_size': 14, 'layer_norm_eps': 1e-06, 'vision_use_head': False}}),
    ('gemma2-9b', 'Gemma-2-9B', 'gemma2',
     ['google/gemma-2-9b'],
     'google/gemma-2-9b config.json as published; published size 9B (8.32B non-embedding + '
     '0.92B embedding) (Gemma 2 technical report arXiv 2408.00118, parameter-count table)',
     {'attention_bias': False, 'head_dim': 256, 'hidden_size': 3584, 'intermediate_size': 14336,
      'max_position_embeddings': 8192, 'num_attention_heads': 16, 'num_hidden_layers': 42,
      'num_key_value_heads': 8, 'sliding_window': 4096, 'vocab_size': 256000,
      'tie_word_embeddings': True}),
    ('gemma2-27b', 'Gemma-2-27B', 'gemma2',
     ['google/gemma-2-27b'],
     'google/gemma-2-27b config.json as published; published size 27B (26.05B non-embedding + '
     '1.18B embedding) (Gemma 2 technical report arXiv 2408.00118, parameter-count table)',
     {'attention_bias': False, 'head_dim': 128, 'hidden_size': 4608, 'intermediate_size': 36864,
      'max_position_embeddings': 8192, 'num_attention_heads': 32, 'num_hidden_layers': 46,
      'num_key_value_heads': 16, 'sliding_window': 4096, 'vocab_size': 256000,
      'tie_word_embeddings': True}),
    ('mistral-7b-v0.3', 'Mistral-7B-v0.3', 'mistral',
     ['mistralai/Mistral-7B-v0.3', 'mistral-7b'],
     'mistralai/Mistral-7B-v0.3 config.json as published; published size 7.25B '
     '(mistralai/Mistral-7B-v0.3 model card (safetensors size))',
     {'hidden_size': 4096, 'intermediate_size': 14336, 'max_position_embeddings': 32768,
      'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 8,
      'sliding_window': None, 'tie_word_embeddings': False, 'vocab_size': 32768}),
    ('mistral-small-24b', 'Mistral-Small-24B-Base-2501', 'mistral',
     ['mistralai/Mistral-Small-24B-Base-2501', 'mistral-small'],
     'assembled field by field (sizes: NVIDIA/TensorRT-LLM '
     'tests/unittest/_torch/modeling/test_modeling_mistral.py (mistral_small_3_1_24b_config '
     'text_config: 5120/32768/40 layers/32 heads/8 kv/head_d; vocab/context: Mistral-'
     'Small-24B-Instruct-2501 model card: Tekken tokenizer with 131k vocabulary, 32k context '
     'window); published size 24B (Mistral-Small-24B-Instruct-2501 model card)',
     {'hidden_size': 5120, 'intermediate_size': 32768, 'num_hidden_layers': 40,
      'num_attention_heads': 32, 'num_key_value_heads': 8, 'head_dim': 128,
      'vocab_size': 131072, 'max_position_embeddings': 32768, 'sliding_window': None,
      'tie_word_embeddings': False}),
    ('phi3-mini-4k', 'Phi-3-mini-4k', 'phi3',
     [],
     'assembled field by field (sizes: Lightning-AI/litgpt, litgpt/config.py '
     "('Phi-3-mini-4k-instruct', citing "
     'https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json: padded '
     "vo; cross_check: mlc-ai/mlc-llm, python/mlc_llm/model/model_preset.py ['phi-3_5'] "
     '(Phi-3.5-mini: identical 3072/8192/32/32/32064 shape); abhibambhaniya/GenZ-LLM-Anal); '
     'published size 3.8B (keras-hub preset: 3,821,079,552) (Phi-3 technical report arXiv '
     '2404.14219; keras-team/keras-hub keras_hub/src/mode)',
     {'hidden_size': 3072, 'intermediate_size': 8192, 'num_hidden_layers': 32,
      'num_attention_heads': 32, 'num_key_value_heads': 32, 'vocab_size': 32064,
      'max_position_embeddings': 4096, 'sliding_window': 2047, 'tie_word_embeddings': False,
      'attention_bias': False}),
    ('phi3-medium-4k', 'Phi-3-medium-4k', 'phi3',
     [],
     'assembled field by field (sizes: abhibambhaniya/GenZ-LLM-Analyzer, '
     'GenZ/Models/Model_sets/microsoft.py phi3medium_config (cites '
     'https://huggingface.co/microsoft/Phi-3-medium-4k-instruct/blob/ma; tie/bias: Phi3Config '
     'defaults in transformers 5.24.0); published size 14B (Phi-3 technical report arXiv '
     '2404.14219; microsoft/Phi-3-medium model card (copy)',
     {'hidden_size': 5120, 'intermediate_size': 17920, 'num_hidden_layers': 40,
      'num_attention_heads': 40, 'num_key_value_heads': 10, 'vocab_size': 32064,
      'max_position_embeddings': 4096, 'sliding_window': 2047, 'tie_word_embeddings': False,
      'attention_bias': False}),
    ('olmo2-7b', 'OLMo-2-1124-7B', 'olmo2',
     [],
     'allenai/OLMo-2-1124-7B config.json as published; published size 7B (7.3B) (2 OLMo 2 '
     'Furious, arXiv 2501.00656)',
     {'hidden_size': 4096, 'intermediate_size': 11008, 'max_position_embeddings': 4096,
      'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 32,
      'tie_word_embeddings': False, 'vocab_size': 100352, 'attention_bias': False}),
    ('olmo2-13b', 'OLMo-2-1124-13B', 'olmo2',
     [],
     'allenai/OLMo-2-1124-13B config.json as published; published size 13B (13.7B) (2 OLMo 2 '
     'Furious, arXiv 2501.00656)',
     {'hidden_size': 5120, 'intermediate_size': 13824, 'max_position_embeddings': 4096,
      'num_attention_heads': 40, 'num_hidden_layers': 40, 'num_key_value_heads': 40,
      'tie_word_embeddings': False, 'vocab_size': 100352, 'attention_bias': False}),
    ('granite-3.0-8b', 'Granite-3.0-8B', 'granite',
     [],
     'assembled field by field (sizes: ibm-granite/granite-3.0-language-models, paper.pdf '
     'Table 1 + Sec 2.1 (embedding 4096, 40 layers, head 128, 32 heads, 8 KV, MLP 12800, '
     'SwiGLU; 8.1B params); tie_word_embeddings: ibm-granite/granite-3.0-language-models, '
     "paper.pdf Table 1 + Sec 2.1 Sec 2.1: 'we also share parameters between the input "
     'embedding and the output); published size 8.1B (ibm-granite/granite-3.0-language-models '
     'paper.pdf Table 1)',
     {'vocab_size': 49155, 'tie_word_embeddings': True, 'attention_bias': False,
      'mlp_bias': False, 'max_position_embeddings': 4096, 'hidden_size': 4096,
      'num_hidden_layers': 40, 'num_attention_heads': 32, 'num_key_value_heads': 8,
      'intermediate_size': 12800}),
    ('granite-3.0-3b-a800m', 'Granite-3.0-3B-A800M', 'granitemoe',
     [],
     'assembled field by field (sizes: ibm-granite/granite-3.0-language-models, paper.pdf '
     'Table 1 + Sec 2.1 (embedding 1536, 32 layers, 24 heads, 8 KV, expert MLP 512, 40 experts'
     ' top-8; 3.3B total / ; tie_word_embeddings: same paper Sec 2.2: MoE models use the dense'
     ' architecture with MLP replaced by MoE); published size 3.3B / 800M active (ibm-'
     'granite/granite-3.0-language-models paper.pdf Table 1)',
     {'vocab_size': 49155, 'tie_word_embeddings': True, 'attention_bias': False,
      'mlp_bias': False, 'max_position_embeddings': 4096, 'hidden_size': 1536,
      'num_hidden_layers': 32, 'num_attention_heads': 24, 'num_key_value_heads': 8,
      'intermediate_size': 512, 'num_local_experts': 40, 'num_experts_per_tok': 8}),
    ('granite-3.0-1b-a400m', 'Granite-3.0-1B-A400M', 'granitemoe',
     [],
     'assembled field by field (sizes: ibm-granite/granite-3.0-language-models, paper.pdf '
     'Table 1 + Sec 2.1 (embedding 1024, 24 layers, 16 heads, 8 KV, expert MLP 512, 32 experts'
     ' top-8; 1.3B / 400M a); published size 1.3B / 400M active (ibm-'
     'granite/granite-3.0-language-models paper.pdf Table 1)',
     {'vocab_size': 49155, 'tie_word_embeddings': True, 'attention_bias': False,
      'mlp_bias': False, 'max_position_embeddings': 4096, 'hidden_size': 1024,
      'num_hidden_layers': 24, 'num_attention_heads': 16, 'num_key_value_heads': 8,
      'intermediate_size': 512, 'num_local_experts': 32, 'num_experts_per_tok': 8}),
    ('glm-4.5', 'GLM-4.5', 'glm4_moe',
     ['zai-org/GLM-4.5'],
     'assembled field by field (fields: NVIDIA-NeMo/Megatron-Bridge '
     'tests/unit_tests/models/glm/test_glm45_bridge.py glm45_355b_config fixture (mirrors zai-'
     'org/GLM-4.5 config.json); num_nextn_predict_layers/shape: NVIDIA-NeMo/Megatron-Bridge '
     'docs/models/glm/glm45.md (92 layers: 3 dense + 89 MoE; MTP 1 layer) and THUDM/slime, '
     'scripts/models/glm4.5-355B-A32B.sh;); published size 355B / 32B active (zai-org/GLM-4.5 '
     'README.md; transformers docs/source/en/model_doc/glm4_moe.md)',
     {'attention_bias': True, 'head_dim': 128, 'vocab_size': 151552,
      'max_position_embeddings': 131072, 'tie_word_embeddings': False, 'n_shared_experts': 1,
      'num_experts_per_tok': 8, 'num_nextn_predict_layers': 1, 'num_attention_heads': 96,
      'num_key_value_heads': 8, 'hidden_size': 5120, 'intermediate_size': 12288,
      'moe_intermediate_size': 1536, 'num_hidden_layers': 92, 'n_routed_experts': 160,
      'first_k_dense_replace': 3, 'use_qk_norm': True}),
    ('glm-4.5-air', 'GLM-4.5-Air', 'glm4_moe',
     ['zai-org/GLM-4.5-Air'],
     'assembled field by field (fields: NVIDIA-NeMo/Megatron-Bridge '
     'tests/unit_tests/models/glm/test_glm45_bridge.py glm45_air_106b_config fixture; '
     'routed_scaling_factor/MTP: NVIDIA-NeMo/Megatron-Bridge docs/models/glm/glm45.md (Air: 46'
     ' layers, first dense, 128 experts, top-8, 1.0x scaling, no QK norm); cross_check: '
     'THUDM/slime, scripts/models/glm4.5-106B-A12B); published size 106B / 12B active (zai-'
     'org/GLM-4.5 README.md; transformers docs/source/en/model_doc/glm4_moe.md)',
     {'attention_bias': True, 'head_dim': 128, 'vocab_size': 151552,
      'max_position_embeddings': 131072, 'tie_word_embeddings': False, 'n_shared_experts': 1,
      'num_experts_per_tok': 8, 'num_nextn_predict_layers': 1, 'num_attention_heads': 96,
      'num_key_value_heads': 8, 'hidden_size': 4096, 'intermediate_size': 10944,
      'moe_intermediate_size': 1408, 'num_hidden_layers': 46, 'n_routed_experts': 128,
      'first_k_dense_replace': 1, 'use_qk_norm': False}),
]


def modern_presets() -> list[tuple[str, ModelSpec, list[str]]]:
    """(name, spec, aliases) for each entry, its fields read as its config.json's would be."""
    entries = []
    for name, display, mtype, aliases, source, fields in PUBLISHED_CONFIGS:
        spec_fields, notes, _ = config_fields({"model_type": mtype, **fields}, name)
        # notes[0] names the file read; the rest are the reader's (vision tower, defaults)
        spec = ModelSpec.with_defaults(name=display, source="; ".join([source, *notes[1:]]),
                                       **spec_fields)
        entries.append((name, spec, aliases))
    return entries
