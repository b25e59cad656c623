"""The layout knobs' options, each from the knob's one declaration in specs.knobs (flag, type,
default, range, help): KNOB_OPTIONS for the commands that take them all (memory, estimate) with
their defaults in KNOB_DEFAULTS, and the declared variants of commands whose default or meaning
differs (each variant's comment says why)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

from planner.cli.options import option, switch, whole
from planner.cli.root import BATCH, LAYOUT
from planner.specs.knobs import KNOB, KNOBS, Knob

_METAVARS = {"schedule": "NAME", "recompute": "MODE", "offload_optimizer": "WHERE",
             "offload_params": "WHERE", "precision": "RECIPE", "optimizer": "NAME",
             "finetune": "MODE", "fp8": "RECIPE", "lora_targets": "MODULES", "base_format": "FORMAT"}


def _panel(k: Knob) -> str:
    return BATCH if k.name == "micro_batch" else LAYOUT


def knob_option(k: Knob, help: str | None = None, *, auto: bool | None = None) -> Any:
    """The option of layout knob `k`: its flag, its range (the Layout field's ge / le), its
    help unless `help` is given; a number or "auto" where the knob allows auto (unless `auto`
    says otherwise)."""
    text = help or k.cli_help or k.help
    auto = k.cli_auto if auto is None else auto
    if auto:
        return Annotated[str, whole(k.flag, f"{text}, or auto", _panel(k), metavar="N|auto",
                                    lower=k.ge, upper=k.le, auto=True)]
    if k.type in (bool, bool | None):
        return Annotated[Optional[bool], switch(f"{k.flag}/--no-{k.flag[2:]}", text, _panel(k))]
    if k.choices or k.type is str:
        return Annotated[str, option(k.flag, help=text, panel=_panel(k),
                                     metavar=_METAVARS.get(k.name, "TEXT"))]
    return Annotated[Optional[int], whole(k.flag, text, _panel(k), lower=k.ge, upper=k.le)]


# The knobs a command takes as options (dp is derived from --gpus), and their CLI defaults (a
# knob that allows auto takes text: its default is the number's text).
KNOB_OPTIONS: dict[str, Any] = {k.name: knob_option(k) for k in KNOBS if k.cli}
KNOB_DEFAULTS: dict[str, Any] = {k.name: str(k.default) if k.cli_auto else k.default
                                 for k in KNOBS if k.cli}

Tp, Pp, Cp, Ep = (KNOB_OPTIONS[n] for n in ("tp", "pp", "cp", "ep"))
Precision, Optimizer, Fp8 = (KNOB_OPTIONS[n] for n in ("precision", "optimizer", "fp8"))
ActivationOffload, OptimizerInBackward, DocTokens = (
    KNOB_OPTIONS[n] for n in ("activation_offload", "optimizer_in_backward", "doc_tokens"))
Finetune, LoraRank, LoraAlpha, LoraTargets, BaseFormat, LoraDropout = (
    KNOB_OPTIONS[n] for n in ("finetune", "lora_rank", "lora_alpha", "lora_targets", "base_format",
                              "lora_dropout"))


def _fixed(name: str, what: str, **kw: Any) -> Any:
    return knob_option(KNOB[name], f"fix {what} (default: searched)", **kw)


# fit searches every value unless one is fixed
TpSearch, PpSearch, CpSearch, EpSearch = (_fixed(n, n.upper()) for n in ("tp", "pp", "cp", "ep"))
ZeroSearch = _fixed("zero", "the ZeRO stage")
RecomputeSearch = _fixed("recompute", "recompute: none, selective, full")
MicroBatchSearch = _fixed("micro_batch", "the micro-batch", auto=False)

# check: DeepSpeed configs do not record them
TpCheck = knob_option(KNOB["tp"], "tensor parallel (DeepSpeed configs do not record it; "
                                  "default 1)")
PpCheck = knob_option(KNOB["pp"], "pipeline parallel (DeepSpeed configs do not record it; "
                                  "default 1)")
EpCheck = knob_option(KNOB["ep"], "expert parallel (DeepSpeed-MoE sets it in the model code, "
                                  "not the config; default 1)")


def _override(name: str, kind: Any, metavar: str) -> Any:
    """check: the value replaces a plan's or engine config's (check takes it as typed and
    checks every override together, each bad one reported at once)."""
    k = KNOB[name]
    help = (k.cli_help or k.help) + (", or auto" if k.cli_auto else "")
    return Annotated[Optional[kind], option(k.flag, help=f"{help}; replaces the file's value "
                                           "(and fills its \"auto\")", panel=_panel(k),
                                           metavar=metavar)]


MicroBatchOverride = _override("micro_batch", int, "N|auto")
RecomputeOverride = _override("recompute", str, "MODE")
PrecisionOverride = _override("precision", str, "RECIPE")

# bubble: the formulas take a number of chunks (no auto) and four schedules
ChunksBubble = Annotated[int, whole("--chunks", "interleaved model chunks per device v (a "
                                    "number: the formula takes no auto)", LAYOUT)]
ScheduleBubble = knob_option(KNOB["schedule"], "1f1b, gpipe, interleaved, zb-h1, dualpipe or "
                                               "dualpipev (the bubble formulas' six)")
# batch: required, the b of B = b x a x DP
MicroBatchBatch = Annotated[int, whole("--micro-batch", "samples per GPU per micro-step (b)",
                                       BATCH)]
# checkpoint: at TP 1 PP 1 only a sharded layout holds a large model
ZeroCheckpoint = knob_option(KNOB["zero"], "ZeRO stage 0-3 of the per-rank checkpoint bytes "
                                           "(default 3 here: at the default --tp 1 --pp 1 only a "
                                           "sharded layout holds a large model, and every rank "
                                           "writes its shard; estimate's layout default is 0)")
# memory: --params alone lists every stage
ZeroMemory = knob_option(KNOB["zero"], "ZeRO stage 0-3 (default 0; with --params alone every "
                                       "stage is listed and this one gets the verdict)")
