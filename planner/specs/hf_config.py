"""Read a Hugging Face ``config.json`` into a ModelSpec.

Field names and defaults follow the transformers configuration classes (ECOSYSTEM.md §6.1):
Llama/Mistral/Mixtral/Qwen2 use ``hidden_size``/``num_hidden_layers``/...; GPT-2 uses
``n_embd``/``n_layer``/``n_head``/``n_inner``/``n_positions``; Falcon has ``num_kv_heads``,
``multi_query``, ``new_decoder_architecture``, ``alibi`` and ``bias``. Every problem is an
``InputError(<path>, "<key>: <what is allowed>")`` so the CLI prints one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError
from planner.io.parse import parse_text
from planner.io.read import MAX_CONFIG_BYTES, read_file, shown
from planner.specs.model import ModelSpec, validate_model
from planner.io.validate import MAX_PARAMS


LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2"}
FALCON = {"falcon", "refinedweb", "refinedwebmodel"}
GPT2 = {"gpt2"}
NEOX = {"gpt_neox"}


def _read(path: str | Path, option: str | None) -> tuple[str, dict[str, Any]]:
    """(path read, data) through the one bounded reader (planner.inputs)."""
    opened, text = read_file(path, what="Hugging Face config.json", option=option,
                             dir_file="config.json", max_bytes=MAX_CONFIG_BYTES)
    where = f"{option}: {shown(opened)}" if option else shown(opened)
    data = parse_text(text, "json", where)
    if not isinstance(data, dict):
        raise InputError(where, "top level must be a JSON object of config keys")
    return opened, data


class _Cfg:
    """Typed accessors that turn a bad value into InputError(path, "key: ...")."""

    def __init__(self, where: str, data: dict[str, Any]):
        self.where, self.data = where, data

    def fail(self, key: str, message: str) -> InputError:
        return InputError(self.where, f"{key}: {message}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    # optional_int comes before the method `int`: below it, `int` in the class body names it.
    def optional_int(self, key: str, *, allow_zero: bool = False) -> int | None:
        """The integer at `key`, or None where it is absent (or null)."""
        value = self.data.get(key)
        if value is None:
            return None
        # JSON has no int/float split; accept 4096.0 but not 4096.5, and never true/false.
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise self.fail(key, f"must be an integer, got {json.dumps(value)}")
        value = int(value)
        if value < 0 or (value == 0 and not allow_zero):
            kind = "a non-negative" if allow_zero else "a positive"
            raise self.fail(key, f"must be {kind} integer, got {value}")
        return value

    def int(self, key: str, default: int | None = None, *, allow_zero: bool = False) -> int:
        """The integer at `key`, else `default`; absent without a default is an error."""
        value = self.optional_int(key, allow_zero=allow_zero)
        if value is not None:
            return value
        if default is not None:
            return default
        raise self.fail(key, "missing; a positive integer is required")

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {json.dumps(value)}")
        return value

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, got {json.dumps(value)}")
        return float(value)

    def str(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {json.dumps(value)}")
        return value


def _check_rope(c: _Cfg) -> None:
    # Values do not change the parameter count, but a malformed block means a broken file.
    theta = c.number("rope_theta")
    if theta is not None and theta <= 0:
        raise c.fail("rope_theta", f"must be positive, got {theta:g}")
    for key in ("rope_parameters", "rope_scaling"):
        block = c.data.get(key)
        if block is not None and not isinstance(block, dict):
            raise c.fail(key, f"must be an object or null, got {json.dumps(block)}")
        if isinstance(block, dict) and block.get("rope_theta") is not None:
            t = block["rope_theta"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
                raise c.fail(f"{key}.rope_theta", f"must be a positive number, got {json.dumps(t)}")


def _dropout(c: _Cfg, keys: tuple[str, ...], default: float) -> bool:
    for key in keys:
        value = c.number(key)
        if value is not None and value < 0:
            raise c.fail(key, f"must be >= 0, got {value:g}")
        if (default if value is None else value) > 0:
            return True
    return False


def _heads(c: _Cfg, hidden: int, heads_key: str, kv_key: str | None,
           kv: int | None = None) -> tuple[int, int, int]:
    heads = c.int(heads_key)
    if kv is None:
        kv = c.int(kv_key, heads) if kv_key else heads
    if heads % kv:
        raise c.fail(kv_key or heads_key, f"must divide {heads_key} ({heads}); got {kv}")
    head_dim = c.optional_int("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise c.fail(heads_key, f"must divide the hidden size ({hidden}) when head_dim is "
                                    f"absent; got {heads}")
        head_dim = hidden // heads
    return heads, kv, head_dim


def _llama_like(c: _Cfg, mtype: str) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, kv, head_dim = _heads(c, hidden, "num_attention_heads", "num_key_value_heads")
    attention_bias = c.bool("attention_bias", False)
    fields: dict[str, Any] = dict(
        layers=c.int("num_hidden_layers"), hidden=hidden, heads=heads, kv_heads=kv,
        head_dim=head_dim, ffn=c.int("intermediate_size"), mlp="swiglu",
        vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings", False),
        position="rope", max_positions=c.optional_int("max_position_embeddings"),
        # Qwen2's q/k/v projections always carry a bias (transformers modular_qwen2.py).
        qkv_bias=attention_bias or mtype == "qwen2",
        linear_bias=c.bool("mlp_bias", False), norm="rmsnorm",
        dropout=_dropout(c, ("attention_dropout",), 0.0))
    _check_rope(c)
    if attention_bias and not fields["linear_bias"]:
        # ModelSpec has one flag for o_proj and MLP biases; Llama's attention_bias also puts
        # one on o_proj, h per layer, which is left out here.
        fields["_note"] = "; attention_bias o_proj bias (h per layer) not counted"
    # Mixtral: num_local_experts (attribute_map num_experts -> num_local_experts).
    experts_key = "num_local_experts" if c.has("num_local_experts") else "num_experts"
    experts = c.int(experts_key, 0, allow_zero=True)
    if experts:
        top_k = c.int("num_experts_per_tok")
        if top_k > experts:
            raise c.fail("num_experts_per_tok", f"must be at most {experts_key} ({experts}); "
                                                f"got {top_k}")
        fields.update(experts=experts, experts_per_token=top_k,
                      expert_ffn=c.optional_int("moe_intermediate_size"),
                      shared_experts=c.int("n_shared_experts", 0, allow_zero=True),
                      dense_layers=c.int("first_k_dense_replace", 0, allow_zero=True))
        if fields["dense_layers"] >= fields["layers"]:
            raise c.fail("first_k_dense_replace",
                         f"must be below num_hidden_layers ({fields['layers']})")
    return fields


def _gpt2(c: _Cfg) -> dict[str, Any]:
    hidden = c.int("n_embd")
    heads, kv, head_dim = _heads(c, hidden, "n_head", None)
    return dict(layers=c.int("n_layer"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("n_inner", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"),
                # absent -> PretrainedConfig default True (lm_head tied to wte)
                tied_embeddings=c.bool("tie_word_embeddings", True), position="learned",
                max_positions=c.int("n_positions", 1024), qkv_bias=True, linear_bias=True,
                norm="layernorm",
                dropout=_dropout(c, ("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.1))


def _neox(c: _Cfg) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, kv, head_dim = _heads(c, hidden, "num_attention_heads", None)
    bias = c.bool("attention_bias", True)
    _check_rope(c)
    return dict(layers=c.int("num_hidden_layers"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("intermediate_size", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings", False),
                position="rope", max_positions=c.optional_int("max_position_embeddings"),
                qkv_bias=bias, linear_bias=bias, norm="layernorm",
                dropout=_dropout(c, ("hidden_dropout", "attention_dropout"), 0.0))


def _falcon(c: _Cfg) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    if c.bool("new_decoder_architecture", False):
        kv = c.int("num_kv_heads", heads)
        kv_key = "num_kv_heads"
    else:
        kv = 1 if c.bool("multi_query", True) else heads
        kv_key = "multi_query"
    heads, kv, head_dim = _heads(c, hidden, "num_attention_heads", kv_key, kv)
    bias = c.bool("bias", False)
    alibi = c.bool("alibi", False)
    c.bool("parallel_attn", True)  # layout only; validated so a typo is caught
    if not alibi:
        _check_rope(c)
    return dict(layers=c.int("num_hidden_layers"), hidden=hidden, heads=heads, kv_heads=kv,
                head_dim=head_dim, ffn=c.int("ffn_hidden_size", 4 * hidden), mlp="gelu",
                vocab=c.int("vocab_size"), tied_embeddings=c.bool("tie_word_embeddings", True),
                position="alibi" if alibi else "rope",
                max_positions=c.optional_int("max_position_embeddings"),
                qkv_bias=bias, linear_bias=bias, norm="layernorm",
                dropout=_dropout(c, ("hidden_dropout", "attention_dropout"), 0.0))


# The keys whose size sets the parameter count, across the layouts read here.
SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "n_embd",
             "n_layer", "n_inner", "ffn_hidden_size", "num_local_experts", "num_experts",
             "moe_intermediate_size", "head_dim")


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


def model_from_config(data: dict[str, Any], where: str = "config.json") -> ModelSpec:
    """ModelSpec from an already-parsed config.json dict (`where` names it in errors)."""
    c = _Cfg(where, data)
    mtype = (c.str("model_type") or "").lower()
    note = ""
    if mtype in LLAMA_LIKE:
        fields = _llama_like(c, mtype)
    elif mtype in GPT2:
        fields = _gpt2(c)
    elif mtype in NEOX:
        fields = _neox(c)
    elif mtype in FALCON:
        fields = _falcon(c)
        note = ("; Falcon counted with two LayerNorms per block (the parallel-attention 7B "
                "layout has one, so it is over-counted by 2h per layer)")
    elif c.has("n_embd"):
        fields = _gpt2(c)
        note = f"; unknown model_type {mtype or '(absent)'!r}, read as GPT-2 layout"
    else:
        fields = _llama_like(c, mtype)
        note = (f"; unknown model_type {mtype or '(absent)'!r}, read as Llama layout (gated "
                "MLP, RMSNorm, RoPE); check the count")
    note = fields.pop("_note", "") + note
    if fields.get("position") == "learned" and fields.get("max_positions") is None:
        raise c.fail("max_position_embeddings", "required for learned position embeddings")
    name = c.str("_name_or_path") or Path(where).parent.name or None
    try:
        source = f"{where} (model_type {mtype or 'absent'}){note}"
        spec = validate_model({"name": name, **fields, "source": source})
    except ValidationError as exc:
        # Cross-field rules in ModelSpec that the per-key checks above did not catch.
        first = exc.errors()[0]
        raise InputError(where, f"{'.'.join(map(str, first['loc'])) or 'config'}: "
                                f"{first['msg']}") from None
    if spec.param_count() > MAX_PARAMS:   # named by its largest size key (vocab_size: 10^15)
        key = max((k for k, x in data.items() if k in SIZE_KEYS and isinstance(x, int)),
                  key=lambda k: data[k], default="config")
        raise c.fail(key, f"{data.get(key, '')} makes {spec.param_count():.3g} parameters; at "
                          f"most {MAX_PARAMS:g}")
    return spec
