"""The layout knobs, each declared once (no pydantic here: the CLI builds its options from this
table without loading the models; ``specs.layout`` builds the plain Layout class from it,
``specs.plan`` the plan file's pydantic LayoutSection).

Each knob has its name (the Layout field, the plan key ``layout.<name>`` and the JSON name),
type, default, range, unit and help, the CLI option of ``dtplan memory`` / ``estimate``, and its
search-axis column in ``Candidates`` with the integer code of each choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from planner.io import validate as v
from planner.engine import activations as act
from planner.engine import budget as bud
from planner.specs.plain import Plain, record

if TYPE_CHECKING:
    from planner.specs.layout import Layout

Schedule = Literal["1f1b", "gpipe", "interleaved", "zb-h1"]
Recompute = Literal["none", "selective", "full"]
Offload = Literal["none", "cpu", "nvme"]


@record(frozen=True)
class Knob(Plain):
    """One layout knob. ``plan_optional``: a plan may leave it out (None: derived from the GPU
    count, or given at the plan's top level / batch section). ``column``: its Candidates column
    (int64; ``codes`` maps each choice to its code, ``none_code`` stands for None, ``source``
    names the Layout attribute the column holds when that is not the field itself)."""

    name: str
    type: Any
    default: Any
    help: str
    unit: str = ""
    ge: int | None = None
    le: int | None = None
    plan_optional: bool = False
    column: str | None = None
    codes: dict[str, int] | None = None
    none_code: int | None = None
    source: str | None = None
    cli: bool = True
    cli_auto: bool = False
    cli_help: str = ""

    def __init__(self, name: str, type: Any, default: Any, help: str, unit: str = "",
                 **rest: Any) -> None:
        # the table below gives the first five by position
        super().__init__(name=name, type=type, default=default, help=help, unit=unit, **rest)

    @property
    def flag(self) -> str:
        """The CLI spelling: ``--micro-batch`` for ``micro_batch``."""
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...] | None:
        args = getattr(self.type, "__args__", ())
        return args if getattr(self.type, "__origin__", None) is Literal else None

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

    def layout_field(self) -> Any:
        """The plain Layout's field (specs.plain.spec): default, range, description."""
        from planner.specs.plain import spec
        return spec(self.default, ge=self.ge, le=self.le, description=self.description)

    def encode(self, layout: Layout) -> int:
        """The Candidates column's code for this knob of one layout."""
        value = getattr(layout, self.source or self.name)
        if self.codes is not None:
            return self.codes[value]
        if value is None:
            return self.none_code
        return int(value)

    @property
    def default_code(self) -> int:
        """The Candidates code of the default value (sp has none: its default depends on TP)."""
        if self.codes is not None:
            return self.codes[self.default]
        if self.default is None and self.none_code is None:
            raise ValueError(f"layout knob {self.name}: no fixed default code; give its column")
        return self.none_code if self.default is None else int(self.default)

    def decode(self, code: int) -> Any:
        """The Layout value for a Candidates code (the inverse of ``encode``)."""
        if self.codes is not None:
            return {c: k for k, c in self.codes.items()}[code]
        if self.none_code is not None and code == self.none_code:
            return None
        return bool(code) if self.type in (bool, bool | None) else code


KNOBS: tuple[Knob, ...] = (
    Knob("tp", int, 1, "tensor parallel", "GPUs", ge=1, le=v.MAX_GPUS, column="tp"),
    Knob("pp", int, 1, "pipeline parallel (stages)", "GPUs", ge=1, le=v.MAX_GPUS,
         column="pp"),
    Knob("dp", int, 1, "data parallel; a plan derives it as gpus ÷ (tp·pp·cp)", "GPUs", ge=1, le=v.MAX_GPUS,
         plan_optional=True, column="dp", cli=False),
    Knob("cp", int, 1, "context parallel", "GPUs", ge=1, le=v.MAX_GPUS, column="cp"),
    Knob("ep", int, 1, "expert parallel (borrows from DP)", "GPUs", ge=1, le=v.MAX_GPUS,
         column="ep"),
    Knob("zero", int, 0, "ZeRO stage 0-3", ge=0, le=3, column="zero"),
    Knob("shard_group", int | None, None, "hybrid sharding (HSDP / ZeRO++ hpZ): ZeRO shards over "
         "this many DP ranks; None = the whole DP group", "DP ranks", ge=1, le=v.MAX_GPUS, column="shard",
         none_code=0, cli_help="hybrid sharding: ZeRO over this many DP ranks"),
    Knob("micro_batch", int, 1, "per-GPU micro-batch", "sequences", ge=1, le=v.MAX_GPUS, plan_optional=True,
         column="mb", cli_auto=True),
    Knob("schedule", Schedule, "1f1b", "pipeline schedule: 1f1b, gpipe, interleaved or zb-h1",
         column="schedule", codes={"1f1b": 0, "gpipe": 1, "interleaved": 2,
                                   "zb-h1": 3}),
    Knob("chunks", int, 1, "interleaved model chunks per device (v)", "chunks", ge=1, le=v.MAX_GPUS,
         column="chunks", cli_auto=True, cli_help="interleaved chunks per device v"),
    Knob("sp", bool | None, None, "sequence parallel; None = on whenever TP > 1", column="sp",
         source="sequence_parallel", cli_help="sequence parallel (default: on when TP > 1)"),
    Knob("recompute", Recompute, "none", "activation recompute: none, selective or full",
         column="recompute", codes={"none": act.RECOMPUTE_NONE,
                                    "selective": act.RECOMPUTE_SELECTIVE,
                                    "full": act.RECOMPUTE_FULL}),
    Knob("recompute_layers", int | None, None, "full recompute on this many layers per stage; "
         "None = all", "layers", ge=0, le=v.MAX_GPUS, column="recompute_layers", none_code=-1,
         cli_help="full recompute on this many layers per stage"),
    Knob("offload_optimizer", Offload, "none", "optimizer-state offload: none, cpu or nvme",
         column="offload_opt", codes={"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU,
                                      "nvme": bud.OFFLOAD_NVME}),
    Knob("offload_params", Offload, "none", "parameter offload: none, cpu or nvme (ZeRO-3)",
         column="offload_par", codes={"none": bud.OFFLOAD_NONE, "cpu": bud.OFFLOAD_CPU,
                                      "nvme": bud.OFFLOAD_NVME}),
    Knob("precision", str, "mixed", "precision recipe: mixed, mixed-fp32-grads, fp8, fp32, "
         "bf16-pure", plan_optional=True),
    Knob("optimizer", str, "adam", "optimizer: adam, adamw, sgd-momentum, sgd, adam-8bit, "
         "adafactor", plan_optional=True),
)
KNOB = {k.name: k for k in KNOBS}
