"""Engine configs read into the gate's inputs: DeepSpeed JSON, Megatron-LM arguments, torchtitan TOML.

Each reader maps the engine's keys onto a Layout, batch and model, and applies the engine's own
assertions as rules whose ``key`` is the engine's spelling, so annotations point at the line.
Sources (ECOSYSTEM.md): DeepSpeed §1.1-1.4 (``deepspeed/runtime/config.py``
``_batch_assertion`` / ``_set_batch_related_parameters``, ``pipe/engine.py`` ZeRO check,
``precision_config.py``); Megatron-LM §2.1-2.2 (``megatron/training/arguments.py::validate_args``
at core_v0.15.0, ``num_microbatches_calculator.py``, ``transformer_config.py``); torchtitan §3
(v0.2.2 ``job_config.py``, ``parallel_dims.py::_validate``, ``train.py``, ``parallelize.py``).

What a file cannot say (GPU count, hardware, sometimes the model or sequence length) comes from
``CheckOptions`` (``--gpus``, ``--hardware``, ``--model``, ``--seq-len``, ``--tp``, ``--pp``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from .errors import InputError, validation_message
from .specs.hardware import load_hardware
from .specs.job import CheckOptions, Inputs
from .verdict import GateRule, make_rule
from .specs.hardware import HardwareProfile
from .specs.layout import Layout
from .specs.model import ModelSpec
from .plan import detect_format, parse_text, read_text

ENGINES = ("deepspeed", "megatron", "torchtitan")
DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu",
                  "gradient_accumulation_steps", "zero_optimization", "bf16", "bfloat16", "fp16",
                  "activation_checkpointing", "gradient_clipping", "steps_per_print"}
TORCHTITAN_TABLES = {"parallelism", "training", "activation_checkpoint", "job", "model",
                     "optimizer", "checkpoint", "compile", "metrics", "lr_scheduler"}
MEGATRON_HINTS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                  "--micro-batch-size", "--num-layers", "pretrain_gpt")
ARGS_SUFFIXES = {".sh", ".bash", ".args", ".txt", ".cmd", ""}


# ---- loading and detection ---------------------------------------------------------------------

def load_any(path: str, engine: str | None) -> tuple[str, str, Any]:
    """(text, format, parsed data); Megatron argument lists are kept as text (format "args")."""
    text = read_text(path, what="plan or engine config")
    suffix = Path(path).suffix.lower()
    if engine == "megatron" or (engine is None and suffix in ARGS_SUFFIXES
                                and any(h in text for h in MEGATRON_HINTS)):
        return text, "args", None
    if engine == "deepspeed" and suffix not in (".json",):
        fmt = "json"
    elif engine == "torchtitan" and suffix != ".toml":
        fmt = "toml"
    else:
        fmt = detect_format(path, text)
    return text, fmt, parse_text(text, fmt, path)


def detect(path: str, fmt: str, data: Any, text: str) -> str:
    if fmt == "args":
        return "megatron"
    if isinstance(data, dict):
        if fmt == "json" and DEEPSPEED_KEYS & set(data) and "gpus" not in data:
            return "deepspeed"
        if fmt == "toml" and {"parallelism", "training"} & set(data) and "gpus" not in data \
                and set(data) <= TORCHTITAN_TABLES | {"float8", "quantize", "experimental",
                                                       "profiling", "comm", "memory_estimation",
                                                       "fault_tolerance", "validation", "mx"}:
            return "torchtitan"
    return "plan"


def cli_model(text: str) -> ModelSpec:
    """``--model``: a preset name, or a path to a config.json (or its directory)."""
    from .hf_config import load_hf_config
    from .specs.presets import get_preset

    p = Path(text)
    if p.exists() or text.endswith(".json"):
        return load_hf_config(p)
    return get_preset(text)


def _need(value: Any, option: str, what: str) -> Any:
    if value is None:
        raise InputError(option, f"{what}; pass {option}")
    return value


def _hardware(opts: CheckOptions, notes: list[str]) -> HardwareProfile:
    if opts.hardware:
        return load_hardware(opts.hardware)
    notes.append("hardware not stated: assuming the h100 profile (pass --hardware)")
    return load_hardware("h100")


def read_engine(kind: str, where: str, text: str, data: Any, opts: CheckOptions) -> Inputs:
    if kind == "deepspeed":
        return read_deepspeed(where, data, opts)
    if kind == "megatron":
        return read_megatron(where, text, opts)
    if kind == "torchtitan":
        return read_torchtitan(where, data, opts)
    raise InputError("--engine", f"must be one of {', '.join(ENGINES)}, got {kind!r}")


# ---- typed access to a parsed mapping ----------------------------------------------------------

class _Obj:
    def __init__(self, where: str, data: Any, prefix: str = ""):
        if not isinstance(data, dict):
            raise InputError(where, f"{prefix.rstrip('.') or 'top level'}: must be a mapping, got "
                                    f"{type(data).__name__}")
        self.where, self.data, self.prefix = where, data, prefix

    def fail(self, key: str, msg: str) -> InputError:
        return InputError(f"{self.where}: {self.prefix}{key}", msg)

    def int(self, key: str, default: Any = None, *, auto: bool = False, low: int = 1) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if auto and v == "auto":
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, got {v!r}")
        if v < low:
            raise self.fail(key, f"must be >= {low}, got {v}")
        return v

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {v!r}")
        return v

    def str(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key, default)
        if v is not None and not isinstance(v, str):
            raise self.fail(key, f"must be a string, got {v!r}")
        return v

    def sub(self, key: str) -> "_Obj":
        v = self.data.get(key)
        return _Obj(self.where, {} if v is None else v, f"{self.prefix}{key}.")


# ---- DeepSpeed ----------------------------------------------------------------------------------

DS_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "fusedadam": "adam", "cpuadam": "adam",
                 "sgd": "sgd-momentum"}


def read_deepspeed(where: str, data: Any, opts: CheckOptions) -> Inputs:
    """DeepSpeed JSON (ECOSYSTEM.md §1). TP/PP come from --tp/--pp (Megatron-DeepSpeed passes
    them as flags); DP = world ÷ (TP·PP·Ulysses SP) as in ``DeepSpeedConfig.__init__`` (§1.4)."""
    o = _Obj(where, data)
    notes: list[str] = []
    rules: list[GateRule] = []
    gpus = _need(opts.gpus, "--gpus", "a DeepSpeed config does not state the GPU count")
    seq_len = _need(opts.seq_len, "--seq-len", "a DeepSpeed config does not state the sequence "
                                               "length")
    model = cli_model(_need(opts.model, "--model", "a DeepSpeed config does not describe the "
                                                   "model"))
    hw = _hardware(opts, notes)
    tp, pp = opts.tp or 1, opts.pp or 1
    ulysses = o.int("sequence_parallel_size", 1)
    model_par = tp * pp * ulysses
    if gpus % model_par:
        rules.append(make_rule("ds-world-divisible", False, f"{gpus} GPUs / (TP {tp} × PP {pp} × "
                               f"SP {ulysses})", "whole number", "the GPU count must divide into "
                               "data-parallel replicas of TP × PP (× Ulysses SP) GPUs"))
    dp = max(1, gpus // model_par)
    if ulysses > 1:
        notes.append(f"sequence_parallel_size {ulysses} (Ulysses) divides the data-parallel size; "
                     "its memory and traffic are not modelled separately")

    # Batch keys: any two suffice; DeepSpeed infers the third with floor division (§1.1).
    tbs = o.int("train_batch_size", auto=True)
    mbs = o.int("train_micro_batch_size_per_gpu", auto=True)
    gas = o.int("gradient_accumulation_steps", auto=True)
    if any(data.get(k) == "auto" for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                            "gradient_accumulation_steps")):
        notes.append('"auto" batch keys are filled by the HF Trainer; treated as not given')
    stated = [k for k, v in (("train_batch_size", tbs), ("train_micro_batch_size_per_gpu", mbs),
                             ("gradient_accumulation_steps", gas)) if v is not None]
    if tbs is None and mbs is None:
        raise InputError(f"{where}: train_batch_size", "DeepSpeed needs train_batch_size or "
                         "train_micro_batch_size_per_gpu (it asserts one of them is given)")
    if tbs is not None and mbs is not None and gas is None:
        gas = tbs // mbs // dp
    elif tbs is not None and gas is not None and mbs is None:
        mbs = tbs // dp // gas
    elif mbs is not None and gas is not None and tbs is None:
        tbs = mbs * gas * dp
    elif tbs is not None and mbs is None:
        gas, mbs = 1, tbs // dp
    elif mbs is not None and tbs is None:
        gas, tbs = 1, mbs * dp
    product = mbs * gas * dp
    ok = tbs == product and mbs >= 1 and gas >= 1
    message = ("train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × "
               "DP, DP = world ÷ (TP·PP); DeepSpeed asserts it (config.py _batch_assertion)")
    if not ok and model_par > 1 and tbs == mbs * gas * gpus:
        message = (f"train_batch_size counts all {gpus} GPUs; with TP·PP = {model_par} the "
                   f"data-parallel size is {dp}: {message}")
    rules.append(make_rule("ds-batch-consistency", ok,
                           f"{tbs} vs {mbs} × {gas} × DP {dp} = {product}"
                           f" (given: {', '.join(stated)})", f"= {product}", message,
                           key=stated[0] if len(stated) == 1 else "train_batch_size"))

    zo = o.sub("zero_optimization")
    stage = zo.int("stage", 0, low=0)
    if stage > 3:
        raise zo.fail("stage", f"must be 0, 1, 2 or 3, got {stage}")
    rules.append(make_rule("ds-pipeline-zero", not (pp > 1 and stage >= 2),
                           f"PP {pp}, ZeRO {stage}", "ZeRO ≤ 1 when PP > 1",
                           "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism "
                           "(deepspeed/runtime/pipe/engine.py)", key="zero_optimization.stage"
                           if "zero_optimization" in data else None))
    off_opt = _device(zo.sub("offload_optimizer"))
    off_par = _device(zo.sub("offload_param"))

    bf16 = o.sub("bf16").bool("enabled") or o.sub("bfloat16").bool("enabled")
    fp16 = o.sub("fp16").bool("enabled")
    rules.append(make_rule("ds-precision-exclusive", not (bf16 and fp16),
                           f"bf16 {'on' if bf16 else 'off'}, fp16 {'on' if fp16 else 'off'}",
                           "not both", "bfloat16 and fp16 modes cannot be simultaneously enabled",
                           key="fp16" if "fp16" in data else "bf16"))
    precision = "mixed" if (bf16 or fp16) else "fp32"
    opt_type = (o.sub("optimizer").str("type") or "adam").lower()
    optimizer = DS_OPTIMIZERS.get(opt_type, "adam")
    if opt_type not in DS_OPTIMIZERS:
        notes.append(f"optimizer {opt_type!r} counted as Adam (two fp32 moments)")
    recompute = "none"
    if "activation_checkpointing" in data:
        recompute = "full"
        notes.append("activation_checkpointing present: assuming full recompute of every layer "
                     "(the block configures deepspeed.checkpointing; the model code switches it on)")
    layout = Layout(tp=tp, pp=pp, dp=dp, zero=stage, micro_batch=max(1, mbs),
                    recompute=recompute, offload_optimizer=off_opt, offload_params=off_par,
                    precision=precision, optimizer=optimizer)
    keys = {"batch-divisible": "train_batch_size",
            "fits-in-memory": "train_micro_batch_size_per_gpu",
            "offload-valid": "offload_param" if off_par != "none" else "offload_optimizer",
            "sharding-valid": "zero_optimization.stage"}
    return Inputs(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq_len,
                  global_batch=max(1, tbs), keys=keys, rules=rules, notes=notes)


def _device(o: _Obj) -> str:
    dev = o.str("device", "none") or "none"
    if dev not in ("none", "cpu", "nvme"):
        raise o.fail("device", f"must be none, cpu or nvme, got {dev!r}")
    return dev


# ---- Megatron-LM ------------------------------------------------------------------------------------

MEG_INT = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
           "--context-parallel-size", "--expert-model-parallel-size",
           "--expert-tensor-parallel-size", "--num-layers-per-virtual-pipeline-stage",
           "--num-virtual-stages-per-pipeline-rank", "--micro-batch-size", "--global-batch-size",
           "--seq-length", "--max-position-embeddings", "--num-layers", "--hidden-size",
           "--ffn-hidden-size", "--num-attention-heads", "--kv-channels", "--num-query-groups",
           "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--vocab-size",
           "--padded-vocab-size", "--recompute-num-layers", "--nproc_per_node",
           "--nproc-per-node", "--nnodes", "--world-size",
           "--data-parallel-size", "--microbatch-group-size-per-virtual-pipeline-stage",
           "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}
MEG_STR = {"--recompute-granularity", "--recompute-method", "--normalization",
           "--position-embedding-type", "--optimizer", "--data-parallel-sharding-strategy"}
MEG_FLAG = {"--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp16",
            "--swiglu", "--group-query-attention", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights", "--recompute-activations",
            "--overlap-grad-reduce", "--overlap-param-gather", "--distribute-saved-activations",
            "--use-torch-fsdp2", "--use-megatron-fsdp", "--add-qkv-bias",
            "--overlap-p2p-communication"}
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _shell_lines(text: str) -> list[str]:
    """Logical lines: backslash continuations joined."""
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def parse_megatron_args(text: str, where: str) -> dict[str, Any]:
    """Flags → values from a launch script or args file. Simple ``NAME=value`` assignments in
    the script are substituted into ``$NAME`` / ``${NAME}`` / ``${NAME:-default}``; a value that
    stays a shell variable is an error naming the flag. Later flags win, as with argparse."""
    env: dict[str, str] = {}
    tokens: list[str] = []
    for line in _shell_lines(text):
        try:
            toks = shlex.split(line, comments=True)
        except ValueError as e:
            raise InputError(where, f"cannot split shell line ({e}): {line.strip()[:60]}") from None
        toks = [_subst(t, env) for t in toks]
        head = toks[1:] if toks[:1] == ["export"] else toks
        if len(head) == 1 and _ASSIGN.match(head[0]) and not head[0].startswith("-"):
            name, value = _ASSIGN.match(head[0]).groups()
            env[name] = value
            continue
        tokens.extend(toks)
    args: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("--"):
            continue
        name, eq, inline = tok.partition("=")
        if name in MEG_FLAG:
            args[name] = True
        elif name in MEG_INT or name in MEG_STR:
            if eq:
                value = inline
            elif i < len(tokens):
                value, i = tokens[i], i + 1
            else:
                raise InputError(f"{where}: {name}", "missing value")
            if "$" in value:
                raise InputError(f"{where}: {name}", f"value {value!r} is a shell variable "
                                 "dtplan cannot resolve; set it in the file (NAME=value)")
            if name in MEG_INT:
                try:
                    args[name] = int(value)
                except ValueError:
                    raise InputError(f"{where}: {name}", f"must be an integer, got "
                                                         f"{value!r}") from None
                if args[name] < (0 if name == "--recompute-num-layers" else 1):
                    raise InputError(f"{where}: {name}", f"must be >= 1, got {args[name]}")
            else:
                args[name] = value
    return args


def _subst(token: str, env: dict[str, str]) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)
    return _VAR.sub(repl, token)


def _megatron_model(a: dict[str, Any], where: str) -> dict[str, Any] | None:
    """ModelSpec fields from the model-shape flags (ECOSYSTEM.md §2.1), or None if absent."""
    if "--num-layers" not in a or "--hidden-size" not in a or "--num-attention-heads" not in a:
        return None
    h, heads = a["--hidden-size"], a["--num-attention-heads"]
    swiglu = bool(a.get("--swiglu"))
    ffn = a.get("--ffn-hidden-size")
    if ffn is None:  # Megatron's defaults (arguments.py core_v0.15.0 L835)
        ffn = int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h
    kv = a.get("--num-query-groups", 1) if a.get("--group-query-attention") else heads
    vocab = a.get("--vocab-size") or a.get("--padded-vocab-size")
    pos = {"rope": "rope", "mrope": "rope", "yarn": "rope", "learned_absolute": "learned",
           "none": "none", "relative": "none"}.get(a.get("--position-embedding-type",
                                                         "learned_absolute"), "rope")
    fields = dict(name="megatron-args", layers=a["--num-layers"], hidden=h, heads=heads,
                  kv_heads=kv, ffn=ffn, mlp="swiglu" if swiglu else "gelu", vocab=vocab,
                  tied_embeddings=not a.get("--untie-embeddings-and-output-weights"),
                  position=pos, max_positions=a.get("--max-position-embeddings"),
                  qkv_bias=bool(a.get("--add-qkv-bias")) or not a.get("--disable-bias-linear"),
                  linear_bias=not a.get("--disable-bias-linear"),
                  norm="rmsnorm" if a.get("--normalization") == "RMSNorm" else "layernorm",
                  source=f"Megatron-LM model flags in {where}")
    if "--kv-channels" in a:
        fields["head_dim"] = a["--kv-channels"]
    if a.get("--num-experts"):
        fields.update(experts=a["--num-experts"], experts_per_token=a.get("--moe-router-topk", 2),
                      expert_ffn=a.get("--moe-ffn-hidden-size"))
    return fields


def read_megatron(where: str, text: str, opts: CheckOptions) -> Inputs:
    """A Megatron-LM launch script or args file, checked with validate_args' assertions (§2.2)."""
    a = parse_megatron_args(text, where)
    notes: list[str] = []
    rules: list[GateRule] = []
    tp = a.get("--tensor-model-parallel-size", 1)
    pp = a.get("--pipeline-model-parallel-size", 1)
    cp = a.get("--context-parallel-size", 1)
    ep = a.get("--expert-model-parallel-size", 1)
    gpus = opts.gpus
    if gpus is None:
        per_node = a.get("--nproc_per_node") or a.get("--nproc-per-node")
        if per_node:
            gpus = per_node * a.get("--nnodes", 1)
            notes.append(f"GPU count from torchrun: {per_node} per node × {a.get('--nnodes', 1)} "
                         f"nodes = {gpus}")
        elif a.get("--world-size"):
            gpus = a["--world-size"]
    gpus = _need(gpus, "--gpus", "the arguments do not state the GPU count (no torchrun "
                                 "--nproc_per_node/--nnodes)")
    hw = _hardware(opts, notes)

    # model: --model wins; otherwise the shape flags
    shape = _megatron_model(a, where)
    if opts.model:
        model = cli_model(opts.model)
        if shape:
            for flag, field_ in (("--num-layers", "layers"), ("--hidden-size", "hidden"),
                                 ("--num-attention-heads", "heads")):
                rules.append(make_rule(f"megatron-model-{field_}", a[flag] == getattr(model, field_),
                                       f"{flag} {a[flag]}", f"= {getattr(model, field_)} "
                                       f"({model.name})", f"the arguments' {field_} must match "
                                       "--model", key=flag))
    elif shape:
        if shape["vocab"] is None:
            raise InputError("--model", "the arguments give no --vocab-size (Megatron takes it "
                                        "from the tokenizer); pass --model or add --vocab-size")
        try:
            model = ModelSpec.model_validate(shape)
        except Exception as e:
            raise InputError(f"{where}: model flags", validation_message(e)) from None
    else:
        raise InputError("--model", "the arguments do not give the model shape (--num-layers, "
                                    "--hidden-size, --num-attention-heads); pass --model")
    seq = a.get("--seq-length") or opts.seq_len
    seq = _need(seq, "--seq-len", "the arguments give no --seq-length")
    mbs = a.get("--micro-batch-size")
    if mbs is None:
        raise InputError(f"{where}: --micro-batch-size", "missing; Megatron-LM requires it")

    world_ok = gpus % (tp * pp * cp) == 0
    rules.append(make_rule("megatron-world-divisible", world_ok,
                           f"{gpus} % (TP {tp} × PP {pp} × CP {cp})", "= 0",
                           "world size is not divisible by total_model_size = TP·PP·CP "
                           "(validate_args)", key="--tensor-model-parallel-size"))
    dp = max(1, gpus // (tp * pp * cp))
    gbs = a.get("--global-batch-size", mbs * dp)
    if "--global-batch-size" not in a:
        notes.append(f"--global-batch-size not given: Megatron uses micro × DP = {gbs}")
    layers = model.layers

    # virtual pipeline (interleaved schedule)
    lpv = a.get("--num-layers-per-virtual-pipeline-stage")
    vsr = a.get("--num-virtual-stages-per-pipeline-rank")
    chunks = 1
    if lpv is not None and vsr is not None:
        raise InputError(f"{where}: --num-virtual-stages-per-pipeline-rank",
                         "give at most one of it and --num-layers-per-virtual-pipeline-stage")
    if lpv is not None:
        per_rank = layers // pp if layers % pp == 0 else None
        ok = per_rank is not None and per_rank % lpv == 0
        rules.append(make_rule("megatron-vpp-layers", ok,
                               f"({layers} layers / PP {pp}) / {lpv} layers per virtual stage",
                               "whole numbers", "number of layers per pipeline rank must be "
                               "divisible by --num-layers-per-virtual-pipeline-stage",
                               key="--num-layers-per-virtual-pipeline-stage"))
        chunks = max(1, (per_rank or lpv) // lpv)
    elif vsr is not None:
        chunks = vsr
    interleaved = chunks > 1
    if interleaved:
        overlap = bool(a.get("--overlap-p2p-communication"))
        need = 1 if overlap else 2
        rules.append(make_rule("megatron-vpp-needs-pp", pp > need, f"PP {pp}", f"> {need}",
                               "the interleaved schedule needs pipeline-model-parallel size > 2 "
                               "(> 1 with p2p overlap)", key="--pipeline-model-parallel-size"))
    elif lpv is None and ("--decoder-first-pipeline-num-layers" in a
                          or "--decoder-last-pipeline-num-layers" in a):
        # Uneven stages: the first/last stage take the given layers, the rest split evenly.
        first = a.get("--decoder-first-pipeline-num-layers")
        last = a.get("--decoder-last-pipeline-num-layers")
        rest = layers - (first or 0) - (last or 0)
        stages = pp - (first is not None) - (last is not None)
        rules.append(make_rule("megatron-layers-divisible", stages > 0 and rest > 0
                               and rest % stages == 0,
                               f"({layers} − first {first or 0} − last {last or 0}) layers over "
                               f"{stages} middle stages", "whole number",
                               "the layers left after the first and last stages must divide "
                               "evenly across the other stages",
                               key="--decoder-first-pipeline-num-layers"))
    elif lpv is None:
        rules.append(make_rule("megatron-layers-divisible", layers % pp == 0,
                               f"{layers} layers % PP {pp}", "= 0", "Number of layers should be "
                               "divisible by the pipeline-model-parallel size",
                               key="--pipeline-model-parallel-size"))
    rules.append(make_rule("megatron-global-batch", gbs % (mbs * dp) == 0 and gbs >= mbs * dp,
                           f"{gbs} % ({mbs} × DP {dp})", "= 0", "global batch size is not "
                           "divisible by micro batch size times data parallel size "
                           "(num_microbatches_calculator)", key="--global-batch-size"
                           if "--global-batch-size" in a else "--micro-batch-size"))
    if interleaved and gbs % (mbs * dp) == 0:
        m = gbs // (mbs * dp)
        rules.append(make_rule("megatron-vpp-microbatches", m % pp == 0 and m >= pp,
                               f"{m} micro-batches, PP {pp}", "multiple of PP and ≥ PP",
                               "with the default microbatch group size, the interleaved "
                               "schedule needs micro-batches a multiple of PP (schedules.py)",
                               key="--global-batch-size"))
    rules.append(make_rule("megatron-heads-tp", model.heads % tp == 0,
                           f"{model.heads} heads % TP {tp}", "= 0",
                           "num_attention_heads must be a multiple of tensor_model_parallel_size",
                           key="--tensor-model-parallel-size"))
    kv = model.kv_heads
    kv_ok = kv % tp == 0
    rules.append(make_rule("megatron-query-groups-tp", kv_ok or tp % kv == 0,
                           f"{kv} query groups, TP {tp}", "multiple of TP (core_v0.15); "
                           "a divisor is accepted only after 2025-12", "num_query_groups must be "
                           "a multiple of tensor_model_parallel_size",
                           key="--num-query-groups" if "--num-query-groups" in a
                           else "--tensor-model-parallel-size", warn=tp % kv == 0))
    if "--kv-channels" not in a and "--hidden-size" in a:
        rules.append(make_rule("megatron-hidden-heads", a["--hidden-size"] % a.get(
            "--num-attention-heads", 1) == 0, f"{a['--hidden-size']} % {a.get('--num-attention-heads')}",
            "= 0", "hidden_size must be divisible by num_attention_heads without --kv-channels",
            key="--hidden-size"))
    if cp > 1:
        rules.append(make_rule("megatron-cp-seq", seq % (2 * cp) == 0, f"seq {seq} % (2 × CP {cp})",
                               "= 0", "seq-length should be a multiple of 2 * "
                               "context-parallel-size", key="--context-parallel-size"))
    sp = bool(a.get("--sequence-parallel"))
    if sp:
        rules.append(make_rule("megatron-sp-needs-tp", tp > 1, f"TP {tp}", "> 1",
                               "--sequence-parallel with TP = 1 is silently switched off",
                               key="--sequence-parallel", warn=True))
    max_pos = a.get("--max-position-embeddings")
    if max_pos is not None:
        rules.append(make_rule("megatron-positions", max_pos >= seq,
                               f"max_position_embeddings {max_pos}", f"≥ seq {seq}",
                               "max_position_embeddings must be >= seq_length",
                               key="--max-position-embeddings"))
    if ep > 1:
        rules.append(make_rule("megatron-experts-ep", model.experts > 0 and model.experts % ep == 0,
                               f"{model.experts} experts, EP {ep}", "multiple of EP",
                               "Number of experts should be a multiple of expert model parallel "
                               "size", key="--expert-model-parallel-size"))

    gran = a.get("--recompute-granularity") or ("selective" if a.get("--recompute-activations")
                                                else None)
    method = a.get("--recompute-method")
    rec_layers = None
    if gran not in (None, "full", "selective"):
        raise InputError(f"{where}: --recompute-granularity", f"must be full or selective, got "
                                                               f"{gran!r}")
    if gran == "selective":
        rules.append(make_rule("megatron-recompute", method is None, f"method {method}",
                               "none with selective", "recompute method is not yet supported "
                               "for selective recomputing granularity", key="--recompute-method"))
    elif gran == "full":
        n = a.get("--recompute-num-layers")
        per_rank = max(1, layers // (pp * chunks))
        ok = method in ("block", "uniform") and n is not None and 1 <= n <= per_rank
        rules.append(make_rule("megatron-recompute", ok, f"method {method}, num_layers {n}",
                               f"block|uniform and 1..{per_rank}", "full recompute needs "
                               "--recompute-method block|uniform and --recompute-num-layers "
                               "between 1 and the layers per pipeline rank",
                               key="--recompute-granularity"))
        if method == "block" and n is not None:
            rec_layers = min(n, per_rank)
    if a.get("--distribute-saved-activations"):
        rules.append(make_rule("megatron-distribute-saved", tp > 1 and gran == "full" and not sp,
                               f"TP {tp}, granularity {gran}, SP {sp}", "TP > 1, full, no SP",
                               "--distribute-saved-activations needs TP > 1 and full recompute "
                               "and is incompatible with sequence parallel",
                               key="--distribute-saved-activations"))
    if a.get("--overlap-param-gather"):
        ok = bool(a.get("--use-distributed-optimizer") or a.get("--use-megatron-fsdp")) \
            and bool(a.get("--overlap-grad-reduce"))
        rules.append(make_rule("megatron-overlap-param-gather", ok, "--overlap-param-gather",
                               "needs the distributed optimizer and --overlap-grad-reduce",
                               "--overlap-param-gather requires --use-distributed-optimizer (or "
                               "Megatron-FSDP) and --overlap-grad-reduce",
                               key="--overlap-param-gather"))
    bf16, fp16 = bool(a.get("--bf16")), bool(a.get("--fp16"))
    rules.append(make_rule("megatron-precision-exclusive", not (bf16 and fp16),
                           f"--bf16 {bf16}, --fp16 {fp16}", "not both",
                           "--bf16 and --fp16 are mutually exclusive",
                           key="--fp16" if fp16 else "--bf16"))
    if a.get("--use-torch-fsdp2"):
        rules.append(make_rule("megatron-fsdp2", pp == 1 and ep == 1
                               and not a.get("--use-distributed-optimizer")
                               and bool(a.get("--untie-embeddings-and-output-weights"))
                               and not fp16, f"PP {pp}, EP {ep}", "PP 1, EP 1, untied, no "
                               "distributed optimizer, no fp16", "--use-torch-fsdp2 restrictions "
                               "(validate_args)", key="--use-torch-fsdp2"))

    zero = 1 if a.get("--use-distributed-optimizer") else 0
    strategy = a.get("--data-parallel-sharding-strategy")
    if (a.get("--use-megatron-fsdp") or a.get("--use-torch-fsdp2")):
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2,
                "optim_grads_params": 3}.get(strategy or "optim_grads_params", 3)
    # Megatron keeps fp32 main gradients by default (DESIGN.md: 18 bytes/param with Adam).
    precision = "mixed-fp32-grads" if (bf16 or fp16) else "fp32"
    optimizer = {"adam": "adam", "sgd": "sgd-momentum"}.get(a.get("--optimizer", "adam"), "adam")
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, micro_batch=mbs,
                    schedule="interleaved" if interleaved else "1f1b", chunks=chunks, sp=sp,
                    recompute=gran or "none", recompute_layers=rec_layers,
                    precision=precision, optimizer=optimizer)
    keys = {"world-size": "--tensor-model-parallel-size",
            "tp-in-nvlink-domain": "--tensor-model-parallel-size",
            "heads-divisible-by-tp": "--tensor-model-parallel-size",
            "kv-heads-compatible-with-tp": "--tensor-model-parallel-size",
            "layers-divisible-by-pp": "--pipeline-model-parallel-size",
            "interleaving-valid": "--num-layers-per-virtual-pipeline-stage",
            "batch-divisible": "--global-batch-size", "sequence-divisible": "--seq-length",
            "experts-divisible-by-ep": "--expert-model-parallel-size",
            "sharding-valid": "--use-distributed-optimizer",
            "fits-in-memory": "--micro-batch-size"}
    return Inputs(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq,
                  global_batch=gbs, keys=keys, rules=rules, notes=notes)


# ---- torchtitan ----------------------------------------------------------------------------------

# torchtitan's llama3 flavors are the Llama 3.1 shapes (torchtitan/models/llama3/__init__.py).
TITAN_FLAVORS = {("llama3", "8b"): "llama3.1-8b", ("llama3", "70b"): "llama3.1-70b",
                 ("llama3", "405b"): "llama3.1-405b"}
TITAN_SINGLE = {"1f1b": "1f1b", "gpipe": "gpipe"}
TITAN_MULTI = {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble",
               "dualpipev", "pipelineschedulemulti"}
TITAN_AC = {"none": "none", "selective": "selective", "full": "full", "memory_budget": "selective"}


def read_torchtitan(where: str, data: Any, opts: CheckOptions) -> Inputs:
    """A torchtitan v0.2.x job TOML, with parallel_dims / train.py / parallelize rules (§3.1)."""
    o = _Obj(where, data)
    notes: list[str] = []
    rules: list[GateRule] = []
    par, tr, ac, mo = o.sub("parallelism"), o.sub("training"), o.sub("activation_checkpoint"), \
        o.sub("model")
    gpus = _need(opts.gpus, "--gpus", "a torchtitan config does not state the GPU count "
                                      "(WORLD_SIZE)")
    hw = _hardware(opts, notes)
    if opts.model:
        model = cli_model(opts.model)
    else:
        name, flavor = (mo.str("name") or "").lower(), (mo.str("flavor") or "").lower()
        preset = TITAN_FLAVORS.get((name, flavor))
        if preset is None:
            raise InputError("--model", f"model {name or '?'} flavor {flavor or '?'} is not a "
                                        "known shape; pass --model")
        from .specs.presets import get_preset
        model = get_preset(preset)
        notes.append(f"[model] {name} {flavor} read as the {preset} preset")
    rep = par.int("data_parallel_replicate_degree", 1)
    shard = par.int("data_parallel_shard_degree", -1, low=-1)
    if shard == 0 or shard < -1:
        raise par.fail("data_parallel_shard_degree", f"must be -1 or >= 1, got {shard}")
    tp = par.int("tensor_parallel_degree", 1)
    pp = par.int("pipeline_parallel_degree", 1)
    cp = par.int("context_parallel_degree", 1)
    ep = par.int("expert_parallel_degree", 1)
    etp = par.int("expert_tensor_parallel_degree", 1)
    if shard == -1:
        shard = max(1, gpus // (rep * cp * tp * pp))
        notes.append(f"data_parallel_shard_degree = -1 → WORLD ÷ (replicate·cp·tp·pp) = {shard}")
    world = rep * shard * cp * tp * pp
    rules.append(make_rule("torchtitan-world-size", world == gpus,
                           f"{rep} × {shard} × {cp} × {tp} × {pp} = {world}", f"= {gpus}",
                           "Invalid parallel dims: dp_replicate * dp_shard * cp * tp * pp != "
                           "WORLD_SIZE", key="parallelism.data_parallel_shard_degree"))
    if ep > 1:
        rules.append(make_rule("torchtitan-etp", etp in (tp, 1), f"ETP {etp}, TP {tp}",
                               "ETP = TP or 1", "Currently we only support ETP=TP or ETP=1",
                               key="parallelism.expert_tensor_parallel_degree"))
    if rep > 1 and shard == 1:
        rules.append(make_rule("torchtitan-ddp-1d", tp == pp == cp == 1,
                               f"DDP with TP {tp}, PP {pp}, CP {cp}", "no other parallelism",
                               "DDP has not supported > 1D parallelism",
                               key="parallelism.data_parallel_replicate_degree"))
    local = tr.int("local_batch_size") or tr.int("batch_size", 8)
    if "local_batch_size" not in tr.data and "batch_size" not in tr.data:
        notes.append("training.local_batch_size not given: torchtitan's default 8")
    dp = rep * shard
    gbs = tr.int("global_batch_size", -1, low=-1)
    if gbs == -1:
        gbs = local * dp
    elif gbs < 1:
        raise tr.fail("global_batch_size", f"must be -1 or >= 1, got {gbs}")
    rules.append(make_rule("torchtitan-global-batch", gbs % (local * dp) == 0,
                           f"{gbs} % (local {local} × dp {dp})", "= 0",
                           "global_batch_size % (local_batch_size * dp_replicate * dp_shard) "
                           "must be 0 (train.py)", key="training.global_batch_size"
                           if "global_batch_size" in tr.data else "training.local_batch_size"))
    seq = tr.int("seq_len", 2048)
    if opts.seq_len and opts.seq_len != seq:
        raise InputError("--seq-len", f"{opts.seq_len} conflicts with training.seq_len = {seq}")
    # parallelize.py asserts it for every job (the divisor is 2 when tp = cp = 1)
    rules.append(make_rule("torchtitan-seq-divisor", seq % (tp * 2 * cp) == 0,
                           f"seq_len {seq} % (TP {tp} × 2 × CP {cp})", "= 0",
                           "seq_len must divide by tp·2·cp (ParallelDims.seq_len_divisor)",
                           key="training.seq_len"))
    schedule_name = par.str("pipeline_parallel_schedule", "1F1B")
    sched_key = schedule_name.lower()
    pp_mb = par.int("pipeline_parallel_microbatch_size", 1)
    chunks, schedule = 1, "1f1b"
    if pp > 1:
        if sched_key in TITAN_SINGLE:
            schedule = TITAN_SINGLE[sched_key]
        elif sched_key in TITAN_MULTI:
            schedule = "interleaved"
            lps = par.int("pipeline_parallel_layers_per_stage")
            if lps:
                first = par.int("pipeline_parallel_first_stage_less_layers", 1, low=0)
                last = par.int("pipeline_parallel_last_stage_less_layers", 1, low=0)
                stages = -(-(model.layers + first + last) // lps)
                rules.append(make_rule("torchtitan-pp-stages", stages % pp == 0 and stages >= 2 * pp,
                                       f"{stages} virtual stages, PP {pp}",
                                       "multiple of PP, ≥ 2 per rank",
                                       "multi-stage schedules need ≥ 2 stages per rank and the "
                                       "stage count divisible by PP",
                                       key="parallelism.pipeline_parallel_layers_per_stage"))
                chunks = max(2, stages // pp)
            else:
                chunks = 2
                notes.append(f"{schedule_name}: assuming 2 stages per rank (set "
                             "pipeline_parallel_layers_per_stage to say otherwise)")
        else:
            raise par.fail("pipeline_parallel_schedule", f"Unknown schedule name "
                           f"{schedule_name!r}; known: 1F1B, GPipe, Interleaved1F1B, LoopedBFS, "
                           "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV")
        rules.append(make_rule("torchtitan-pp-microbatch", local % pp_mb == 0,
                               f"local_batch_size {local} % microbatch {pp_mb}", "= 0",
                               "Batch size must be divisible by microbatch_size",
                               key="parallelism.pipeline_parallel_microbatch_size"))
        n_mb = local // pp_mb
        rules.append(make_rule("torchtitan-pp-enough-microbatches", n_mb >= pp * chunks,
                               f"{n_mb} micro-batches", f"≥ PP × stages/rank = {pp * chunks}",
                               "fewer micro-batches than pipeline stages leaves stages idle "
                               "(torchtitan logs a warning)", key="training.local_batch_size",
                               warn=True))
        micro = pp_mb
    else:
        micro = local
    mode = ac.str("mode", "selective")
    if mode not in TITAN_AC:
        raise ac.fail("mode", f"must be selective, full, memory_budget or none, got {mode!r}")
    if mode == "memory_budget":
        notes.append("activation_checkpoint.mode memory_budget counted as selective recompute")
    reshard = par.str("fsdp_reshard_after_forward", "default")
    if shard > 1:
        after_fwd = {"always": True, "never": False}.get(reshard, pp == 1)
        zero = 3 if after_fwd else 2
    else:
        zero = 0
    mp = tr.str("mixed_precision_param", "bfloat16")
    precision = "fp32" if mp == "float32" else "mixed"
    offload = "cpu" if tr.bool("enable_cpu_offload") else "none"
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero,
                    shard_group=shard if (rep > 1 and shard > 1) else None, micro_batch=micro,
                    schedule=schedule, chunks=chunks, sp=tp > 1, recompute=TITAN_AC[mode],
                    offload_optimizer=offload if zero else "none",
                    offload_params=offload if zero >= 3 else "none", precision=precision,
                    optimizer="adamw")
    keys = {"world-size": "parallelism.data_parallel_shard_degree",
            "tp-in-nvlink-domain": "parallelism.tensor_parallel_degree",
            "heads-divisible-by-tp": "parallelism.tensor_parallel_degree",
            "kv-heads-compatible-with-tp": "parallelism.tensor_parallel_degree",
            "layers-divisible-by-pp": "parallelism.pipeline_parallel_degree",
            "interleaving-valid": "parallelism.pipeline_parallel_schedule",
            "batch-divisible": "training.global_batch_size", "sequence-divisible": "training.seq_len",
            "experts-divisible-by-ep": "parallelism.expert_parallel_degree",
            "sharding-valid": "parallelism.data_parallel_shard_degree",
            "fits-in-memory": "training.local_batch_size"}
    return Inputs(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq,
                  global_batch=gbs, keys=keys, rules=rules, notes=notes)


__all__ = ["ENGINES", "load_any", "detect", "read_engine", "parse_megatron_args"]
