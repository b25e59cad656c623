"""Named model shapes. Each preset's ``source`` says where its numbers come from.

HF config.json values are those of each model's config.json on the Hugging Face Hub (the
repository the source names) unless the source says otherwise; the Megatron GPT shapes are
Narayanan et al. SC21 Table 1 and Korthikanti et al. 2022 Table 3 (s = 2048, V = 51200, GPT layout as in Megatron-LM: tied embeddings, learned positions).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from planner.errors import InputError, named
from planner.specs.model import ModelSpec

_HF = "values of its config.json on the Hugging Face Hub"


def _llama(name: str, source: str, *, layers: int, hidden: int, heads: int, kv_heads: int,
           ffn: int, vocab: int, max_positions: int, qkv_bias: bool = False, experts: int = 0,
           experts_per_token: int = 0) -> ModelSpec:
    # Llama family layout: SwiGLU, RMSNorm, RoPE, untied head, no biases, no dropout.
    return ModelSpec.with_defaults(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
        mlp="swiglu", vocab=vocab, tied_embeddings=False, position="rope",
        max_positions=max_positions, qkv_bias=qkv_bias, linear_bias=False, norm="rmsnorm",
        dropout=False, experts=experts, experts_per_token=experts_per_token, source=source)


def _gpt(name: str, source: str, *, layers: int, hidden: int, heads: int, vocab: int = 51200,
         max_positions: int | None = 2048, position: str = "learned", tied: bool = True,
         dropout: bool = True, ffn: int | None = None) -> ModelSpec:
    # GPT layout: plain 4h MLP, LayerNorm, biases on every linear.
    return ModelSpec.with_defaults(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn=ffn or 4 * hidden, mlp="gelu",
        vocab=vocab, tied_embeddings=tied, position=position, max_positions=max_positions,
        qkv_bias=True, linear_bias=True, norm="layernorm", dropout=dropout, source=source)


_NARAYANAN = "Narayanan et al. SC21 Table 1 (V=51200, s=2048; Megatron GPT layout)"
_KORTHIKANTI = "Korthikanti et al. 2022 Table 3 (V=51200, s=2048; Megatron GPT layout)"

# (canonical name, spec, aliases). Aliases are matched after normalisation (see _key).
_ENTRIES: list[tuple[str, ModelSpec, list[str]]] = [
    ("llama2-7b", _llama("Llama-2-7B", f"meta-llama/Llama-2-7b-hf {_HF}", layers=32, hidden=4096,
                         heads=32, kv_heads=32, ffn=11008, vocab=32000, max_positions=4096),
     ["meta-llama/Llama-2-7b-hf", "llama-2-7b"]),
    ("llama2-13b", _llama("Llama-2-13B", "meta-llama/Llama-2-13b-hf config.json (copy in "
                          "Girafboy/pytorchKQI example/evaluate.py)", layers=40, hidden=5120,
                          heads=40, kv_heads=40, ffn=13824, vocab=32000, max_positions=4096),
     ["meta-llama/Llama-2-13b-hf", "llama-2-13b"]),
    ("llama2-70b", _llama("Llama-2-70B", f"meta-llama/Llama-2-70b-hf {_HF}", layers=80,
                          hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
                          max_positions=4096),
     ["meta-llama/Llama-2-70b-hf", "llama-2-70b"]),
    ("llama3-8b", _llama("Llama-3-8B", f"meta-llama/Meta-Llama-3-8B {_HF}", layers=32,
                         hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                         max_positions=8192),
     ["meta-llama/Meta-Llama-3-8B", "llama-3-8b"]),
    ("llama3-70b", _llama("Llama-3-70B", f"meta-llama/Meta-Llama-3-70B {_HF}", layers=80,
                          hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                          max_positions=8192),
     ["meta-llama/Meta-Llama-3-70B", "llama-3-70b"]),
    # Llama 3.1 keeps the 3.0 shapes; only the RoPE-scaled context (131072) differs.
    ("llama3.1-8b", _llama("Llama-3.1-8B", f"meta-llama/Llama-3.1-8B: Llama-3-8B {_HF}, "
                           "max_position_embeddings 131072", layers=32, hidden=4096, heads=32,
                           kv_heads=8, ffn=14336, vocab=128256, max_positions=131072),
     ["meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"]),
    ("llama3.1-70b", _llama("Llama-3.1-70B", f"meta-llama/Llama-3.1-70B: Llama-3-70B {_HF}, "
                            "max_position_embeddings 131072", layers=80, hidden=8192, heads=64,
                            kv_heads=8, ffn=28672, vocab=128256, max_positions=131072),
     ["meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b",
      "llama3.3-70b", "meta-llama/Llama-3.3-70B"]),
    ("llama3.1-405b", _llama("Llama-3.1-405B", f"meta-llama/Llama-3.1-405B {_HF}", layers=126,
                             hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256,
                             max_positions=131072),
     ["meta-llama/Llama-3.1-405B", "meta-llama/Meta-Llama-3.1-405B", "llama-3.1-405b",
      "llama3-405b", "llama-3-405b"]),
    ("mixtral-8x7b", _llama("Mixtral-8x7B", f"mistralai/Mixtral-8x7B-v0.1 {_HF}", layers=32,
                            hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                            max_positions=32768, experts=8, experts_per_token=2),
     ["mistralai/Mixtral-8x7B-v0.1", "mixtral"]),
    ("mixtral-8x22b", _llama("Mixtral-8x22B", "mistralai/Mixtral-8x22B-v0.1 config.json as "
                             "published: 56 layers, h 6144, 48/8 heads, ffn 16384, 8 experts "
                             "top-2, vocab 32000 (the Instruct release's is 32768), 65536 "
                             "positions; 140.62B total = transformers' count",
                             layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384,
                             vocab=32000, max_positions=65536, experts=8, experts_per_token=2),
     ["mistralai/Mixtral-8x22B-v0.1"]),
    ("qwen2-7b", _llama("Qwen2-7B", f"Qwen/Qwen2-7B {_HF}; q/k/v bias as in transformers "
                        "modular_qwen2.py", layers=28, hidden=3584, heads=28, kv_heads=4,
                        ffn=18944, vocab=152064, max_positions=131072, qkv_bias=True),
     ["Qwen/Qwen2-7B"]),
    ("qwen2-72b", _llama("Qwen2-72B", "Qwen/Qwen2-72B config.json from memory (not in the "
                         "reference files): 80 layers, h 8192, 64/8 heads, ffn 29568, vocab "
                         "152064; q/k/v bias", layers=80, hidden=8192, heads=64, kv_heads=8,
                         ffn=29568, vocab=152064, max_positions=131072, qkv_bias=True),
     ["Qwen/Qwen2-72B"]),
    ("qwen2.5-14b", _llama("Qwen2.5-14B", "Qwen/Qwen2.5-14B config.json's shape as Megatron "
                           "runs it (alibaba/Pai-Megatron-Patch@a098ca5 toolkits/"
                           "distributed_checkpoints_convertor/scripts/qwen2_5/run_8xH20.sh:170-"
                           "180): 48 layers, h 5120, 40/8 heads, ffn 13824, vocab 152064, untied; "
                           "q/k/v bias", layers=48, hidden=5120, heads=40, kv_heads=8, ffn=13824,
                           vocab=152064, max_positions=131072, qkv_bias=True),
     ["Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-14B-Instruct"]),
    ("gpt2", _gpt("GPT-2", f"openai-community/gpt2 {_HF} (n_inner None -> 4h, tied)", layers=12,
                  hidden=768, heads=12, vocab=50257, max_positions=1024),
     ["openai-community/gpt2", "gpt2-small", "gpt2-124m"]),
    ("gpt3-175b", _gpt("GPT-3 175B", "Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, "
                       "96 heads, context 2048); GPT-2 BPE vocab 50257; tied head assumed as in "
                       "GPT-2", layers=96, hidden=12288, heads=96, vocab=50257),
     ["gpt3", "gpt-3-175b", "davinci"]),
    ("bloom-176b", _gpt("BLOOM-176B", "bigscience/bloom config.json from memory: 70 layers, h "
                        "14336, 112 heads, vocab 250880, ALiBi, tied, dropout 0; the embedding "
                        "LayerNorm (2h) has no field and is not counted", layers=70,
                        hidden=14336, heads=112, vocab=250880, max_positions=None,
                        position="alibi", dropout=False),
     ["bigscience/bloom", "bloom"]),
    ("gpt-neox-20b", _gpt("GPT-NeoX-20B", "EleutherAI/gpt-neox-20b config.json from memory: 44 "
                          "layers, h 6144, 64 heads, ffn 24576, vocab 50432, rotary, untied, "
                          "dropout 0", layers=44, hidden=6144, heads=64, vocab=50432,
                          max_positions=2048, position="rope", tied=False, dropout=False),
     ["EleutherAI/gpt-neox-20b", "neox-20b"]),
    ("opt-175b", _gpt("OPT-175B", "facebook/opt-175b (Zhang et al. 2022 Table 1) from memory: 96 "
                      "layers, h 12288, 96 heads, ffn 49152 (ReLU), vocab 50272, tied; "
                      "max_positions 2050 = 2048 + OPT's 2-row position offset", layers=96,
                      hidden=12288, heads=96, vocab=50272, max_positions=2050),
     ["facebook/opt-175b", "opt"]),
]

# Narayanan Table 1 weak-scaling GPT shapes: (label, heads, hidden, layers).
for _label, _a, _h, _l in [("1.7b", 24, 2304, 24), ("3.6b", 32, 3072, 30), ("7.5b", 32, 4096, 36),
                           ("18.4b", 48, 6144, 40), ("39.1b", 64, 8192, 48),
                           ("76.1b", 80, 10240, 60), ("145.6b", 96, 12288, 80),
                           ("310.1b", 128, 16384, 96), ("529.6b", 128, 20480, 105),
                           ("1t", 160, 25600, 128)]:
    _ENTRIES.append((f"megatron-gpt-{_label}",
                     _gpt(f"Megatron GPT {_label.upper()}", _NARAYANAN, layers=_l, hidden=_h,
                          heads=_a), ["megatron-gpt-1008b"] if _label == "1t" else []))
# Korthikanti Table 3 shapes not in Narayanan Table 1 (530B = the 529.6B row, MT-NLG).
for _label, _a, _h, _l, _aliases in [("22b", 64, 6144, 48, []),
                                     ("175b", 96, 12288, 96, []),
                                     ("530b", 128, 20480, 105, ["mt-nlg-530b"])]:
    _ENTRIES.append((f"megatron-gpt-{_label}",
                     _gpt(f"Megatron GPT {_label.upper()}", _KORTHIKANTI, layers=_l, hidden=_h,
                          heads=_a), _aliases))

_CLASSIC = {name: spec for name, spec, _ in _ENTRIES}  # Llama/GPT layouts: what a bare count mimics


@cache
def _entries() -> list[tuple[str, ModelSpec, list[str]]]:
    """Every preset: the classic ones above, then today's families (DeepSeek, Kimi, Qwen3,
    GPT-OSS, Llama 4, Gemma, Mistral, Phi-3, OLMo 2, Granite, GLM-4.5), built from their
    published config.json fields by the config reader (specs/presets_modern.py)."""
    # Imported on first use, not with this module: the config reader loads pydantic, which a
    # question given by flags (`fit --params 70e9`) never needs.
    from planner.specs.presets_modern import modern_presets
    return _ENTRIES + modern_presets()


@cache
def _presets() -> dict[str, ModelSpec]:
    return {name: spec for name, spec, _ in _entries()}


def __getattr__(name: str) -> Any:
    """``PRESETS``: every preset by canonical name, built on first use (see _entries)."""
    if name == "PRESETS":
        return _presets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _key(text: str) -> str:
    """Normalise a model name: drop the hub org, Meta-/-hf/-v0.1/-instruct decorations, separators."""
    s = text.strip().lower().rsplit("/", 1)[-1]
    s = re.sub(r"^meta-(?=llama)", "", s)
    s = re.sub(r"[-_](hf|base|instruct|chat|v0\.1)$", "", s)
    s = re.sub(r"[-_](hf|base|instruct|chat|v0\.1)$", "", s)
    return re.sub(r"[-_ ]", "", s)


@cache
def _index() -> dict[str, str]:
    """Normalised name or alias → canonical preset name."""
    index: dict[str, str] = {}
    for name, _spec, aliases in _entries():
        for alias in [name, *aliases]:
            k = _key(alias)
            # Two presets claiming the same normalised name would make lookups depend on order.
            assert index.get(k, name) == name, f"preset alias clash: {alias}"
            index[k] = name
    return index


def list_presets() -> list[str]:
    """Canonical preset names, in registry order (families, then Megatron GPT by size)."""
    return list(_presets())


def get_preset(name: str) -> ModelSpec:
    """Look up a preset by canonical name or alias, case-insensitively (``meta-llama/Llama-3.1-70B``)."""
    canonical = _index().get(_key(name))
    if canonical is not None:
        return _presets()[canonical]
    import difflib   # only for "did you mean"
    close = difflib.get_close_matches(name.strip().lower(), list(_presets()), n=5, cutoff=0.4)
    for alias in difflib.get_close_matches(_key(name), list(_index()), n=5, cutoff=0.5):
        if _index()[alias] not in close:
            close.append(_index()[alias])
    hint = ", ".join(close[:5]) if close else ", ".join(list(_presets())[:8]) + ", ..."
    raise InputError(named("model"), f"unknown model '{name}'; known: {hint} "
                                "(all names: dtplan models)")


def nearest_preset(n_params: float) -> tuple[str, ModelSpec]:
    """The dense preset whose exact parameter count is nearest `n_params` on a log scale
    (|ln(P/n)|; registry order breaks ties, so a family's first release wins over a re-release
    of the same shape). Mixture-of-experts presets are left out: a bare count is a dense model,
    and an MoE of the same total does a fraction of its compute per token. So are today's
    families (QK-norm, windows, 4 norms per block): the inferred shape is Llama-style, and its
    nearest preset is of the same layout."""
    import math
    if not n_params > 0:
        raise InputError(named("params"), f"must be greater than 0, got {n_params:g}")
    dense = [(name, spec) for name, spec in _CLASSIC.items() if not spec.is_moe]
    return min(dense, key=lambda e: abs(math.log(e[1].param_count() / n_params)))
