"""Read a Hugging Face ``config.json`` into a ModelSpec.

Field names and defaults follow the transformers configuration classes (ECOSYSTEM.md §6.1):
Llama/Mistral/Mixtral/Qwen2 use ``hidden_size``/``num_hidden_layers``/...; GPT-2 uses
``n_embd``/``n_layer``/``n_head``/``n_inner``/``n_positions``; Falcon has ``num_kv_heads``,
``multi_query``, ``new_decoder_architecture``, ``alibi`` and ``bias``. Every problem is an
``InputError(<path>, "<key>: <what is allowed>")`` so the CLI prints one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError
from planner.io.parse import parse_text
from planner.io.read import MAX_CONFIG_BYTES, read_file, shown
from planner.io.validate import MAX_PARAMS
from planner.specs.hf_families import ALIASES, DEFAULTS, NESTED, READERS
from planner.specs.hf_fields import ConfigFields, check_rope, dropout
from planner.specs.hf_fields import heads as read_heads
from planner.specs.hf_vision import vision_params
from planner.specs.model import ModelSpec, validate_model


FALCON = {"falcon", "refinedweb", "refinedwebmodel"}
GPT2 = {"gpt2"}
NEOX = {"gpt_neox"}
SUPPORTED = sorted({*READERS, *ALIASES, *NESTED, *GPT2, *NEOX, *FALCON})
ARCH_FLAGS = ("--layers --hidden --heads --kv-heads --ffn --vocab, and for MoE --experts "
              "--experts-per-token --expert-ffn --shared-experts --dense-layers --moe-every")

# Keys that change neither size, FLOPs nor memory (or that the readers check elsewhere):
# token ids, numerics, rope/scaling, routing rules, initialisation, bookkeeping.
SIZE_NEUTRAL = frozenset("""
_name_or_path architectures auto_map model_type transformers_version torch_dtype dtype
bos_token_id eos_token_id pad_token_id sep_token_id decoder_start_token_id
rope_theta rope_scaling rope_parameters rope_interleave rope_local_base_freq
partial_rotary_factor original_max_position_embeddings rotary_pct rotary_emb_base
rms_norm_eps layer_norm_eps layer_norm_epsilon norm_eps initializer_range initializer_factor
use_cache hidden_act hidden_activation activation_function attn_implementation
output_router_logits router_aux_loss_coef router_z_loss_coef router_jitter_noise
norm_topk_prob n_group topk_group topk_method routed_scaling_factor scoring_func
aux_loss_alpha seq_aux ep_size moe_layer_freq query_pre_attn_scalar attn_logit_softcapping
final_logit_softcapping embedding_multiplier attention_multiplier residual_multiplier
logits_scaling swiglu_limit pretraining_tp max_window_layers use_sliding_window
attn_temperature_tuning floor_scale attn_scale cache_implementation tokenizer_class
return_dict output_attentions output_hidden_states use_bfloat16 quantization_config
image_token_index image_token_id boi_token_index eoi_token_index mm_tokens_per_image
vision_feature_layer vision_feature_select_strategy projector_hidden_act text_config
vision_config for_llm_compressor router_dtype use_qkv_bias bias_dropout_fusion
summary_type summary_use_proj summary_activation summary_proj_to_labels summary_first_dropout
scale_attn_weights scale_attn_by_inverse_layer_idx reorder_and_upcast_attn
use_parallel_residual n_ctx classifier_dropout
""".split())

def _read(path: str | Path, option: str | None) -> tuple[str, dict[str, Any]]:
    """(path read, data) through the one bounded reader (planner.inputs)."""
    opened, text = read_file(path, what="Hugging Face config.json", option=option,
                             dir_file="config.json", max_bytes=MAX_CONFIG_BYTES)
    where = f"{option}: {shown(opened)}" if option else shown(opened)
    data = parse_text(text, "json", where)
    if not isinstance(data, dict):
        raise InputError(where, "top level must be a JSON object of config keys")
    return opened, data


def _gpt2(c: ConfigFields) -> dict[str, Any]:
    hidden = c.int("n_embd")
    heads, kv, head_dim = read_heads(c, hidden, "n_head", None)
    return dict(layers=c.int("n_layer"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("n_inner", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"),
                # absent -> PretrainedConfig default True (lm_head tied to wte)
                tied_embeddings=c.bool("tie_word_embeddings", True), position="learned",
                max_positions=c.int("n_positions", 1024), qkv_bias=True, linear_bias=True,
                norm="layernorm",
                dropout=dropout(c, ("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1))


def _neox(c: ConfigFields) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, kv, head_dim = read_heads(c, hidden, "num_attention_heads", None)
    bias = c.bool("attention_bias", True)
    check_rope(c)
    return dict(layers=c.int("num_hidden_layers"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("intermediate_size", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings", False),
                position="rope", max_positions=c.optional_int("max_position_embeddings"),
                qkv_bias=bias, linear_bias=bias, norm="layernorm",
                dropout=dropout(c, ("hidden_dropout", "attention_dropout"), 0.0))


def _falcon(c: ConfigFields) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    if c.bool("new_decoder_architecture", False):
        kv = c.int("num_kv_heads", heads)
        kv_key = "num_kv_heads"
    else:
        kv = 1 if c.bool("multi_query", True) else heads
        kv_key = "multi_query"
    heads, kv, head_dim = read_heads(c, hidden, "num_attention_heads", kv_key, kv)
    bias = c.bool("bias", False)
    alibi = c.bool("alibi", False)
    c.bool("parallel_attn", True)  # layout only; validated so a typo is caught
    if not alibi:
        check_rope(c)
    return dict(layers=c.int("num_hidden_layers"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("ffn_hidden_size", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings", True),
                position="alibi" if alibi else "rope",
                max_positions=c.optional_int("max_position_embeddings"),
                qkv_bias=bias, linear_bias=bias, norm="layernorm",
                dropout=dropout(c, ("hidden_dropout", "attention_dropout"), 0.0))


# The keys whose size sets the parameter count, across the layouts read here.
SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "n_embd",
             "n_layer", "n_inner", "ffn_hidden_size", "num_local_experts", "num_experts",
             "n_routed_experts", "moe_intermediate_size", "intermediate_size_mlp", "head_dim",
             "kv_lora_rank", "q_lora_rank")


def load_hf_config(path: str | Path, *, option: str | None = None) -> ModelSpec:
    """ModelSpec from a Hugging Face config.json (or a directory holding one); ``option`` is
    the command-line option the path came from, named first in read and parse errors."""
    opened, data = _read(path, option)
    try:
        return model_from_config(data, opened)
    except InputError as e:  # a bad value: named after the option too, as read errors are
        if option and not e.field.startswith(option):
            raise InputError(f"{option}: {e.field}", e.message) from None
        raise


def _config_name(c: ConfigFields) -> tuple[str | None, str]:
    """(the model's name, the key it came from), from the config's own fields, never from the
    folder it sits in (a checkpoint directory says nothing about the model): `_name_or_path`,
    else the first of `architectures`, else `model_type`."""
    path = c.str("_name_or_path")
    if path and path.strip():
        return path.strip(), "_name_or_path"
    arch = c.data.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str) and arch[0].strip():
        return arch[0].strip(), "architectures[0]"
    mtype = c.str("model_type")
    if mtype and mtype.strip():
        return mtype.strip(), "model_type"
    return None, "no name field (_name_or_path, architectures, model_type)"


def _unknown_type(c: ConfigFields, mtype: str) -> InputError:
    shown_type = json.dumps(mtype) if mtype else "missing"
    return c.fail("model_type", f"{shown_type} is not a supported model type; supported: "
                                f"{', '.join(SUPPORTED)}; or give the shape by flags "
                                f"({ARCH_FLAGS})")


def _language_config(data: dict[str, Any], where: str, mtype: str
                     ) -> tuple[ConfigFields, str, list[str], int]:
    """The config whose decoder is planned: the nested ``text_config`` of a multimodal wrapper
    (Llama 4, Gemma 3) with the wrapper's tie setting, and the vision tower's size."""
    notes: list[str] = []
    if mtype not in NESTED:
        mtype = ALIASES.get(mtype, mtype)
        return ConfigFields(where, data, DEFAULTS.get(mtype)), mtype, notes, 0
    text = data.get("text_config")
    if not isinstance(text, dict):
        if "hidden_size" in data:   # a text-only file labelled with the wrapper's type
            return ConfigFields(where, data, DEFAULTS[NESTED[mtype]]), NESTED[mtype], notes, 0
        raise InputError(where, "text_config: must be an object holding the language model's "
                                f"sizes for model_type {mtype}")
    text = dict(text)
    if "tie_word_embeddings" in data:   # the wrapper's lm_head tie is the one transformers uses
        text["tie_word_embeddings"] = data["tie_word_embeddings"]
    vision, vision_note = vision_params(data.get("vision_config"), mtype, text)
    notes.append(vision_note)
    return (ConfigFields(f"{where}: text_config", text, DEFAULTS[NESTED[mtype]]), NESTED[mtype],
            notes, vision)


def config_fields(data: dict[str, Any], where: str = "config.json"
                  ) -> tuple[dict[str, Any], list[str], ConfigFields]:
    """(ModelSpec fields, notes, the fields' reader) of a parsed config.json: the family's
    reader, the vision tower, defaults taken and keys not understood."""
    top = ConfigFields(where, data)
    mtype = (top.str("model_type") or "").lower()
    if mtype not in SUPPORTED:
        raise _unknown_type(top, mtype)
    c, family, notes, vision = _language_config(data, where, mtype)
    if family in READERS:
        fields = READERS[family](c, notes)
    elif family in GPT2:
        fields = _gpt2(c)
    elif family in NEOX:
        fields = _neox(c)
    else:
        fields = _falcon(c)
        notes.append("Falcon counted with two LayerNorms per block (the parallel-attention 7B "
                     "layout has one, so it is over-counted by 2h per layer)")
    if vision:
        fields["vision_params"] = vision
    if fields.get("position") == "learned" and fields.get("max_positions") is None:
        raise c.fail("max_position_embeddings", "required for learned position embeddings")
    if c.defaulted:
        notes.append(f"absent, taken from the {family} configuration class default "
                     f"(transformers 5.24.0): {', '.join(c.defaulted)}")
    unread = sorted(k for k in c.data if k not in c.read and k not in SIZE_NEUTRAL)
    if unread:
        notes.append(f"not understood (not used): {', '.join(map(str, unread[:12]))}")
    label = mtype if mtype == family else f"{mtype} read as {family}"
    return fields, [f"{where} (model_type {label})", *notes], c


def model_from_config(data: dict[str, Any], where: str = "config.json") -> ModelSpec:
    """ModelSpec from an already-parsed config.json dict (`where` names it in errors)."""
    fields, notes, c = config_fields(data, where)
    name, named_by = _config_name(ConfigFields(where, data))
    try:
        source = "; ".join([f"{notes[0]}; name from {named_by}", *notes[1:]])
        spec = validate_model({"name": name, **fields, "source": source})
    except ValidationError as exc:
        # Cross-field rules in ModelSpec that the per-key checks above did not catch.
        first = exc.errors()[0]
        raise InputError(c.where, f"{'.'.join(map(str, first['loc'])) or 'config'}: "
                                  f"{first['msg']}") from None
    if spec.param_count() > MAX_PARAMS:   # named by its largest size key (vocab_size: 10^15)
        key = max((k for k, x in c.data.items() if k in SIZE_KEYS and isinstance(x, int)),
                  key=lambda k: c.data[k], default="config")
        raise c.fail(key, f"{c.data.get(key, '')} makes {spec.param_count():.3g} parameters; "
                          f"at most {MAX_PARAMS:g}")
    return spec
