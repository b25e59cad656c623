"""Model shapes, parameter counts and training FLOPs.

Expected counts: ECOSYSTEM.md §6.2 (HF safetensors totals / formula on hf_models.json values),
Narayanan et al. SC21 Table 1, Korthikanti et al. 2022 Eq. 7 (calibration_cases.json).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from planner.engine import params as P
from planner.errors import InputError
from planner.specs.hf_config import load_hf_config
from planner.specs.model import ModelSpec, model_from_params, validate_model
from planner.specs.presets import PRESETS, get_preset, list_presets

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"

EXACT = [
    ("llama3.1-8b", 8_030_261_248, None),
    ("llama3-8b", 8_030_261_248, None),
    ("llama3.1-70b", 70_553_706_496, None),
    ("llama3.1-405b", 405_853_388_800, None),
    ("llama2-7b", 6_738_415_616, None),
    ("llama2-70b", 68_976_648_192, None),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("gpt2", 124_439_808, None),
    ("qwen2-7b", 7_615_616_512, None),
    # transformers' Qwen2ForCausalLM on the meta device counts the same 14,770,033,664
    ("qwen2.5-14b", 14_770_033_664, None),
]


@pytest.mark.parametrize("name,total,active", EXACT)
def test_preset_exact_counts(name, total, active):
    spec = get_preset(name)
    assert spec.param_count() == total
    assert spec.active_param_count() == (active if active is not None else total)


@pytest.mark.parametrize("folder,total,active", [
    ("llama3-8b", 8_030_261_248, 8_030_261_248),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("gpt2", 124_439_808, 124_439_808),
    ("qwen2-7b", 7_615_616_512, 7_615_616_512),
])
def test_example_config_exact_counts(folder, total, active):
    spec = load_hf_config(EXAMPLES / folder / "config.json")
    assert spec.param_count() == total
    assert spec.active_param_count() == active
    assert folder in spec.source


def test_directory_path_reads_config_json():
    assert load_hf_config(EXAMPLES / "gpt2").param_count() == 124_439_808


@pytest.mark.parametrize("drop, name, key", [
    ((), "meta-llama/Meta-Llama-3-8B", "_name_or_path"),
    (("_name_or_path",), "LlamaForCausalLM", "architectures[0]"),
    (("_name_or_path", "architectures"), "llama", "model_type"),
])
def test_config_model_named_from_its_own_fields(tmp_path, drop, name, key):
    """A config.json's model is named from the config (not from the folder it sits in, e.g. a
    checkpoint directory), and the source says which field named it."""
    data = json.loads((EXAMPLES / "llama3-8b" / "config.json").read_text())
    folder = tmp_path / "checkpoint-500"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({k: x for k, x in data.items() if k not in drop}))
    spec = load_hf_config(folder)
    assert spec.name == name and f"name from {key}" in spec.source


def test_gpt2_layout_matches_closed_form():
    # ECOSYSTEM.md §6.2: P = V·h + n_pos·h + L·(12h² + 13h) + 2h
    s = get_preset("gpt2")
    h, L = s.hidden, s.layers
    assert s.layer_params() == 12 * h * h + 13 * h
    assert s.param_count() == s.vocab * h + 1024 * h + L * (12 * h * h + 13 * h) + 2 * h
    assert s.head_params() == 0 and s.embedding_params() == s.vocab * h + 1024 * h


# Narayanan Table 1: (heads, hidden, layers, printed billions)
TABLE1 = [(24, 2304, 24, 1.7), (32, 3072, 30, 3.6), (32, 4096, 36, 7.5), (48, 6144, 40, 18.4),
          (64, 8192, 48, 39.1), (80, 10240, 60, 76.1), (96, 12288, 80, 145.6),
          (128, 16384, 96, 310.1), (128, 20480, 105, 529.6), (160, 25600, 128, 1008.0)]


@pytest.mark.parametrize("heads,hidden,layers,billions", TABLE1)
def test_narayanan_eq2_table1(heads, hidden, layers, billions):
    eq2 = P.gpt_params_eq2(layers, hidden, 51200, 2048)
    assert abs(eq2 / 1e9 - billions) <= 0.05
    label = "1t" if billions == 1008.0 else f"{billions:g}b"
    spec = get_preset(f"megatron-gpt-{label}")
    assert (spec.layers, spec.hidden, spec.heads) == (layers, hidden, heads)
    # Eq. 2 leaves out the final LayerNorm (2h); otherwise the layout is the same.
    assert spec.param_count() == round(eq2) + 2 * hidden


def test_eq2_vectorised():
    l = np.array([r[2] for r in TABLE1])
    h = np.array([r[1] for r in TABLE1])
    got = P.gpt_params_eq2(l, h, 51200, 2048) / 1e9
    assert np.all(np.abs(got - np.array([r[3] for r in TABLE1])) <= 0.05)


def test_korthikanti_eq7_175b():
    expected = 1.4109153109947186e17  # calibration_cases.json korthikanti-flops-eq7-eq8-175B
    cases = Path("/work/shared/reference/calibration_cases.json")
    if cases.exists():
        case = next(c for c in json.loads(cases.read_text())
                    if c["id"] == "korthikanti-flops-eq7-eq8-175B")
        assert case["expected"]["model_flops_per_iter"] == expected
    spec = get_preset("megatron-gpt-175b")
    per_step = spec.training_flops_per_token(2048) * 64 * 2048
    assert per_step == pytest.approx(expected, rel=1e-12)
    assert P.gpt_model_flops_eq7(64, 96, 2048, 12288, 51200) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", ["megatron-gpt-22b", "megatron-gpt-530b", "megatron-gpt-1t",
                                  "megatron-gpt-1.7b"])
def test_flops_per_token_is_eq7_for_gpt(name):
    s = get_preset(name)
    eq7 = P.gpt_model_flops_eq7(1, s.layers, 2048, s.hidden, s.vocab) / 2048
    assert s.training_flops_per_token(2048) == pytest.approx(eq7, rel=1e-12)


def test_causal_halves_attention_term():
    s = get_preset("llama3-8b")
    full, causal = s.training_flops_per_token(8192), s.training_flops_per_token(8192, causal=True)
    attn = 12 * s.layers * 8192 * s.heads * s.head_dim
    assert full - causal == pytest.approx(attn / 2)
    assert causal == pytest.approx(6 * s.matmul_params_per_token() + attn / 2)


def test_moe_flops_use_active_experts():
    m = get_preset("mixtral-8x7b")
    # Tokens go through top-2 experts plus the router; embedding lookup is not a matmul.
    matmul = (m.active_param_count() - m.embedding_params()
              - m.layers * (2 * m.hidden + 0) - m.hidden)  # norms are not matmuls
    assert m.matmul_params_per_token() == matmul


def test_presets_required_names_and_aliases():
    for name in ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
                 "llama3-405b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b",
                 "mixtral-8x22b", "gpt3-175b", "bloom-176b", "gpt-neox-20b", "opt-175b",
                 "qwen2-7b", "qwen2-72b", "gpt2", "megatron-gpt-22b", "megatron-gpt-530b"]:
        assert isinstance(get_preset(name), ModelSpec), name
    assert get_preset("meta-llama/Llama-3.1-70B") is PRESETS["llama3.1-70b"]
    assert get_preset("LLAMA-3.1-70B") is PRESETS["llama3.1-70b"]
    assert get_preset("llama3-70b") is PRESETS["llama3-70b"]
    assert get_preset("mistralai/Mixtral-8x7B-v0.1") is PRESETS["mixtral-8x7b"]
    assert get_preset("Llama-2-7b-hf") is PRESETS["llama2-7b"]
    assert list_presets() == list(PRESETS)
    assert all(spec.source for spec in PRESETS.values())


def test_other_published_totals():
    # Published sizes (rounded): 13.0B, 141B/39B, 72.7B, 176B, 20.6B, 175B.
    for name, billions, tol in [("llama2-13b", 13.0, 0.05), ("mixtral-8x22b", 140.6, 0.1),
                                ("qwen2-72b", 72.7, 0.05), ("bloom-176b", 176.2, 0.1),
                                ("gpt-neox-20b", 20.55, 0.01), ("opt-175b", 174.6, 0.5),
                                ("gpt3-175b", 175.0, 0.5), ("megatron-gpt-22b", 22.0, 0.1)]:
        assert abs(get_preset(name).param_count() / 1e9 - billions) <= tol, name
    assert get_preset("mixtral-8x22b").active_param_count() / 1e9 == pytest.approx(39.2, abs=0.1)


def test_unknown_preset_suggests():
    with pytest.raises(InputError) as err:
        get_preset("llama3-7b")
    assert err.value.field == "model"   # a library call: the value is a model (CLI: --model)
    assert "unknown model 'llama3-7b'" in err.value.message
    assert "llama3-8b" in err.value.message


@pytest.mark.parametrize("n", [1e9, 7e9, 70e9, 405e9, 1e12])
def test_model_from_params(n):
    s = model_from_params(n)
    assert abs(s.param_count() / n - 1) <= 0.05
    assert s.heads % 8 == 0 and s.inferred
    assert "inferred" in s.source and "not a real model" in s.source
    assert s.heads % s.kv_heads == 0 and s.head_dim == 128


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e3, "x"])
def test_model_from_params_rejects(bad):
    with pytest.raises(InputError) as err:
        model_from_params(bad)
    assert err.value.field == "params"   # a library call (CLI: --params)


# ---- bad config.json ---------------------------------------------------------------------------

BASE = json.loads((EXAMPLES / "llama3-8b" / "config.json").read_text())


def _write(tmp_path, data, name="config.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("change,key", [
    ({"hidden_size": None}, "hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"vocab_size": -5}, "vocab_size"),
    ({"intermediate_size": "big"}, "intermediate_size"),
    ({"num_attention_heads": 4.5}, "num_attention_heads"),
    ({"num_key_value_heads": 5}, "num_key_value_heads"),
    ({"num_attention_heads": 30, "num_key_value_heads": 30}, "num_attention_heads"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ({"rope_theta": -1}, "rope_theta"),
    ({"rope_parameters": [1, 2]}, "rope_parameters"),
    ({"head_dim": 0}, "head_dim"),
    # Llama has no experts (its reader names num_local_experts as not understood): Mixtral's do
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 6},
     "num_experts_per_tok"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 0},
     "num_experts_per_tok"),
    ({"model_type": 7}, "model_type"),
])
def test_bad_config_names_key(tmp_path, change, key):
    data = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_hf_config(path)
    assert err.value.field == str(path)
    assert err.value.message.startswith(f"{key}:")
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path):
    cases = [tmp_path / "missing.json", _write(tmp_path, "{not json", "broken.json"),
             _write(tmp_path, "[1, 2]", "list.json")]
    raw = tmp_path / "binary.json"
    raw.write_bytes(b"\xff\xfe\x00garbage")
    cases.append(raw)
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * (5 * 1024 * 1024 + 10) + '"}')
    cases.append(big)
    for path in cases:
        with pytest.raises(InputError) as err:
            load_hf_config(path)
        assert err.value.field == str(path)


def test_gpt2_bad_head_split(tmp_path):
    data = json.loads((EXAMPLES / "gpt2" / "config.json").read_text())
    data["n_head"] = 7
    with pytest.raises(InputError) as err:
        load_hf_config(_write(tmp_path, data))
    assert err.value.message.startswith("n_head:")


def test_rope_parameters_form(tmp_path):
    data = {k: v for k, v in BASE.items() if k != "rope_theta"}
    data.update(rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})
    assert load_hf_config(_write(tmp_path, data)).param_count() == 8_030_261_248


def test_unknown_model_type_is_refused(tmp_path):
    # Was read as a Llama layout with a footnote (DeepSeek-V3 came out a 38.6B dense model);
    # now an error naming the supported types and the architecture flags.
    data = {**BASE, "model_type": "mylab_llm"}
    with pytest.raises(InputError) as err:
        load_hf_config(_write(tmp_path, data))
    msg = err.value.message
    assert msg.startswith('model_type: "mylab_llm" is not a supported model type; supported:')
    for t in ("deepseek_v3", "qwen3_moe", "llama4", "gemma3", "gpt_oss", "kimi_k2", "llama"):
        assert t in msg
    assert "--experts-per-token" in msg and "--layers" in msg


def test_falcon_and_neox(tmp_path):
    falcon7b = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
                "num_attention_heads": 71, "multi_query": True, "parallel_attn": True,
                "bias": False, "alibi": False, "vocab_size": 65024,
                "new_decoder_architecture": False}
    s = load_hf_config(_write(tmp_path, falcon7b, "f7.json"))
    assert (s.kv_heads, s.ffn, s.position, s.tied_embeddings) == (1, 4 * 4544, "rope", True)
    # Falcon-7B has 6,921,720,704 parameters with one LayerNorm per block; we count two.
    assert s.param_count() == 6_921_720_704 + 32 * 2 * 4544
    falcon40b = {**falcon7b, "hidden_size": 8192, "num_hidden_layers": 60,
                 "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": True}
    assert load_hf_config(_write(tmp_path, falcon40b, "f40.json")).kv_heads == 8
    neox = {"model_type": "gpt_neox", "hidden_size": 6144, "num_hidden_layers": 44,
            "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432,
            "max_position_embeddings": 2048, "rotary_pct": 0.25, "tie_word_embeddings": False}
    assert load_hf_config(_write(tmp_path, neox, "neox.json")).param_count() == \
        get_preset("gpt-neox-20b").param_count()


# ---- ModelSpec validation ----------------------------------------------------------------------

_BASE = dict(layers=2, hidden=64, heads=4, ffn=256, mlp="swiglu", vocab=100,
             tied_embeddings=False, position="rope", norm="rmsnorm", source="test")


def _spec(**kw):
    """Validated at the boundary (validate_model), as a user's shape is."""
    return validate_model({**_BASE, **kw})


def test_spec_defaults_and_validation():
    s = _spec()
    assert (s.kv_heads, s.head_dim, s.is_moe) == (4, 16, False)
    for bad in [dict(hidden=65), dict(kv_heads=3), dict(layers=0), dict(vocab=-1),
                dict(experts=4, experts_per_token=5), dict(experts=4),
                dict(experts_per_token=1), dict(position="learned"), dict(bogus=1)]:
        with pytest.raises(ValueError):
            _spec(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.layers = 3  # frozen
    assert _spec(hidden=65, head_dim=16).head_dim == 16


def test_trusted_construction_fills_and_checks_as_the_boundary():
    # a trusted construction from a shape (presets) fills kv_heads / head_dim as the boundary
    # does and keeps the cross-field rules; ranges and unknown keys are the boundary's. The
    # record itself holds concrete values: the constructor wants both.
    assert ModelSpec.with_defaults(**_BASE) == _spec()
    for bad, message in [(dict(hidden=65), "must be divisible by heads"),
                         (dict(kv_heads=3), "must divide heads"),
                         (dict(experts=4), "experts_per_token must be in 1..experts")]:
        with pytest.raises(ValueError, match=message):
            ModelSpec.with_defaults(**{**_BASE, **bad})
    with pytest.raises(TypeError, match="kv_heads"):
        ModelSpec(**_BASE)


def test_moe_dense_layers_and_layer_list():
    s = _spec(layers=4, experts=8, experts_per_token=2, expert_ffn=64, shared_experts=1,
              dense_layers=1)
    assert (s.dense_layer_count, s.moe_layers) == (1, 3)
    per = [s.layer_params()] + [s.moe_layer_params()] * 3  # block by block, leading dense first
    attn_norm = s.layer_params() - P.mlp_params(64, 256, True)
    assert s.moe_layer_params() == attn_norm + 9 * 3 * 64 * 64 + 64 * 8
    assert s.moe_layer_params(active=True) == attn_norm + 3 * 3 * 64 * 64 + 64 * 8
    assert s.param_count() == s.embedding_params() + sum(per) + 64 + s.head_params()


def test_engine_broadcasts():
    h = np.array([1024.0, 2048.0])
    got = P.attention_params(h, 8, 8, 128, qkv_bias=True, out_bias=np.array([False, True]))
    assert got.shape == (2,)
    assert got[1] == 4 * 2048 * 1024 + 3 * 1024 + 2048
    assert isinstance(P.mlp_params(4096, 11008, True), float)
    assert P.norm_params(4096, True) == 8192 and P.lm_head_params(10, 4, True) == 0


# ---- properties --------------------------------------------------------------------------------

shapes = st.fixed_dictionaries(dict(
    layers=st.integers(1, 200), heads_per_kv=st.sampled_from([1, 2, 4, 8]),
    kv_heads=st.integers(1, 16), head_dim=st.sampled_from([64, 128]),
    ffn=st.integers(1, 100_000), vocab=st.integers(1, 300_000),
    mlp=st.sampled_from(["gelu", "swiglu"]), norm=st.sampled_from(["layernorm", "rmsnorm"]),
    tied=st.booleans(), bias=st.booleans(), experts=st.sampled_from([0, 4, 8, 64]),
    topk=st.integers(1, 4)))


def _from(d, **over):
    d = {**d, **over}
    heads = d["kv_heads"] * d["heads_per_kv"]
    moe = dict(experts=d["experts"], experts_per_token=min(d["topk"], d["experts"])) \
        if d["experts"] else {}
    return ModelSpec(layers=d["layers"], hidden=heads * d["head_dim"], heads=heads,
                     kv_heads=d["kv_heads"], head_dim=d["head_dim"], ffn=d["ffn"], mlp=d["mlp"], vocab=d["vocab"],
                     tied_embeddings=d["tied"], position="rope", norm=d["norm"],
                     qkv_bias=d["bias"], linear_bias=d["bias"], source="hypothesis", **moe)


@settings(max_examples=200, deadline=None)
@given(shapes)
def test_count_increases_with_layers_and_width(d):
    s = _from(d)
    assert _from(d, layers=d["layers"] + 1).param_count() > s.param_count()
    assert _from(d, kv_heads=d["kv_heads"] + 1).param_count() > s.param_count()
    assert _from(d, ffn=d["ffn"] + 1).param_count() > s.param_count()
    assert 0 < s.active_param_count() <= s.param_count()
    assert (s.active_param_count() < s.param_count()) == (s.is_moe and
                                                          s.experts_per_token < s.experts)
    assert s.training_flops_per_token(2048, causal=True) < s.training_flops_per_token(2048)


@settings(max_examples=100, deadline=None)
@given(st.floats(3e8, 1e13))
def test_inferred_count_close(n):
    s = model_from_params(n)
    assert abs(s.param_count() / n - 1) <= 0.05
    assert s.heads % 8 == 0
