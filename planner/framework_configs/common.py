"""Shared by the engine modules: loading and detecting an engine config, typed access to a parsed
mapping, and the writers' common checks (accumulation, stage split, FSDP sharding).

What a file cannot say (GPU count, hardware, sometimes the model or sequence length) comes from
``CheckOptions`` (``--gpus``, ``--hardware``, ``--model``, ``--seq-len``, ``--tp``, ``--pp``);
its ``--micro-batch``, ``--global-batch``, ``--recompute`` and ``--precision`` replace the file's
own keys (the flag wins, and a note says so). Missing inputs are collected (``_need``) and
reported together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.engine.stages import stage_layers
from planner.errors import InputError, Problems
from planner.io.parse import detect_format, parse_text
from planner.io.read import looks_like_path, read_text
from planner.io.tree import TITAN_CMDLINE
from planner.io.validate import MAX_GPUS
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import load_hardware
from planner.specs.job import CheckOptions, Job
from planner.specs.model import ModelSpec


ENGINES = ("deepspeed", "megatron", "torchtitan")
DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu",
                  "gradient_accumulation_steps", "zero_optimization", "bf16", "bfloat16", "fp16",
                  "activation_checkpointing", "gradient_clipping", "steps_per_print"}
TORCHTITAN_TABLES = {"parallelism", "training", "activation_checkpoint", "job", "model",
                     "optimizer", "checkpoint", "compile", "metrics", "lr_scheduler"}
MEGATRON_HINTS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                  "--micro-batch-size", "--num-layers", "pretrain_gpt")
ARGS_SUFFIXES = {".sh", ".bash", ".args", ".txt", ".cmd", ""}

TARGETS = ("deepspeed", "megatron", "torchtitan", "accelerate")


# ---- loading and detection ---------------------------------------------------------------------

def load_any(path: str, engine: str | None) -> tuple[str, str, Any]:
    """(text, format, parsed data); Megatron argument lists are kept as text (format "args"),
    and so are torchtitan 0.3 command lines (format "titan-args")."""
    text = read_text(path, what="plan or engine config")
    suffix = Path(path).suffix.lower()
    if ((engine == "torchtitan" and suffix != ".toml") or (engine is None and suffix in
                                                           ARGS_SUFFIXES)) \
            and TITAN_CMDLINE.search(text):
        return text, "titan-args", None
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
    if fmt == "titan-args":
        return "torchtitan"
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
    from planner.specs.hf_config import load_hf_config
    from planner.specs.presets import get_preset

    if looks_like_path(text, ".json"):
        return load_hf_config(text, option="--model")
    return get_preset(text)


def given_model(opts: CheckOptions) -> ModelSpec:
    """The model check's flags name: ``--model`` (a preset or config.json), else ``--params N``
    (the dense shape inferred from N, as fit and export plan it)."""
    from planner.specs.model import model_from_params

    if opts.model:
        return cli_model(opts.model)
    assert opts.params is not None   # callers ask only when one of the two is given
    return model_from_params(opts.params)


def _need(found: Problems, value: Any, option: str, what: str) -> Any:
    """``value``, or None with "<option>: <what>; pass <option>" recorded in ``found`` (the
    readers collect every missing input and report them together)."""
    if value is None:
        found.add(option, f"{what}; pass {option}")
    return value


def _hardware(opts: CheckOptions, notes: list[str]) -> HardwareProfile:
    if opts.hardware:
        return load_hardware(opts.hardware)
    notes.append("hardware not stated: assuming the h100 profile (pass --hardware)")
    return load_hardware("h100")


# ---- typed access to a parsed mapping ----------------------------------------------------------

class _Obj:
    def __init__(self, where: str, data: Any, prefix: str = ""):
        if not isinstance(data, dict):
            raise InputError(where, f"{prefix.rstrip('.') or 'top level'}: must be a mapping, got "
                                    f"{type(data).__name__}")
        self.where, self.data, self.prefix = where, data, prefix

    def fail(self, key: str, msg: str) -> InputError:
        return InputError(f"{self.where}: {self.prefix}{key}", msg)

    # before int/bool/str, whose names these methods take in the class body
    def sub(self, key: str) -> "_Obj":
        v = self.data.get(key)
        return _Obj(self.where, {} if v is None else v, f"{self.prefix}{key}.")

    def int(self, key: str, default: Any = None, *, auto: bool = False, low: int = 1,
            high: int = MAX_GPUS) -> Any:
        v = self.data.get(key)
        if v is None:
            return default
        if auto and v == "auto":
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, got {v!r}")
        if v < low:
            raise self.fail(key, f"must be >= {low}, got {v}")
        if v > high:  # the command line's bounds (planner.io.validate)
            raise self.fail(key, f"must be at most {high}, got {v}")
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


# ---- the writers' common checks ---------------------------------------------------------------


@dataclass
class Export:
    target: str
    text: str
    notes: list[str] = field(default_factory=list)   # caveats for stderr
    check_args: list[str] = field(default_factory=list)  # what `dtplan check` needs besides the file


MASTER_PORT = 29500   # torchrun's default rendezvous port


def torchrun_lines(inp: Job, program: str) -> list[str]:
    """The torchrun command over the job's nodes (ending in a continuation): one node as is;
    several take each node's rank and the head node's address from the environment
    (NODE_RANK, MASTER_ADDR, set on every node), as torchrun's static rendezvous needs."""
    per_node = min(inp.hardware.scale_up.gpus_per_node, inp.gpus)
    nodes = -(-inp.gpus // per_node)
    words = f"torchrun --nproc_per_node {per_node} --nnodes {nodes}"
    if nodes == 1:
        return [f"{words} {program} \\"]
    return [f"# {nodes} nodes: run this on every node with NODE_RANK (0..{nodes - 1}) and "
            "MASTER_ADDR (the head node's address) set",
            f'{words} --node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR" '
            f"--master_port {MASTER_PORT} {program} \\"]


def _accumulation(inp: Job) -> int:
    lay = inp.layout
    per_step = lay.micro_batch * lay.dp
    if inp.global_batch % per_step:
        raise InputError("--to", f"global batch {inp.global_batch} is not a multiple of "
                         f"micro-batch × DP = {per_step}; no engine can run it")
    return inp.global_batch // per_step


def _stage_layers(inp: Job) -> tuple[int, int, int]:
    """(first, full, last) layers per (virtual) stage: engine.stages, the split the estimate
    uses."""
    lay = inp.layout
    first, full, last = stage_layers(inp.model.layers, lay.pp, lay.chunks,
                                     lay.first_stage_layers or 0, lay.last_stage_layers or 0)
    return int(first), int(full), int(last)


def _unsupported(target: str, what: str, instead: str = "") -> InputError:
    return InputError("--to", f"{target} cannot express {what}" + (f"; {instead}" if instead else ""))


def schedule_refusal(target: str, schedule: str) -> InputError:
    """``target`` cannot run ``schedule``: the refusal names the export targets whose framework
    profile lists it among its pipeline_schedules, else says none does."""
    from planner.specs.framework import load_framework
    runs = ", ".join(load_framework(target).time.pipeline_schedules) or "no pipeline parallel"
    others = [t for t in ENGINES
              if t != target and schedule in load_framework(t).time.pipeline_schedules]
    return _unsupported(target, f"the {schedule} pipeline schedule (it runs {runs})",
                        f"use --to {' or '.join(others)}" if others else
                        "no export target runs it: plan with another --schedule")


def _bf16(precision: str) -> bool:
    return precision in ("mixed", "mixed-fp32-grads", "bf16-pure", "fp8")


def _sharding(inp: Job, target: str) -> tuple[int, int, bool, list[str]]:
    """(dp_replicate, dp_shard, reshard_after_forward, notes) from the ZeRO stage and the
    shard group: FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, HSDP = replicate × shard (§4.1)."""
    lay = inp.layout
    notes: list[str] = []
    if lay.dp == 1:
        return 1, 1, False, notes
    if lay.zero == 0:
        if lay.tp == lay.pp == lay.cp == 1:
            return lay.dp, 1, False, notes
        notes.append("ZeRO-0 with TP/PP/CP: DDP cannot combine with other parallelism in "
                     f"{target}; exported as FSDP without resharding (ZeRO-2-like, less memory)")
    if lay.zero == 1:
        notes.append("FSDP has no ZeRO-1: exported as SHARD_GRAD_OP (ZeRO-2, gradients sharded "
                     "too; `dtplan check` of the written file prices it)")
    # the plan's shard group counts DP·CP ranks (as the memory model shards over them); the
    # FSDP mesh is dp_shard × cp (torchtitan parallel_dims.py: CP ranks always shard), so a
    # group holds whole CP groups and dp_shard is the group over CP
    group = lay.shard_group or lay.dp * lay.cp
    if group % lay.cp:
        raise _unsupported(target, f"a shard group of {group} ranks with CP {lay.cp} (the FSDP "
                           "mesh is dp_shard × cp: a group holds whole CP groups)")
    shard = group // lay.cp
    if lay.dp % shard:   # a device mesh of replicate × shard: whole replicas of the group
        raise _unsupported(target, f"a shard group of {shard} in DP {lay.dp} (replicas of the "
                           "group must cover DP exactly)")
    return lay.dp // shard, shard, lay.zero >= 3, notes
