"""The shared option set: every option two commands take is declared here once, with one name,
one metavar, one default and one help text; commands pick from it (`opt("seq_len")`). A
command whose default or meaning differs for a reason picks a declared variant
(`opt("tp", "search")`) whose help says why. Older spellings stay accepted as aliases that
help screens do not list (`--price-per-gpu-hour` is `--gpu-hour-cost`).

Also here: the output formats and number lists ("8,64,512", "64..1024")."""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable

from planner.errors import InputError
from planner.io.numbers import format_number, parse_number, parse_real, parse_whole
from planner.resolve.job import DEFAULT_SEQ_LEN, DEFAULT_TOKENS_PER_BATCH
from planner.specs.plain import Plain, record, replace
from planner.io import validate as v
from planner.io.validate import MAX_GPUS

# Bounded work for list options (--gpus 8,16,... of fit and comm, --micro-batches, --intervals):
# a log2 range 1..10^7 is 25 values; 3,000 GPU counts were 3,000 searches (51 s).
MAX_LIST_VALUES = 64
# A fit sweep runs one whole search per count (0.1 s at 10^3 GPUs, ~2.5 s CPU at 10^7: the
# benchmarks' figures), so its list is shorter: 16 counts is 64..2^21 in powers of two.
MAX_FIT_COUNTS = 16
# Whole-number options stop at 2^53 (the largest integer a float64 holds exactly; no count in
# a training job is near it), so nothing downstream overflows a C long; GPU counts at MAX_GPUS.
MAX_WHOLE = 2 ** 53


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _option_error(message: str) -> Exception:
    """A value an option's parser refused, as click's BadParameter whose message is the
    InputError's one line ("--seq-len: must be a whole number, got '8.5'"), exit 2. Built on
    first refusal: the argv binder (cli/bind.py) never imports typer."""
    global _OptionError
    if _OptionError is None:
        try:  # typer ≥ 0.20 vendors click as typer._click; older releases depend on click
            from typer._click.exceptions import BadParameter
        except ImportError:  # pragma: no cover
            from click.exceptions import BadParameter

        class OptionError(BadParameter):
            def format_message(self) -> str:
                return self.message
        _OptionError = OptionError
    return _OptionError(message)


_OptionError: Any = None


def check_number(flag: str, *, whole: bool = True, sequence: bool = False,
                 lower: float | None = None, upper: float | None = MAX_WHOLE,
                 auto: bool = False) -> Callable[[Any], Any]:
    """A numeric option's value parser: the one number parser (70B, 4M, 15T, 4Mi; with
    `sequence`, 8k = 8192) and the option's range [lower, upper], raising InputError naming
    `flag`. With `auto`, "auto" is allowed too and a number comes back as its text ("8")."""
    def parse(text: Any) -> Any:
        if text is None:
            return None
        if auto and str(text).strip() == "auto":
            return "auto"
        if not whole:
            return parse_real(flag, text, lower=lower, upper=upper)
        n = parse_whole(flag, text, sequence=sequence, lower=lower, upper=upper)
        return str(n) if auto else n
    return parse


def number(flag: str, *, whole: bool = True, sequence: bool = False, lower: float | None = None,
           upper: float | None = MAX_WHOLE, auto: bool = False) -> Callable[[Any], Any]:
    """The typer `parser` of a numeric option: check_number's parser, its refusal raised as
    click's BadParameter (typer prints it as the one line, exit 2)."""
    check = check_number(flag, whole=whole, sequence=sequence, lower=lower, upper=upper,
                         auto=auto)

    def parse(text: Any) -> Any:
        try:
            return check(text)
        except InputError as e:
            raise _option_error(str(e)) from None
    parse.__name__ = f"parse_{flag.strip('-').replace('-', '_')}"
    return parse


def real(flag: str, help: str, default: Any = None, *, within: tuple[float, float] | None = None
         ) -> Opt:
    """A command's own numeric option (not shared), through the number parser, within the range
    `within` (validate's named bounds) when given."""
    lower, upper = within or (None, None)
    return Opt((flag,), help, default, "NUM", "real", lower=lower, upper=upper)


@record(frozen=True, positional=True, coerce=False)
class Opt(Plain):
    """One option's declaration. `kind`: "whole" / "seq" / "real" numbers go through the one
    number parser; "flag" is a switch; "" takes text. `aliases`: older spellings, accepted and
    hidden from help. `why`: a variant's reason for differing from the base declaration.
    `lower`, `upper`: the allowed range, enforced as the option is parsed (whole numbers stop at
    MAX_WHOLE unless told; "real" ones are unbounded unless told). `auto`: "auto" allowed too.
    `hidden`: accepted, not listed in help (a command that does not use it). Two binders read
    it: typer (`option()`) and the argv binder (cli/bind.py, through `check()`)."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    metavar: str | None = None
    kind: str = ""
    aliases: tuple[str, ...] = ()
    why: str = ""
    lower: float | None = None
    upper: float | None = None
    auto: bool = False
    hidden: bool = False

    @property
    def flag(self) -> str:
        return self.flags[0]

    def _range(self) -> dict[str, Any]:
        whole = self.kind != "real"
        upper = MAX_WHOLE if whole and self.upper is None else self.upper
        return {"whole": whole, "sequence": self.kind == "seq", "lower": self.lower,
                "upper": upper, "auto": self.auto}

    @property
    def numeric(self) -> bool:  # its value goes through the number parser
        return self.kind in ("whole", "seq", "real")

    def check(self) -> Callable[[Any], Any] | None:
        """The value parser of a numeric option (raising InputError), None for text and flags."""
        return check_number(self.flag, **self._range()) if self.numeric else None

    def option(self) -> Any:
        """The typer.Option of this declaration."""
        import typer
        if self.kind == "flag":
            return typer.Option(self.default, *self.flags, *self.aliases, help=self.help,
                                hidden=self.hidden)
        parser = number(self.flag, **self._range()) if self.numeric else None
        return typer.Option(self.default, *self.flags, *self.aliases, help=self.help,
                            metavar=self.metavar, parser=parser, hidden=self.hidden)


def _n(flag: str, help: str, default: Any = None, kind: str = "whole", **kw: Any) -> Opt:
    return Opt((flag,), help, default, "NUM" if kind == "real" else "N", kind, **kw)


_TPB = format_number(DEFAULT_TOKENS_PER_BATCH)
SHARED: dict[str, Opt] = {o_name: o for o_name, o in (
    # Model: exactly one source.
    ("model", Opt(("--model", "-m"), "model preset name (see `dtplan models`)", metavar="NAME")),
    ("model_config", Opt(("--model-config",), "Hugging Face config.json path", metavar="PATH")),
    ("params", Opt(("--params",), "bare parameter count, e.g. 70e9 or 70B (a dense shape is "
                   "inferred; the output names the nearest real preset)", metavar="N")),
    ("nearest_preset", Opt(("--nearest-preset",), "with --params: plan the nearest real preset "
                           "instead of the inferred shape", False, kind="flag")),
    ("layers", _n("--layers", "architecture: transformer layers")),
    ("hidden", _n("--hidden", "architecture: hidden size")),
    ("heads", _n("--heads", "architecture: attention heads")),
    ("kv_heads", _n("--kv-heads", "architecture: KV heads (GQA)")),
    ("ffn", _n("--ffn", "architecture: FFN size (default 4h GeLU, ~8h/3 SwiGLU)")),
    ("vocab", _n("--vocab", "architecture: vocabulary, e.g. 32k = 32,000")),
    ("mlp", Opt(("--mlp",), "architecture: gelu (GPT-style) or swiglu (Llama-style)",
                metavar="KIND")),
    ("dropout", Opt(("--dropout/--no-dropout",), "train with dropout (default: as the model "
                    "source says; GeLU flags: on; a dropout model's attention defaults to "
                    "unfused, as in the papers)", kind="flag")),
    # Hardware and GPUs.
    ("gpus", _n("--gpus", "GPUs in the job", upper=MAX_GPUS)),
    ("hardware", Opt(("--hardware",), "hardware profile name (default h100; `dtplan profiles`)",
                     metavar="NAME")),
    ("hardware_file", Opt(("--hardware-file",), "hardware profile TOML file", metavar="PATH")),
    ("gpus_per_node", _n("--gpus-per-node", "what-if: GPUs per node / NVLink domain "
                         "(default: the profile's)")),
    ("gpu_memory_gb", Opt(("--gpu-memory-gib",), "what-if: GPU memory, GiB (80 = 85.9 GB)",
                          metavar="GIB", kind="real", aliases=("--gpu-memory-gb",),
                          lower=v.GPU_MEMORY_GIB[0], upper=v.GPU_MEMORY_GIB[1])),
    ("nic_gbit", Opt(("--nic-gbit-per-gpu",), "what-if: NIC bandwidth per GPU, Gb/s (default: "
                     "the profile's)", metavar="GBIT", kind="real", aliases=("--nic-gbit",),
                     lower=v.NIC_GBIT[0], upper=v.NIC_GBIT[1])),
    # Batch.
    ("seq_len", _n("--seq-len", f"sequence length, e.g. 8k = 8192 (default "
                   f"{format_number(DEFAULT_SEQ_LEN, sequence=True)} = {DEFAULT_SEQ_LEN})",
                   kind="seq")),
    ("global_batch", _n("--global-batch", "sequences per optimizer step")),
    ("tokens_per_batch", Opt(("--tokens-per-batch",), f"tokens per step, e.g. 4M or 16Mi "
                             f"(default {_TPB} = {DEFAULT_TOKENS_PER_BATCH:,})", metavar="N")),
    ("framework", Opt(("--framework",), "megatron (default), torchtitan, deepspeed, fsdp, or a "
                      "framework profile .toml", metavar="NAME|PATH")),
    # Training, checkpoints and failures.
    ("train_tokens", Opt(("--train-tokens",), "tokens to train, e.g. 15T (time and cost to "
                         "train)", metavar="N")),
    ("gpu_hour_cost", Opt(("--gpu-hour-cost",), "price of one GPU-hour, any currency (cost to "
                          "train)", metavar="COST", kind="real",
                          aliases=("--price-per-gpu-hour",))),
    ("gpu_mtbf_hours", _n("--gpu-mtbf-hours", "MTBF of one GPU, h (default 50,677 h, Llama 3's "
                          "interruption rate); the job's is this ÷ GPUs", kind="real",
                          lower=v.MTBF_HOURS[0], upper=v.MTBF_HOURS[1])),
    ("job_mtbf_hours", _n("--job-mtbf-hours", "the job's mean time between interruptions, h "
                          "(replaces --gpu-mtbf-hours)", kind="real", aliases=("--mtbf-hours",),
                          lower=v.MTBF_HOURS[0], upper=v.MTBF_HOURS[1])),
    ("async_checkpoint", Opt(("--async-checkpoint",), "asynchronous checkpoints (the write "
                             "overlaps training; only the copy to host memory stalls)", False,
                             kind="flag", aliases=("--async",))),
    # Memory margins.
    ("context_gb", _n("--context-gb", "CUDA/NCCL context, GB", kind="real",
                      lower=v.RESERVE_GB[0], upper=v.RESERVE_GB[1])),
    ("comm_buffer_gb", _n("--comm-buffer-gb", "communication buffers, GB", kind="real",
                          lower=v.RESERVE_GB[0], upper=v.RESERVE_GB[1])),
    # Output and files.
    ("fmt", Opt(("--format", "-f"), "table, json or markdown", Format.table)),
    ("gib", Opt(("--gib",), "show GiB instead of GB", False, kind="flag")),
    ("output", Opt(("--output", "-o"), "output file, or - for stdout", "-", "PATH")),
    ("force", Opt(("--force",), "overwrite an existing output file", False, kind="flag")),
    ("warmup_steps", _n("--warmup-steps", "drop logged steps up to this step as warm-up", 1,
                             lower=0)),
    ("plan", Opt(("--plan",), "the job: plan file or engine config", ..., "PATH")),
)}


def _margins() -> None:
    # the budget's defaults the help quotes, read from their named constants (not the model)
    from planner.specs.reserves import FRAGMENTATION_SHARE, MARGIN_SHARE
    SHARED["fragmentation"] = _n("--fragmentation", "allocator fragmentation share (default "
                                 f"{FRAGMENTATION_SHARE:g})", kind="real")
    SHARED["margin"] = _n("--margin", f"safety margin share (default {MARGIN_SHARE:g})",
                          kind="real")


_margins()

# The layout knobs come from their one declaration in specs.knobs (KNOBS).
_KNOB_METAVARS = {"schedule": "NAME", "recompute": "MODE", "offload_optimizer": "WHERE",
                  "offload_params": "WHERE", "precision": "RECIPE", "optimizer": "NAME"}


def _knob_opt(k: Any) -> Opt:
    """A layout knob's option, its range the knob's own (the Layout field's ge / le)."""
    text = k.cli_help or k.help
    if k.cli_auto:
        return Opt((k.flag,), f"{text}, or auto", str(k.default), "N|auto", "whole", lower=k.ge,
                   upper=k.le, auto=True)
    if k.type in (bool, bool | None):
        return Opt((f"{k.flag}/--no-{k.flag[2:]}",), text, k.default, kind="flag")
    if k.choices or k.type is str:
        return Opt((k.flag,), text, k.default, _KNOB_METAVARS.get(k.name, "TEXT"))
    return Opt((k.flag,), text, k.default, "N", "whole", lower=k.ge, upper=k.le)


def _knobs() -> None:
    from planner.specs.knobs import KNOBS
    for k in KNOBS:
        if k.cli:
            SHARED[k.name] = _knob_opt(k)


_knobs()


def _fix(name: str, what: str) -> Opt:
    return replace(SHARED[name], default=None, help=f"fix {what} (default: searched)",
                   why="fit searches every value unless one is fixed")


# (concept, variant) → the declaration of a command whose default or meaning differs; the help
# of each says why.
VARIANTS: dict[tuple[str, str], Opt] = {
    **{(k, "search"): _fix(k, w) for k, w in (("tp", "TP"), ("pp", "PP"), ("cp", "CP"),
                                              ("ep", "EP"), ("zero", "the ZeRO stage"),
                                              ("recompute", "recompute: none, selective, full"))},
    ("micro_batch", "search"): replace(_fix("micro_batch", "the micro-batch"), kind="whole",
                                       metavar="N", auto=False),
    ("gpus", "list"): Opt(("--gpus",), "GPU count, a list 64,128 or a range 64..1024 (one "
                          f"search each, at most {MAX_FIT_COUNTS} counts)", ..., "N|LIST",
                          why="a list or range"),
    ("gpus", "ranks"): Opt(("--gpus",), "rank counts: 8 or 8,64,512 (repeatable)", ["8"],
                           "N|LIST", why="a list"),
    ("gpus", "one"): _n("--gpus", "GPUs in the job (default 1: one layout on one GPU unless "
                        "told)", 1, why="one layout", upper=MAX_GPUS),
    ("gpus", "required"): _n("--gpus", "GPUs in the job (required)", ..., why="required", upper=MAX_GPUS),
    ("gpus", "plan"): _n("--gpus", "GPUs in the job (without a plan file; a plan says it)",
                         why="a plan file says it", upper=MAX_GPUS),
    ("gpus", "check"): _n("--gpus", "GPUs in the job (engine configs; a plan file says it)",
                          why="a plan file says it", upper=MAX_GPUS),
    ("hardware", "calibrate"): Opt(("--hardware",), "hardware profile: a100-80g or "
                                   "h100-96gb-500w keep the rows that ran there; another runs "
                                   "every row on it (default: each row on its own GPU)",
                                   metavar="NAME", why="the published rows ran on their own"),
    ("hardware", "comm"): Opt(("--hardware",), "hardware profile whose NVLink + network "
                              "topology to use instead of --bandwidth", metavar="NAME",
                              why="comm also works on one bare link"),
    ("hardware", "plan"): Opt(("--hardware",), "hardware profile name or .toml file (default: "
                              "the plan's)", metavar="NAME", why="the plan names one"),
    ("framework", "calibrate"): Opt(("--framework",), "keep the rows that ran on this framework "
                                    "(megatron, torchtitan)", metavar="NAME",
                                    why="a filter of published rows"),
    ("output", "calibrate"): Opt(("--output", "-o"), "write the calibrated profile TOML here "
                                 "(default: write nothing)", None, "PATH",
                                 why="writing is optional"),
    ("plan", "calibrate"): Opt(("--plan",), "the job: plan file or engine config (fits compute "
                               "speed from its step time; optional)", None, "PATH",
                               why="optional"),
    ("tp", "check"): replace(SHARED["tp"], default=None, help="tensor parallel (DeepSpeed "
                             "configs do not record it; default 1)", why="from the config"),
    ("pp", "check"): replace(SHARED["pp"], default=None, help="pipeline parallel (DeepSpeed "
                             "configs do not record it; default 1)", why="from the config"),
    ("seq_len", "check"): replace(SHARED["seq_len"], help="sequence length, e.g. 8k = 8192 "
                                  "(DeepSpeed configs do not record it)", why="from the config"),
    ("seq_len", "batch"): replace(SHARED["seq_len"], help="tokens per sample, e.g. 8k = 8192 "
                                  "(optional: adds the tokens per step)", why="optional"),
    ("global_batch", "target"): replace(SHARED["global_batch"], help="target sequences per "
                                        "optimizer step (solves --accum)", why="a target"),
    ("micro_batch", "batch"): _n("--micro-batch", "samples per GPU per micro-step (b)", ...,
                                 why="required"),
    ("chunks", "bubble"): _n("--chunks", "interleaved model chunks per device v (a number: the "
                             "formula takes no auto)", 1, why="no auto"),
    ("schedule", "bubble"): replace(SHARED["schedule"], help="1f1b, gpipe, interleaved or zb-h1 "
                                    "(the bubble formulas' four)", why="four schedules"),
    ("gpus_per_node", "layout"): _n("--gpus-per-node", "GPUs per node / NVLink domain (default "
                                    "8, an HGX node: layout reads no profile)", 8,
                                    why="no profile"),
    ("zero", "checkpoint"): replace(SHARED["zero"], default=3, help="ZeRO stage 0-3 of the "
                                    "per-rank checkpoint bytes (default 3 here: at the default "
                                    "--tp 1 --pp 1 only a sharded layout holds a large model, "
                                    "and every rank writes its shard; estimate's layout "
                                    "default is 0)", why="TP 1 PP 1 needs sharding"),
    ("zero", "memory"): replace(SHARED["zero"], default=None, help="ZeRO stage 0-3 (default 0; "
                                "with --params alone every stage is listed and this one gets "
                                "the verdict)", why="the states table"),
    # override values come in as typed; check's _options checks them together (every bad one
    # reported at once)
    **{(k, "override"): replace(SHARED[k], default=None, help=f"{SHARED[k].help}; replaces the "
                                "file's value (and fills its \"auto\")", auto=False, kind="",
                                why="replaces a plan's or engine config's value")
       for k in ("micro_batch", "recompute", "precision")},
    ("fmt", "check"): Opt(("--format", "-f"), "table, json, markdown or github (workflow "
                          "annotations)", "table", why="github annotations"),
}


def decl(name: str, variant: str | None = None) -> Opt:
    """The declaration of option `name` (a SHARED concept), or of one of its VARIANTS."""
    return VARIANTS[(name, variant)] if variant else SHARED[name]


def opt(name: str, variant: str | None = None) -> Any:
    """The typer.Option of a shared concept (or of its declared variant)."""
    return decl(name, variant).option()


def unlisted(name: str) -> Opt:
    """A shared concept's declaration, accepted and not listed in help."""
    return replace(SHARED[name], hidden=True)


# Older spellings, accepted everywhere their concept is and listed nowhere in help.
ALIASES: frozenset[str] = frozenset(a for o in [*SHARED.values(), *VARIANTS.values()]
                                    for a in o.aliases)


def parse_list(field: str, values: list[str] | str | None) -> list[float]:
    """Repeated options and comma lists: ["8,64", "512"] → [8, 64, 512]. "a..b" expands to the
    powers of two from a to b (for GPU counts)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[float] = []
    for item in values:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if ".." in part:
                lo_s, hi_s = part.split("..", 1)
                lo, hi = parse_number(field, lo_s), parse_number(field, hi_s)
                if lo <= 0 or hi < lo:
                    raise InputError(field, f"range {part!r} must be low..high with 0 < low ≤ high")
                x = lo
                while x <= hi:
                    out.append(x)
                    x *= 2
                if out[-1] != hi:
                    out.append(hi)
            else:
                out.append(parse_number(field, part))
    if not out:
        raise InputError(field, "needs at least one value")
    if len(out) > MAX_LIST_VALUES:
        raise InputError(field, f"at most {MAX_LIST_VALUES} values, got {len(out)} (each one is "
                                "a separate search or table row)")
    return out
