"""What a job trains: every weight (full), or LoRA adapters on a frozen base (lora, and qlora
on a 4-bit base), read from the layout's finetune knobs (specs.knobs: --finetune, --lora-rank,
--lora-alpha, --lora-targets, --base-format) and checked once here. The per-layer linears an
adapter can target are named as HF PEFT names the Llama family's modules (q_proj … down_proj;
peft utils/constants.py `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`); "all-linear" is
PEFT's shorthand for every linear but the output head (tuners_utils.py
`_maybe_include_all_linear_layers`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.engine import fp8
from planner.engine.finetune import BASE_FORMATS
from planner.errors import InputError, named
from planner.specs.model import ModelSpec

LINEARS = ("q", "k", "v", "o", "gate", "up", "down")
TARGET_SETS: dict[str, tuple[str, ...]] = {
    "all-linear": LINEARS,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
}
MODES = ("full", "lora", "qlora")


def parse_targets(text: str, field: str = "lora_targets") -> tuple[str, ...]:
    """all-linear | attention | mlp | a comma list of q,k,v,o,gate,up,down (PEFT's q_proj …
    spellings accepted too), in LINEARS order."""
    if text in TARGET_SETS:
        return TARGET_SETS[text]
    names = [x.strip().removesuffix("_proj") for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in LINEARS]
    if not names or bad:
        raise InputError(named(field), f"{(bad or [text])[0]!r} is not a target; allowed: "
                                f"{', '.join(TARGET_SETS)}, or a comma list of "
                                f"{','.join(LINEARS)}")
    return tuple(x for x in LINEARS if x in names)


def _default_format(mode: str) -> str:
    """The base format "auto" stands for: NF4 with double quantisation under qlora (the QLoRA
    paper's recipe), the checkpoint's bf16 otherwise."""
    return "nf4-dq" if mode == "qlora" else "bf16"


def fp8_recipe(precision: str | None, recipe: str) -> str:
    """The low-precision recipe a layout states: --fp8 as given; --precision fp8 alone is
    tensorwise (the dynamic per-tensor scaling the engine priced before recipes had names);
    a recipe needs 16-bit mixed precision around its GEMMs (precision mixed or fp8)."""
    if recipe not in ("none",) + fp8.NAMES:
        raise InputError(named("fp8"), f"{recipe!r} is not allowed; one of none, "
                                       f"{', '.join(fp8.NAMES)}")
    if recipe == "none":
        return "tensorwise" if precision == "fp8" else "none"
    if precision not in (None, "mixed", "fp8"):
        raise InputError(named("fp8"), f"{recipe} runs beside 16-bit mixed precision; "
                                       f"--precision {precision} is not allowed with it "
                                       "(use mixed or fp8)")
    return recipe


@dataclass(frozen=True)
class Tuning:
    """The recipe knobs fixed for a whole fit beside precision and optimizer: the fine-tuning
    mode, LoRA rank / alpha / targets and the frozen base's format (resolved: never "auto"),
    the low-precision GEMM recipe (`fp8`, "none" for bf16 GEMMs), CPU activation offload and
    the optimizer step in backward."""

    mode: str = "full"
    rank: int = 16
    alpha: int = 32
    targets: tuple[str, ...] = LINEARS
    base_format: str = "bf16"
    dropout: bool = False
    fp8: str = "none"
    activation_offload: bool = False
    optimizer_in_backward: bool = False
    doc_tokens: int | None = None   # packed documents' mean length (None: one a sequence)

    @property
    def frozen(self) -> bool:
        """The base weights train no gradient and hold no optimizer state."""
        return self.mode != "full"

    @property
    def quantised(self) -> bool:
        return self.base_format != "bf16"

    @classmethod
    def of(cls, layout: Any) -> "Tuning":
        """The recipe of a Layout's knobs, each bad value reported by its option."""
        mode = getattr(layout, "finetune", "full")
        if mode not in MODES:
            raise InputError(named("finetune"),
                             f"{mode!r} is not allowed; one of {', '.join(MODES)}")
        fmt = getattr(layout, "base_format", "auto")
        if fmt not in ("auto",) + BASE_FORMATS:
            raise InputError(named("base_format"), f"{fmt!r} is not allowed; one of auto, "
                                              f"{', '.join(BASE_FORMATS)}")
        if mode == "full" and fmt not in ("auto", "bf16"):
            raise InputError(named("base_format"), f"{fmt} needs a frozen base: --finetune lora or "
                                              "qlora (a trained weight is kept in 16 bits)")
        if mode == "qlora" and fmt in ("bf16",):
            raise InputError(named("base_format"), "qlora quantises the base: int8, nf4 or nf4-dq "
                                              "(--finetune lora keeps a bf16 base)")
        resolved = {"auto": _default_format(mode)}.get(fmt, fmt)
        return cls(mode=mode, rank=int(getattr(layout, "lora_rank", 16)),
                   alpha=int(getattr(layout, "lora_alpha", 32)),
                   targets=parse_targets(getattr(layout, "lora_targets", "all-linear")),
                   base_format=resolved, dropout=bool(getattr(layout, "lora_dropout", False)),
                   fp8=fp8_recipe(getattr(layout, "precision", None),
                                  getattr(layout, "fp8", "none")),
                   activation_offload=bool(getattr(layout, "activation_offload", False)),
                   optimizer_in_backward=bool(getattr(layout, "optimizer_in_backward", False)),
                   doc_tokens=getattr(layout, "doc_tokens", None))

    def layout_fields(self) -> dict[str, Any]:
        """The Layout knobs that state this recipe (a searched layout carries them back)."""
        names = next((k for k, v in TARGET_SETS.items() if v == self.targets),
                     ",".join(self.targets))
        fmt = "auto" if self.base_format == _default_format(self.mode) else self.base_format
        return dict(finetune=self.mode, lora_rank=self.rank, lora_alpha=self.alpha,
                    lora_targets=names, base_format=fmt, lora_dropout=self.dropout,
                    fp8=self.fp8, activation_offload=self.activation_offload,
                    optimizer_in_backward=self.optimizer_in_backward, doc_tokens=self.doc_tokens)

    def describe(self) -> str:
        if not self.frozen:
            return "full fine-tuning (every weight trains)"
        return (f"{self.mode}: LoRA r={self.rank} α={self.alpha} on "
                f"{','.join(self.targets)}, frozen base in {self.base_format}")


FULL = Tuning()


def layer_linears(model: ModelSpec) -> dict[str, tuple[float, float, float]]:
    """Each linear of an average transformer layer: (d_in, d_out, copies per layer). A MoE
    layer's MLP linears are its routed and shared experts' (copies: experts + shared), weighted
    by the share of MoE layers; a plain 2-matrix MLP has up (fc1) and down (fc2), no gate."""
    h, a, kv = float(model.hidden), float(model.attn_dim), float(model.kv_heads * model.head_dim)
    out: dict[str, tuple[float, float, float]] = {
        "q": (h, a, 1.0), "k": (h, kv, 1.0), "v": (h, kv, 1.0), "o": (a, h, 1.0)}
    share = model.moe_layers / model.layers if model.is_moe else 0.0
    f_dense, f_exp = float(model.ffn), float(model.expert_width if model.is_moe else model.ffn)
    copies = (model.experts + model.shared_experts) if model.is_moe else 0
    mlp = ("gate", "up", "down") if model.gated else ("up", "down")
    for name in mlp:
        # one width per layer: dense layers' f, MoE layers' expert width × their experts
        f = f_exp if share >= 0.5 else f_dense
        n = share * copies + (1.0 - share)
        out[name] = (f, h, n) if name == "down" else (h, f, n)
    return out


def adapted_linears(model: ModelSpec, t: Tuning, fused_qkv: bool = False
                    ) -> dict[str, tuple[float, float, float]]:
    """The linears carrying an adapter, as layer_linears gives them. `fused_qkv` (a framework
    whose attention has one QKV linear, Megatron-Core's linear_qkv: its profile's
    memory.lora_fused_qkv): a LoRA on q, k and v is ONE adapter on the fused linear, A r × h
    and B (a + 2·kv) × r (NeMo's lora_kqv_adapter; the MLPerf v5.1 Llama-2-70B runs log
    "44.6 M Trainable params" = 80 · 16 · (8192 + 10240 + 8192 + 8192), mlcommons/
    training_results_v5.1@441d65f4 Cisco/results/1xC885A_M8-8xH200-SXM-141GB/llama2_70b_lora/
    result_0.txt:560-597)."""
    chosen = {n: v for n, v in layer_linears(model).items() if n in t.targets}
    if fused_qkv and {"q", "k", "v"} <= set(chosen):
        q, k, v = chosen.pop("q"), chosen.pop("k"), chosen.pop("v")
        chosen = {"qkv": (q[0], q[1] + k[1] + v[1], 1.0), **chosen}
    return chosen


def adapter_pairs(model: ModelSpec, t: Tuning, fused_qkv: bool = False
                  ) -> list[tuple[float, float]]:
    """(d_in, d_out) of every adapted linear of an average layer, repeated per copy."""
    # r·(d_in + d_out) summed over n copies
    return [(d_in * n, d_out * n)
            for d_in, d_out, n in adapted_linears(model, t, fused_qkv).values()]


def _copies(model: ModelSpec, name: str) -> float:
    """Adapted copies of a linear a token passes through: top-k experts' MLP linears."""
    k = float(max(model.experts_per_token, 1)) if model.is_moe else 1.0
    return k if name in ("gate", "up", "down") and model.is_moe else 1.0


def adapted_count(model: ModelSpec, t: Tuning, fused_qkv: bool = False) -> float:
    """Adapted linears a token passes through in one layer (its rank-r intermediates)."""
    return sum(_copies(model, name) for name in adapted_linears(model, t, fused_qkv))


def dropout_input_width(model: ModelSpec, t: Tuning, fused_qkv: bool = False) -> float:
    """Σ d_in over the adapters a token passes through: what LoRA dropout copies (PEFT
    applies each adapted module's own nn.Dropout to its input; a fused QKV adapter, one)."""
    return sum(d_in * _copies(model, name)
               for name, (d_in, _, _) in adapted_linears(model, t, fused_qkv).items())


def largest_linear(model: ModelSpec) -> float:
    """Parameters of the layer's largest linear (QLoRA dequantises one at a time)."""
    return max(d_in * d_out for d_in, d_out, _ in layer_linears(model).values())
