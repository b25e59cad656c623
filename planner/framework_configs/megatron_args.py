"""Megatron-LM's argument list read from a launch script or args file: flags to values (shell
assignments substituted) and the model-shape flags to ModelSpec fields (ECOSYSTEM.md §2.1).
Kept beside ``megatron.py`` so that module (reader and writer) stays under the size limit.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from planner.engine.stages import stage_deficit
from planner.errors import InputError
from planner.io.bounds import bounded_int
from planner.specs.job import CheckOptions
from planner.specs.knobs import Layout
from planner.io.validate import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN
from planner.specs.verdict import make_rule


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
           "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
           "--num-distributed-optimizer-instances", "--mtp-num-layers",
           "--moe-router-num-groups", "--moe-router-group-topk"}
# Upper bounds of the integer flags, as on dtplan's command line (planner.io.validate).
MEG_UPPER = {"--global-batch-size": MAX_GLOBAL_BATCH, "--seq-length": MAX_SEQ_LEN,
             "--max-position-embeddings": MAX_SEQ_LEN}
MEG_STR = {"--recompute-granularity", "--recompute-method", "--normalization",
           "--position-embedding-type", "--optimizer", "--data-parallel-sharding-strategy",
           "--ckpt-format", "--fp8-format", "--fp8-recipe", "--pipeline-model-parallel-layout",
           "--moe-token-dispatcher-type", "--moe-expert-capacity-factor"}
MEG_FLAG = {"--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp16",
            "--swiglu", "--group-query-attention", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights", "--recompute-activations",
            "--overlap-grad-reduce", "--overlap-param-gather", "--distribute-saved-activations",
            "--use-torch-fsdp2", "--use-megatron-fsdp", "--add-qkv-bias",
            "--overlap-p2p-communication", "--no-overlap-p2p-communication",
            "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
            "--overlap-moe-expert-parallel-comm", "--tp-comm-overlap", "--moe-enable-deepep",
            "--moe-pad-expert-input-to-capacity"}
# The embedding and the loss counted as a layer each in the pipeline split (arguments.py:557-579)
ACCOUNT_FLAGS = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
# Flags older dtplan exports wrote that Megatron-LM's argparse rejects (core_v0.15.3 and main
# have only --no-overlap-p2p-communication: overlap is on by default, arguments.py:2591-2596).
MEG_NONEXISTENT = {"--overlap-p2p-communication": "overlap is the default; the only flag is "
                                                  "--no-overlap-p2p-communication"}
LAUNCHERS = {"torchrun", "python", "python3", "srun", "mpirun", "deepspeed"}
# The environment variable validate_args reads (arguments.py:699-719, 936-962).
CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
# What the writer targets (and the reader's rules state): Megatron-LM core_v0.15.3's
# megatron/training/arguments.py, with megatron-core 0.15.3.
MEGATRON_TARGET = "Megatron-LM core_v0.15.3 (megatron-core 0.15.3)"
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _shell_lines(text: str) -> list[str]:
    """Logical lines: backslash continuations joined."""
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def parse_megatron_args(text: str, where: str,
                        notes: list[str] | None = None) -> dict[str, Any]:
    """Flags → values from a launch script or args file. Simple ``NAME=value`` assignments in
    the script are substituted into ``$NAME`` / ``${NAME}`` / ``${NAME:-default}``; a value that
    stays a shell variable is an error naming the flag. Later flags win, as with argparse
    (Megatron's parse_args: a store action overwrites; launch scripts override by appending,
    ``$BASE --seq-length 8192``); a flag given again with another value adds one note to
    `notes` naming it, its values and the one Megatron uses."""
    env: dict[str, str] = {}
    tokens: list[str] = []
    for line in _shell_lines(text):
        try:
            toks = shlex.split(line, comments=True)
        except ValueError as e:
            raise InputError(where, f"cannot split shell line ({e}): {line.strip()[:60]}") from None
        toks = [_subst(t, env) for t in toks]
        head = toks[1:] if toks[:1] == ["export"] else toks
        assign = _ASSIGN.match(head[0]) if len(head) == 1 else None
        if assign and not head[0].startswith("-"):
            name, value = assign.groups()
            env[name] = value
            continue
        if toks[:1] == ["unset"]:
            for name in toks[1:]:
                env.pop(name, None)
            continue
        tokens.extend(toks)
    # the script's variables (CONNECTIONS among them), and whether it launches the training at
    # all: an args file states no environment, so the environment rules do not apply to it
    args: dict[str, Any] = {"env": dict(env), "launcher": any(
        t.endswith(".py") or t in LAUNCHERS for t in tokens)}
    given: dict[str, list[str]] = {}   # every value of each valued flag, in order
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
                args[name] = bounded_int(value, f"{where}: {name}",
                                         upper=MEG_UPPER.get(name, MAX_GPUS))
                if args[name] < (0 if name == "--recompute-num-layers" else 1):
                    raise InputError(f"{where}: {name}", f"must be >= 1, got {args[name]}")
            else:
                args[name] = value
            given.setdefault(name, []).append(value)
    if notes is not None:
        notes += [_repeated(name, values) for name, values in given.items()
                  if len(set(values)) > 1]
    return args


def _repeated(name: str, values: list[str]) -> str:
    times = "twice" if len(values) == 2 else f"{len(values)} times"
    return (f"{name} given {times} ({', then '.join(values)}): Megatron's argparse keeps the "
            f"last, {values[-1]}")


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
    if a.get("--mtp-num-layers"):   # arguments.py:1666 (core_v0.15.3)
        fields["mtp_layers"] = a["--mtp-num-layers"]
    if a.get("--num-experts"):
        fields.update(experts=a["--num-experts"], experts_per_token=a.get("--moe-router-topk", 2),
                      expert_ffn=a.get("--moe-ffn-hidden-size"))
        if a.get("--moe-router-group-topk"):   # group-limited routing, arguments.py:3098-3101
            fields.update(route_groups=a.get("--moe-router-num-groups", 0),
                          route_group_topk=a["--moe-router-group-topk"])
    return fields


# check's options → the arguments they replace (recompute: Megatron's own spellings).
_RECOMPUTE_ARGS: dict[str, dict[str, Any]] = {"none": {}, "selective": {"--recompute-granularity": "selective"},
                   "full": {"--recompute-granularity": "full", "--recompute-method": "uniform",
                            "--recompute-num-layers": 1}}
_RECOMPUTE_KEYS = ("--recompute-granularity", "--recompute-method", "--recompute-num-layers",
                   "--recompute-activations")


def _overrides(a: dict, opts: CheckOptions) -> list[str]:
    """Replace the arguments check's flags state (the flag wins); a note for each."""
    notes = []
    for flag, arg, value in (("--micro-batch", "--micro-batch-size", opts.micro_batch),
                             ("--global-batch", "--global-batch-size", opts.global_batch)):
        if value is not None:
            if a.get(arg) not in (None, value):
                notes.append(f"{flag} {value} overrides {arg} {a[arg]} (the flag wins)")
            a[arg] = value
    if opts.recompute is not None:
        was = a.get("--recompute-granularity") or ("selective" if a.get("--recompute-activations")
                                                   else "none")
        if was != opts.recompute:
            notes.append(f"--recompute {opts.recompute} overrides the arguments' {was} "
                         "recompute (the flag wins)")
        for k in _RECOMPUTE_KEYS:
            a.pop(k, None)
        a.update(_RECOMPUTE_ARGS[opts.recompute])
    if opts.precision is not None:
        was = "mixed" if (a.get("--bf16") or a.get("--fp16")) else "fp32"
        if opts.precision != was and not (was == "mixed" and opts.precision == "mixed-fp32-grads"):
            notes.append(f"--precision {opts.precision} overrides the arguments' {was} "
                         "(the flag wins)")
    return notes


def _shard_group(a: dict, dpcp: int, rules: list) -> int | None:
    """Hybrid sharding: core/parallel_state.py shards over DP·CP / N ranks for
    --num-distributed-optimizer-instances N, which must divide DP·CP (Megatron-FSDP's HSDP too)."""
    n = a.get("--num-distributed-optimizer-instances", 1)
    if n > 1:
        rules.append(make_rule("megatron-distopt-instances", dpcp % n == 0, f"DP·CP {dpcp}, N {n}",
                               "divides DP·CP", "--num-distributed-optimizer-instances must "
                               "divide DP × CP", key="--num-distributed-optimizer-instances"))
    return dpcp // n if n > 1 and dpcp % n == 0 else None


def launch_rules(a: dict[str, Any], tp: int, cp: int, blackwell: bool, rules: list) -> None:
    """validate_args' checks of the launch environment and Megatron-FSDP (core_v0.15.3
    arguments.py): Megatron-FSDP and Torch-FSDP2 assert CUDA_DEVICE_MAX_CONNECTIONS != "1"
    (:699-719, :636-651); Megatron-FSDP needs --ckpt-format fsdp_dtensor (:711); without FSDP,
    TP > 1 or CP > 1 before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" (:936-962); a
    flag argparse does not know is an error (MEG_NONEXISTENT)."""
    conn = a.get("env", {}).get(CONNECTIONS)
    fsdp = bool(a.get("--use-megatron-fsdp") or a.get("--use-torch-fsdp2"))
    launch = bool(a.get("launcher"))   # an args file: the environment is set elsewhere
    if fsdp and launch:
        rules.append(make_rule("megatron-fsdp-connections", conn != "1", f"{CONNECTIONS}={conn}",
                               "unset or > 1", "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS "
                               "value large than one (validate_args)", key=CONNECTIONS))
    if a.get("--use-megatron-fsdp"):
        fmt = a.get("--ckpt-format", "torch_dist")
        rules.append(make_rule("megatron-fsdp-ckpt-format", fmt == "fsdp_dtensor",
                               f"--ckpt-format {fmt}", "fsdp_dtensor", "Megatron FSDP only "
                               "supports fsdp_dtensor checkpoint format (validate_args)",
                               key="--ckpt-format" if "--ckpt-format" in a
                               else "--use-megatron-fsdp"))
    elif (launch and not fsdp and (tp > 1 or cp > 1) and not blackwell
          and not a.get("--overlap-moe-expert-parallel-comm")):   # :948-957: a warning only
        rules.append(make_rule("megatron-connections", conn == "1", f"{CONNECTIONS}={conn}",
                               "1 (TP or CP > 1 before Blackwell)", "Using tensor model "
                               "parallelism or context parallelism require setting the "
                               "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1 "
                               "(validate_args)", key=CONNECTIONS))
    for flag, why in MEG_NONEXISTENT.items():
        if a.get(flag):
            rules.append(make_rule("megatron-unknown-flag", False, flag, "a flag of Megatron-LM",
                                   f"argparse rejects {flag}: {why}", key=flag))


def connections_line(lay: Layout, blackwell: bool) -> str:
    """The launch script's CUDA_DEVICE_MAX_CONNECTIONS line, as validate_args requires it:
    unset under Megatron-FSDP (it asserts != 1), 1 without FSDP when TP or CP > 1 before
    Blackwell (it asserts == 1), else left as the environment has it."""
    if lay.zero >= 2:
        return f"# Megatron-FSDP requires {CONNECTIONS} unset or > 1\nunset {CONNECTIONS}"
    if (lay.tp > 1 or lay.cp > 1) and not blackwell:
        return f"# TP or CP > 1 without FSDP: validate_args requires\nexport {CONNECTIONS}=1"
    return f"# {CONNECTIONS}: not required by this layout"


def per_chunk_recompute(lay: Layout, stage_layers: int) -> int:
    """--recompute-num-layers for k layers recomputed per pipeline stage: Megatron builds one
    TransformerBlock per model chunk and recomputes the first n layers of each (block method,
    transformer_block.py:389-500), so with v chunks per stage it is k / v; refused when v does
    not divide k (no flag value recomputes exactly k)."""
    k = min(lay.recompute_layers or 0, stage_layers)
    v = lay.chunks if lay.schedule == "interleaved" else 1
    if k % v:
        raise InputError("--to", f"Megatron-LM cannot recompute {k} layers per stage with "
                         f"{v} model chunks: --recompute-num-layers counts per chunk, so the "
                         f"layers per stage must be a multiple of {v} (use --recompute-layers "
                         f"{max(v, k // v * v)} or {k // v * v + v})")
    return k // v


def counted_layers(a: dict[str, Any], layers: int) -> int:
    """The layers validate_args splits over the pipeline (core_v0.15.3 arguments.py:557-579):
    L, plus one for each of the embedding and the loss counted as a layer (ACCOUNT_FLAGS)."""
    return layers + sum(bool(a.get(f)) for f in ACCOUNT_FLAGS)


def interleaved_split(layers: int, pp: int, v: int) -> tuple[list[tuple[str, object]], int]:
    """(flags, --num-layers-per-virtual-pipeline-stage) for L layers over PP·v chunks as dtplan
    splits them: where the first (and last) chunk is a layer short, the embedding (and the loss)
    count as that layer, so L + short divides by PP·v as validate_args requires."""
    short = int(stage_deficit(layers, pp, v))   # the chunks a layer short, as dtplan splits
    if short > len(ACCOUNT_FLAGS):
        raise InputError("--to", f"megatron cannot express {layers} layers over PP {pp} × v {v}"
                                 f" ({short} chunks a layer short; at most 2: embedding and loss)")
    return [(f, None) for f in ACCOUNT_FLAGS[:short]], (layers + short) // (pp * v)
