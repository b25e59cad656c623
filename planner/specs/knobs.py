"""The layout knobs, each declared once: a field of ``Layout`` (its type and default), with the
rest of the knob in the field's metadata (range, unit and help, the CLI option of ``dtplan
memory`` / ``estimate``, and its search-axis column in ``Candidates`` with the integer code of
each choice). ``KNOBS`` reads them back as one table, from which the CLI builds its options, the
plan schema its LayoutSection (``specs.plan``) and the search its Candidates columns
(``evaluation.candidates``). No pydantic here: ``dtplan --help`` builds the options from this
module alone, and pydantic reads a field's range and description from its metadata (the
``ge``, ``le`` and ``description`` keys) where a Layout's schema is printed.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional

from planner.engine import activations as act
from planner.engine import budget as bud
from planner.io import validate as v
from planner.specs.records import FORBID

Schedule = Literal["1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe", "dualpipev"]
Recompute = Literal["none", "selective", "full"]
Offload = Literal["none", "cpu", "nvme"]
Finetune = Literal["full", "lora", "qlora"]
BaseFormat = Literal["auto", "bf16", "int8", "nf4", "nf4-dq"]
# engine.fp8.NAMES with "none" (tests/test_fp8_recipes.py holds them equal)
Fp8Recipe = Literal["none", "tensorwise", "delayed", "rowwise", "rowwise-gw-hp", "blockwise",
                    "mxfp8", "nvfp4"]


def knob(default: Any, help: str, unit: str = "", *, ge: int | None = None,
         le: int | None = None, **rest: Any) -> Any:
    """A Layout field declaring its knob (the rest of ``Knob``'s attributes): its default, and in
    its metadata the range and the description ("help [unit]") pydantic reads from a dataclass
    field's metadata, and the knob itself."""
    meta: dict[str, Any] = {"description": f"{help} [{unit}]" if unit else help,
                            "knob": dict(help=help, unit=unit, ge=ge, le=le, **rest)}
    meta.update({k: x for k, x in (("ge", ge), ("le", le)) if x is not None})
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How one job is split and run. Degrees multiply to the world size: DP × TP × PP × CP.
    The experts run on a second grid over the same GPUs, ETP × EP × expert-DP × PP (Megatron-Core's
    MoE parallel folding: EP may span TP, CP and DP ranks; torchtitan borrows EP from
    dp_shard·cp·tp likewise)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    # field order: the JSON order of a dumped layout
    tp: int = knob(1, "tensor parallel", "GPUs", ge=1, le=v.MAX_GPUS, column="tp")
    pp: int = knob(1, "pipeline parallel (stages)", "GPUs", ge=1, le=v.MAX_GPUS, column="pp")
    dp: int = knob(1, "data parallel; a plan derives it as gpus ÷ (tp·pp·cp)", "GPUs", ge=1,
                   le=v.MAX_GPUS, plan_optional=True, column="dp", cli=False)
    cp: int = knob(1, "context parallel", "GPUs", ge=1, le=v.MAX_GPUS, column="cp")
    ep: int = knob(1, "expert parallel (folded over TP × CP × DP)", "GPUs", ge=1,
                   le=v.MAX_GPUS, column="ep")
    etp: int | None = knob(
        None, "expert tensor parallel: each expert's weights split over this many GPUs; None = "
        "TP (Megatron-Core's default)", "GPUs", ge=1, le=v.MAX_GPUS, column="etp", none_code=0,
        cli_help="expert tensor parallel (default: TP)")
    zero: int = knob(0, "ZeRO stage 0-3", ge=0, le=3, column="zero")
    shard_group: int | None = knob(
        None, "hybrid sharding (HSDP / ZeRO++ hpZ): ZeRO shards over this many DP ranks; None = "
        "the whole DP group", "DP ranks", ge=1, le=v.MAX_GPUS, column="shard", none_code=0,
        cli_help="hybrid sharding: ZeRO over this many DP ranks")
    micro_batch: int = knob(1, "per-GPU micro-batch", "sequences", ge=1, le=v.MAX_GPUS,
                            plan_optional=True, column="mb", cli_auto=True)
    schedule: Schedule = knob("1f1b", "pipeline schedule: 1f1b, gpipe, interleaved, zb-h1, "
                              "dualpipe or dualpipev", column="schedule",
                              codes={"1f1b": 0, "gpipe": 1, "interleaved": 2, "zb-h1": 3,
                                     "dualpipe": 4, "dualpipev": 5})
    chunks: int = knob(1, "interleaved model chunks per device (v)", "chunks", ge=1,
                       le=v.MAX_GPUS, column="chunks", cli_auto=True,
                       cli_help="interleaved chunks per device v")
    first_stage_layers: int | None = knob(
        None, "layers on the first pipeline stage (Megatron-Core's --decoder-first-pipeline-"
        "num-layers); None = the even split", "layers", ge=1, le=v.MAX_GPUS, column="first",
        none_code=0, cli_help="layers on the first pipeline stage (default: even split)")
    last_stage_layers: int | None = knob(
        None, "layers on the last pipeline stage, which also runs the output layer, the loss "
        "and any MTP modules (--decoder-last-pipeline-num-layers); None = the even split",
        "layers", ge=1, le=v.MAX_GPUS, column="last", none_code=0,
        cli_help="layers on the last pipeline stage (default: even split)")
    sp: bool | None = knob(None, "sequence parallel; None = on whenever TP > 1", column="sp",
                           source="sequence_parallel",
                           cli_help="sequence parallel (default: on when TP > 1)")
    recompute: Recompute = knob("none", "activation recompute: none, selective or full",
                                column="recompute",
                                codes={"none": act.RECOMPUTE_NONE,
                                       "selective": act.RECOMPUTE_SELECTIVE,
                                       "full": act.RECOMPUTE_FULL})
    recompute_layers: int | None = knob(
        None, "full recompute on this many layers per stage; None = all", "layers", ge=0,
        le=v.MAX_GPUS, column="recompute_layers", none_code=-1,
        cli_help="full recompute on this many layers per stage")
    offload_optimizer: Offload = knob("none", "optimizer-state offload: none, cpu or nvme (ZeRO-Offload, "
                                      "ZeRO >= 1); with a paged optimizer, cpu pages its "
                                      "moments to host memory at any ZeRO stage",
                                      column="offload_opt",
                                      codes={"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU,
                                             "nvme": bud.OFFLOAD_NVME})
    offload_params: Offload = knob("none", "parameter offload: none, cpu or nvme (ZeRO-3)",
                                   column="offload_par",
                                   codes={"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU,
                                          "nvme": bud.OFFLOAD_NVME})
    precision: str = knob("mixed", "precision recipe: mixed, mixed-fp32-grads, fp8, fp32, "
                          "bf16-pure", plan_optional=True)
    optimizer: str = knob("adam", "optimizer: adam, adamw, sgd-momentum, sgd, adam-8bit, "
                          "adafactor, paged-adamw, paged-adamw-8bit, muon", plan_optional=True)
    fp8: Fp8Recipe = knob(
        "none", "low-precision recipe of the transformer blocks' linear GEMMs: none (bf16), "
        "tensorwise (one scale per tensor; what --precision fp8 alone means), delayed (TE amax "
        "history), rowwise, rowwise-gw-hp (weight gradient in bf16), blockwise (DeepSeek 1x128 / "
        "128x128), mxfp8 (32-element E8M0 blocks), nvfp4 (4-bit, 16-element E4M3 blocks); "
        "refused where the GPU cannot run it",
        cli_help="low-precision GEMM recipe: none, tensorwise, delayed, rowwise, rowwise-gw-hp, "
        "blockwise, mxfp8 or nvfp4 (--precision fp8 alone = tensorwise)")
    activation_offload: bool = knob(
        False, "CPU activation offload: every tensor saved for backward but the output layer's "
        "goes to pinned host memory on a side stream in forward and comes back in backward "
        "(torchtune OffloadActivations; HF gradient_checkpointing offload); PCIe time beyond "
        "what the compute hides is added, host memory counted",
        cli_help="offload saved activations to host memory over PCIe")
    optimizer_in_backward: bool = knob(
        False, "optimizer step in backward: each parameter is updated and its gradient freed "
        "as soon as it is reduced (torchtune optimizer_in_bwd); no whole-model gradient buffer; "
        "no gradient accumulation", cli_help="step the optimizer in backward (no gradient "
        "buffer; needs one micro-batch per step)")
    doc_tokens: int | None = knob(
        None, "mean tokens per document packed into a sequence, attention kept within each "
        "(variable-length / document-masked flash attention, as packed fine-tuning runs it): "
        "the attention's FLOPs and its kernel's length follow the document; None = one "
        "document fills each sequence", "tokens", ge=1, le=v.MAX_SEQ_LEN,
        cli_help="mean tokens per packed document, attention within each (default: one "
        "document a sequence)")
    # What is trained (not search axes: fixed for a whole fit, like precision and optimizer).
    finetune: Finetune = knob("full", "what trains: full (every weight), lora (LoRA adapters on a "
                              "frozen 16-bit base) or qlora (adapters on a frozen 4-bit base)",
                              cli_help="full, lora or qlora (frozen base + LoRA adapters)")
    lora_rank: int = knob(16, "LoRA rank r (lora / qlora)", ge=1, le=65536)
    lora_alpha: int = knob(32, "LoRA alpha (scaling α/r; no effect on memory or time)", ge=1,
                           le=1 << 20)
    lora_targets: str = knob("all-linear", "LoRA target modules as HF PEFT names them: "
                             "all-linear, attention, mlp, or a comma list of q,k,v,o,gate,up,down")
    lora_dropout: bool = knob(False, "LoRA dropout on (p > 0): each adapted linear's input is "
                              "copied by its dropout and a 1-byte mask kept (HF PEFT default off; "
                              "torchtune and litgpt recipes ship 0.05)",
                              cli_help="LoRA dropout on (p > 0: an input copy and mask per "
                              "adapted linear)")
    base_format: BaseFormat = knob("auto", "frozen base weights: bf16, int8 (LLM.int8), nf4 or "
                                   "nf4-dq (double quantisation); auto = bf16 for lora, nf4-dq "
                                   "for qlora", cli_help="frozen base weights: bf16, int8, nf4, "
                                   "nf4-dq or auto")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallel: etp, else TP (Megatron-Core parallel_state.py:743-744)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data parallel: TP·CP·DP / (ETP·EP), the GPUs of a pipeline stage not in one
        expert-TP × EP group (parallel_state.py:745-748; 0 where the grid does not fold)."""
        grid = self.expert_tp * self.ep
        return self.tp * self.cp * self.dp // grid if (self.tp * self.cp * self.dp) % grid == 0 \
            else 0

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else (self.sp and self.tp > 1)

    @property
    def shard_degree(self) -> int:
        return self.shard_group or self.dp


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One layout knob. ``plan_optional``: a plan may leave it out (None: derived from the GPU
    count, or given at the plan's top level / batch section). ``column``: its Candidates column
    ("": not a search axis; int64: ``codes`` maps each choice to its code, ``none_code`` stands
    for None, ``source`` names the Layout attribute the column holds when that is not the field
    itself)."""

    name: str
    type: Any
    default: Any
    help: str
    unit: str = ""
    ge: int | None = None
    le: int | None = None
    plan_optional: bool = False
    column: str = ""
    codes: dict[str, int] | None = None
    none_code: int | None = None
    source: str | None = None
    cli: bool = True
    cli_auto: bool = False
    cli_help: str = ""

    @property
    def flag(self) -> str:
        """The CLI spelling: ``--micro-batch`` for ``micro_batch``."""
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...]:
        """The values of a knob of string choices (its Literal type), else ()."""
        args = getattr(self.type, "__args__", ())
        return args if getattr(self.type, "__origin__", None) is Literal else ()

    @property
    def description(self) -> str:
        """The field's description in schemas: its help and unit."""
        return f"{self.help} [{self.unit}]" if self.unit else self.help

    def field(self, *, plan: bool = False) -> tuple[Any, Any]:
        """(annotation, pydantic Field) of the plan section's key (a plan may omit some)."""
        optional = plan and self.plan_optional
        ann = Optional[self.type] if optional else self.type
        default = None if optional else self.default
        from pydantic import Field  # only where a model is built from the table
        return ann, Field(default, ge=self.ge, le=self.le, description=self.description)


def _knobs() -> tuple[Knob, ...]:
    types = typing.get_type_hints(Layout)
    return tuple(Knob(name=f.name, type=types[f.name], default=f.default, **f.metadata["knob"])
                 for f in dataclasses.fields(Layout))


KNOBS: tuple[Knob, ...] = _knobs()
KNOB = {k.name: k for k in KNOBS}
