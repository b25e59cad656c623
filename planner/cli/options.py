"""The shared option set: every option two commands take is declared here once, as a typer
`Annotated` alias (its name, help, metavar, help panel and value parser); commands annotate a
parameter with it (`seq_len: SeqLen = None`). A command whose default or meaning differs for a
reason uses a declared variant (`tp: TpSearch = None`) whose help says why. Older spellings stay
accepted as hidden options of their own (`--price-per-gpu-hour` is `--gpu-hour-cost`); the
current spelling wins when both are given.

Numbers go through the one number parser (planner.io.numbers: 70B, 4M, 15T, 4Mi; 8k = 8192 for
sequences) as typer's `parser`, so a refused value is the parser's own line ("--seq-len: must be
a whole number, got '8.5'"), exit 2. The layout knobs' options derive from their one
declaration (specs.knobs). Also here: the output formats and number lists ("8,64,512",
"64..1024")."""

from __future__ import annotations

import copy
import typing
from enum import Enum
from typing import Annotated, Any, Callable, List, Optional

import typer

from planner.cli.root import BATCH, HARDWARE, LAYOUT, MARGINS, MODEL, OUTPUT, TRAINING
from planner.errors import InputError
from planner.io import validate as v
from planner.io.numbers import format_number, parse_number, parse_real, parse_whole
from planner.io.validate import MAX_GPUS
from planner.resolve.job import DEFAULT_SEQ_LEN, DEFAULT_TOKENS_PER_BATCH
from planner.specs.reserves import FRAGMENTATION_SHARE, MARGIN_SHARE

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


class GateFormat(str, Enum):
    """`dtplan check`'s formats: the three, and GitHub workflow annotations."""
    table = "table"
    json = "json"
    markdown = "markdown"
    github = "github"


class OptionError(typer.BadParameter):
    """A value an option's parser refused: typer's usage error whose message is the
    InputError's one line ("--seq-len: must be a whole number, got '8.5'"), exit 2."""

    def format_message(self) -> str:
        return self.message


def number(flag: str, *, whole: bool = True, sequence: bool = False, lower: float | None = None,
           upper: float | None = MAX_WHOLE, auto: bool = False) -> Callable[[Any], Any]:
    """The typer `parser` of a numeric option: the one number parser (with `sequence`, 8k =
    8192) within [lower, upper], its refusal naming `flag`. With `auto`, "auto" is allowed too
    and a number comes back as its text ("8")."""
    def parse(text: Any) -> Any:
        try:
            if auto and str(text).strip() == "auto":
                return "auto"
            if not whole:
                return parse_real(flag, text, lower=lower, upper=upper)
            n = parse_whole(flag, text, sequence=sequence, lower=lower, upper=upper)
            return str(n) if auto else n
        except InputError as e:
            raise OptionError(str(e)) from None
    parse.__name__ = f"parse_{flag.strip('-').replace('-', '_')}"
    return parse


def option(*names: str, help: str, panel: str | None = None, metavar: str | None = None,
           parser: Callable[[Any], Any] | None = None) -> Any:
    """typer's Option (for `Annotated`) with dtplan's help panel."""
    return typer.Option(*names, help=help, metavar=metavar, parser=parser, rich_help_panel=panel)


def switch(names: str, help: str, panel: str | None = None) -> Any:
    """An on/off option (`--gib`, `--sp/--no-sp`): no value, so no type in the help."""
    return option(names, help=help, panel=panel, metavar="")


def whole(flag: str, help: str, panel: str | None = None, *, metavar: str = "N",
          sequence: bool = False, lower: float | None = None, upper: float | None = MAX_WHOLE,
          auto: bool = False) -> Any:
    """A whole-number option through the number parser, within [lower, upper]."""
    return option(flag, help=help, panel=panel, metavar=metavar,
                  parser=number(flag, sequence=sequence, lower=lower, upper=upper, auto=auto))


def real(flag: str, help: str, panel: str | None = None, *, metavar: str = "NUM",
         within: tuple[float | None, float | None] | None = None) -> Any:
    """A real-number option through the number parser, within `within` (validate's named
    bounds) when given."""
    lower, upper = within or (None, None)
    return option(flag, help=help, panel=panel, metavar=metavar,
                  parser=number(flag, whole=False, lower=lower, upper=upper))


def _info(declared: Any) -> tuple[Any, Any]:
    kind, info = typing.get_args(declared)
    return kind, copy.copy(info)


def unlisted(declared: Any) -> Any:
    """A shared option accepted and not listed in help (a command that does not use it)."""
    return Annotated[typing.get_args(declared)[0], unlisted_info(declared)]


def unlisted_info(declared: Any) -> Any:
    """The option of ``unlisted(declared)``, for a type alias the type checker reads:
    ``Annotated[Optional[str], unlisted_info(TrainTokens)]``."""
    _kind, info = _info(declared)
    info.hidden = True
    return info


def older(declared: Any, spelling: str) -> Any:
    """The older spelling of a shared option: a hidden option of its own, parsed alike (a bad
    value's error names the current spelling)."""
    kind, info = _info(declared)
    info.default, info.param_decls, info.hidden = spelling, (), True
    return Annotated[kind, info]


def given(current: Any, old: Any) -> Any:
    """An option's value from its current spelling, else from its older one."""
    return old if current is None else current


# ---- the model: exactly one source -------------------------------------------------------------

Model = Annotated[Optional[str], option("--model", "-m", help="model preset name (see `dtplan "
                                        "models`)", panel=MODEL, metavar="NAME")]
ModelConfig = Annotated[Optional[str], option("--model-config", help="Hugging Face config.json "
                                              "path", panel=MODEL, metavar="PATH")]
Params = Annotated[Optional[str], option("--params", help="bare parameter count, e.g. 70e9 or 70B "
                                         "(a dense shape is inferred; the output names the "
                                         "nearest real preset)", panel=MODEL, metavar="N")]
NearestPreset = Annotated[bool, switch("--nearest-preset", "with --params: plan the nearest real "
                                       "preset instead of the inferred shape", MODEL)]
Layers = Annotated[Optional[int], whole("--layers", "architecture: transformer layers", MODEL)]
Hidden = Annotated[Optional[int], whole("--hidden", "architecture: hidden size", MODEL)]
Heads = Annotated[Optional[int], whole("--heads", "architecture: attention heads", MODEL)]
KvHeads = Annotated[Optional[int], whole("--kv-heads", "architecture: KV heads (GQA)", MODEL)]
Ffn = Annotated[Optional[int], whole("--ffn", "architecture: FFN size (default 4h GeLU, ~8h/3 "
                                     "SwiGLU)", MODEL)]
Vocab = Annotated[Optional[int], whole("--vocab", "architecture: vocabulary, e.g. 32k = 32,000",
                                       MODEL)]
# Mixture-of-experts and attention-window shape flags (planner.resolve.job.ARCH_EXTRA)
Experts = Annotated[Optional[int], whole("--experts", "architecture (MoE): routed experts per "
                                         "MoE layer", MODEL)]
ExpertsPerToken = Annotated[Optional[int], whole("--experts-per-token", "architecture (MoE): "
                                                 "experts each token is routed to (top-k)",
                                                 MODEL)]
ExpertFfn = Annotated[Optional[int], whole("--expert-ffn", "architecture (MoE): one expert's MLP "
                                           "width (default --ffn)", MODEL)]
SharedExperts = Annotated[Optional[int], whole("--shared-experts", "architecture (MoE): shared "
                                               "experts every token passes (width --expert-ffn)",
                                               MODEL, lower=0)]
DenseLayers = Annotated[Optional[int], whole("--dense-layers", "architecture (MoE): leading "
                                             "dense layers (DeepSeek-V3: 3)", MODEL, lower=0)]
MoeEvery = Annotated[Optional[int], whole("--moe-every", "architecture (MoE): MoE in every k-th "
                                          "layer (Llama 4 Maverick: 2)", MODEL)]
Window = Annotated[Optional[int], whole("--window", "architecture: sliding attention window in "
                                        "tokens", MODEL)]
GlobalEvery = Annotated[Optional[int], whole("--global-every", "architecture: with --window, "
                                             "every k-th layer attends globally (Gemma 3: 6)",
                                             MODEL)]
Mlp = Annotated[Optional[str], option("--mlp", help="architecture: gelu (GPT-style) or swiglu "
                                      "(Llama-style)", panel=MODEL, metavar="KIND")]
Dropout = Annotated[Optional[bool], switch("--dropout/--no-dropout", "train with dropout "
                                           "(default: as the model source says; GeLU flags: on; a "
                                           "dropout model's attention defaults to unfused, as in "
                                           "the papers)", MODEL)]

# ---- hardware and GPUs ------------------------------------------------------------------------

Gpus = Annotated[Optional[int], whole("--gpus", "GPUs in the job", HARDWARE, upper=MAX_GPUS)]
# fit: a list or range
GpusList = Annotated[List[str], option("--gpus", help="GPU count, a list 64,128 or a range "
                                       "64..1024 (one search each, at most "
                                       f"{MAX_FIT_COUNTS} counts)", panel=HARDWARE,
                                       metavar="N|LIST")]
# comm: a list
GpusRanks = Annotated[List[str], option("--gpus", help="rank counts: 8 or 8,64,512 "
                                        "(repeatable)", panel=HARDWARE, metavar="N|LIST")]
# memory, estimate: one layout
GpusOne = Annotated[int, whole("--gpus", "GPUs in the job (default 1: one layout on one GPU "
                               "unless told)", HARDWARE, upper=MAX_GPUS)]
GpusRequired = Annotated[int, whole("--gpus", "GPUs in the job (required)", HARDWARE,
                                    upper=MAX_GPUS)]
# report, export: a plan file says it
GpusPlan = Annotated[Optional[int], whole("--gpus", "GPUs in the job (without a plan file; a plan "
                                          "says it)", HARDWARE, upper=MAX_GPUS)]
GpusCheck = Annotated[Optional[int], whole("--gpus", "GPUs in the job (engine configs; a plan "
                                           "file says it)", HARDWARE, upper=MAX_GPUS)]
Hardware = Annotated[Optional[str], option("--hardware", help="hardware profile name (default "
                                           "h100; `dtplan profiles`)", panel=HARDWARE,
                                           metavar="NAME")]
# calibrate: the published rows ran on their own
HardwareCalibrate = Annotated[Optional[str], option(
    "--hardware", help="hardware profile: a100-80g or h100-96gb-500w keep the rows that ran "
    "there; another runs every row on it (default: each row on its own GPU)", panel=HARDWARE,
    metavar="NAME")]
# comm also works on one bare link
HardwareComm = Annotated[Optional[str], option("--hardware", help="hardware profile whose NVLink "
                                               "+ network topology to use instead of "
                                               "--bandwidth", panel=HARDWARE, metavar="NAME")]
# a plan names one
HardwarePlan = Annotated[Optional[str], option("--hardware", help="hardware profile name or .toml "
                                               "file (default: the plan's)", panel=HARDWARE,
                                               metavar="NAME")]
HardwareFile = Annotated[Optional[str], option("--hardware-file", help="hardware profile TOML "
                                               "file", panel=HARDWARE, metavar="PATH")]
GpusPerNode = Annotated[Optional[int], whole("--gpus-per-node", "what-if: GPUs per node / NVLink "
                                             "domain (default: the profile's)", HARDWARE)]
# layout reads no profile
GpusPerNodeLayout = Annotated[int, whole("--gpus-per-node", "GPUs per node / NVLink domain "
                                         "(default 8, an HGX node: layout reads no profile)",
                                         HARDWARE)]
GpuMemoryGib = Annotated[Optional[float], real("--gpu-memory-gib", "what-if: GPU memory, GiB (80 "
                                               "= 85.9 GB)", HARDWARE, metavar="GIB",
                                               within=v.GPU_MEMORY_GIB)]
NicGbit = Annotated[Optional[float], real("--nic-gbit-per-gpu", "what-if: NIC bandwidth per GPU, "
                                          "Gb/s (default: the profile's)", HARDWARE,
                                          metavar="GBIT", within=v.NIC_GBIT)]

# ---- batch --------------------------------------------------------------------------------------

_SEQ = format_number(DEFAULT_SEQ_LEN, sequence=True)
SeqLen = Annotated[Optional[int], whole("--seq-len", f"sequence length, e.g. 8k = 8192 (default "
                                        f"{_SEQ} = {DEFAULT_SEQ_LEN})", BATCH, sequence=True)]
# check: DeepSpeed configs do not record it
SeqLenCheck = Annotated[Optional[int], whole("--seq-len", "sequence length, e.g. 8k = 8192 "
                                             "(DeepSpeed configs do not record it)", BATCH,
                                             sequence=True)]
# batch: optional
SeqLenBatch = Annotated[Optional[int], whole("--seq-len", "tokens per sample, e.g. 8k = 8192 "
                                             "(optional: adds the tokens per step)", BATCH,
                                             sequence=True)]
GlobalBatch = Annotated[Optional[int], whole("--global-batch", "sequences per optimizer step",
                                             BATCH)]
# batch: a target
GlobalBatchTarget = Annotated[Optional[int], whole("--global-batch", "target sequences per "
                                                   "optimizer step (solves --accum)", BATCH)]
_TPB = format_number(DEFAULT_TOKENS_PER_BATCH)
TokensPerBatch = Annotated[Optional[str], option("--tokens-per-batch", help=f"tokens per step, "
                                                 f"e.g. 4M or 16Mi (default {_TPB} = "
                                                 f"{DEFAULT_TOKENS_PER_BATCH:,})", panel=BATCH,
                                                 metavar="N")]
Framework = Annotated[Optional[str], option("--framework", help="megatron (default), torchtitan, "
                                            "deepspeed, fsdp, a profile's named variant "
                                            "(fsdp:litgpt-2024) or a framework profile .toml",
                                            panel=LAYOUT, metavar="NAME|PATH")]
# calibrate: a filter of published rows
FrameworkCalibrate = Annotated[Optional[str], option("--framework", help="keep the rows that ran "
                                                     "on this framework (megatron, torchtitan)",
                                                     panel=LAYOUT, metavar="NAME")]

# ---- training, checkpoints and failures ---------------------------------------------------------

TrainTokens = Annotated[Optional[str], option("--train-tokens", help="tokens to train, e.g. 15T "
                                              "(time and cost to train)", panel=TRAINING,
                                              metavar="N")]
GpuHourCost = Annotated[Optional[float], real("--gpu-hour-cost", "price of one GPU-hour, any "
                                              "currency (cost to train)", TRAINING,
                                              metavar="COST")]
GpuMtbfHours = Annotated[Optional[float], real("--gpu-mtbf-hours", "MTBF of one GPU, h (default "
                                               "50,677 h, Llama 3's interruption rate); the "
                                               "job's is this ÷ GPUs", TRAINING,
                                               within=v.MTBF_HOURS)]
JobMtbfHours = Annotated[Optional[float], real("--job-mtbf-hours", "the job's mean time between "
                                               "interruptions, h (replaces --gpu-mtbf-hours)",
                                               TRAINING, within=v.MTBF_HOURS)]
AsyncCheckpoint = Annotated[bool, switch("--async-checkpoint", "asynchronous checkpoints (the "
                                         "write overlaps training; only the copy to host memory "
                                         "stalls)", TRAINING)]

# ---- memory margins -----------------------------------------------------------------------------

ContextGb = Annotated[Optional[float], real("--context-gb", "CUDA/NCCL context, GB", MARGINS,
                                            within=v.RESERVE_GB)]
CommBufferGb = Annotated[Optional[float], real("--comm-buffer-gb", "communication buffers, GB",
                                               MARGINS, within=v.RESERVE_GB)]
Fragmentation = Annotated[Optional[float], real("--fragmentation", "allocator fragmentation share "
                                                f"(default {FRAGMENTATION_SHARE:g})", MARGINS)]
Margin = Annotated[Optional[float], real("--margin", f"safety margin share (default "
                                         f"{MARGIN_SHARE:g})", MARGINS)]

# ---- output and files ---------------------------------------------------------------------------

Fmt = Annotated[Format, option("--format", "-f", help="table, json or markdown", panel=OUTPUT)]
# check: GitHub workflow annotations too
FmtCheck = Annotated[GateFormat, option("--format", "-f", help="table, json, markdown or github "
                                        "(workflow annotations)", panel=OUTPUT)]
Gib = Annotated[bool, switch("--gib", "show GiB instead of GB", OUTPUT)]
Output = Annotated[str, option("--output", "-o", help="output file, or - for stdout",
                               panel=OUTPUT, metavar="PATH")]
# calibrate: writing is optional
OutputCalibrate = Annotated[Optional[str], option("--output", "-o", help="write the calibrated "
                                                  "profile TOML here (default: write nothing)",
                                                  panel=OUTPUT, metavar="PATH")]
Force = Annotated[bool, switch("--force", "overwrite an existing output file", OUTPUT)]
WarmupSteps = Annotated[int, whole("--warmup-steps", "drop logged steps up to this step as "
                                   "warm-up", lower=0)]
Plan = Annotated[str, option("--plan", help="the job: plan file or engine config",
                             metavar="PATH")]
# calibrate: optional
PlanCalibrate = Annotated[Optional[str], option("--plan", help="the job: plan file or engine "
                                                "config (fits compute speed from its step time; "
                                                "optional)", metavar="PATH")]

# ---- older spellings: accepted, listed nowhere --------------------------------------------------

OLD_SPELLINGS = {"--gpu-memory-gb": "--gpu-memory-gib", "--nic-gbit": "--nic-gbit-per-gpu",
                 "--price-per-gpu-hour": "--gpu-hour-cost", "--mtbf-hours": "--job-mtbf-hours",
                 "--async": "--async-checkpoint"}
GpuMemoryGb = older(GpuMemoryGib, "--gpu-memory-gb")
NicGbitOld = older(NicGbit, "--nic-gbit")
PricePerGpuHour = older(GpuHourCost, "--price-per-gpu-hour")
MtbfHours = older(JobMtbfHours, "--mtbf-hours")
Async = older(AsyncCheckpoint, "--async")


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
