"""Options shared by the commands that take a model, hardware, a layout and a batch."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Optional

import typer

from ..errors import InputError
from ..inputs.resolve import DEFAULT_SEQ_LEN, DEFAULT_TOKENS_PER_BATCH, Flags
from ..specs.layout import _SAME, KNOB, KNOBS, Knob
from .options import parse_number

# Model: exactly one of these sources.
MODEL = typer.Option(None, "--model", "-m", help="preset name (see `dtplan models`)")
MODEL_CONFIG = typer.Option(None, "--model-config", help="Hugging Face config.json path")
PARAMS = typer.Option(None, "--params", help="bare parameter count, e.g. 70e9 (shape inferred)")
LAYERS = typer.Option(None, "--layers", help="architecture: transformer layers")
HIDDEN = typer.Option(None, "--hidden", help="architecture: hidden size")
HEADS = typer.Option(None, "--heads", help="architecture: attention heads")
KV_HEADS = typer.Option(None, "--kv-heads", help="architecture: KV heads (GQA)")
FFN = typer.Option(None, "--ffn", help="architecture: FFN size (default 4h GeLU, ~8h/3 SwiGLU)")
VOCAB = typer.Option(None, "--vocab", help="architecture: vocabulary")
MLP = typer.Option(None, "--mlp", help="architecture: gelu (GPT-style) or swiglu (Llama-style)")
DROPOUT = typer.Option(None, "--dropout/--no-dropout", help="train with dropout (default: as the "
                       "model source says; GeLU flags: on; a dropout model's attention defaults "
                       "to unfused, as in the papers)")
# Hardware.
HARDWARE = typer.Option(None, "--hardware", help="profile name (default h100; `dtplan profiles`)")
HARDWARE_FILE = typer.Option(None, "--hardware-file", help="profile TOML file")
GPUS_PER_NODE = typer.Option(None, "--gpus-per-node", help="what-if: GPUs per node / NVLink domain")
GPU_MEMORY = typer.Option(None, "--gpu-memory-gb", help="what-if: GPU memory (GiB)")
NIC = typer.Option(None, "--nic-gbit-per-gpu", "--nic-gbit", help="what-if: NIC Gb/s per GPU")
# Batch.
SEQ_LEN = typer.Option(None, "--seq-len", help=f"sequence length (default {DEFAULT_SEQ_LEN})")
GLOBAL_BATCH = typer.Option(None, "--global-batch", help="sequences per optimizer step")
TOKENS_PER_BATCH = typer.Option(None, "--tokens-per-batch", help="tokens per step (default "
                                f"{DEFAULT_TOKENS_PER_BATCH / 2**20:g}M)")
# Framework whose implementation the time (and memory) model follows.
FRAMEWORK = typer.Option(None, "--framework", help="megatron (default), torchtitan, deepspeed, "
                         "fsdp, or a framework profile .toml")


def optional_int(field: str, text: Optional[str]) -> Optional[int]:
    """'auto' → None; otherwise a whole number ≥ 1."""
    if text is None or text == "auto":
        return None
    x = parse_number(field, text)
    if x != int(x) or x < 1:
        raise InputError(field, f"must be a whole number ≥ 1 or 'auto', got {text!r}")
    return int(x)


# The model, hardware and batch options every job command shares, in one place: the commands
# take a single `job: Flags` (resolved by planner.inputs.resolve) and the decorator below adds
# these options to their signature.
JOB_OPTIONS = (
    ("model", Optional[str], MODEL), ("model_config", Optional[str], MODEL_CONFIG),
    ("params", Optional[str], PARAMS), ("layers", Optional[int], LAYERS),
    ("hidden", Optional[int], HIDDEN), ("heads", Optional[int], HEADS),
    ("kv_heads", Optional[int], KV_HEADS), ("ffn", Optional[int], FFN),
    ("vocab", Optional[int], VOCAB), ("mlp", Optional[str], MLP),
    ("dropout", Optional[bool], DROPOUT), ("hardware", Optional[str], HARDWARE), ("hardware_file", Optional[str], HARDWARE_FILE),
    ("gpus_per_node", Optional[int], GPUS_PER_NODE), ("gpu_memory_gb", Optional[float], GPU_MEMORY),
    ("nic_gbit", Optional[float], NIC), ("seq_len", Optional[int], SEQ_LEN),
    ("global_batch", Optional[int], GLOBAL_BATCH), ("tokens_per_batch", Optional[str], TOKENS_PER_BATCH),
    ("framework", Optional[str], FRAMEWORK),
)


def job_options(fn):
    """Add the JOB_OPTIONS to a typer command whose body takes `job: Flags`."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "job"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
             for name, ann, default in JOB_OPTIONS]
    names = [name for name, _, _ in JOB_OPTIONS]

    @functools.wraps(fn)
    def command(**kw):
        return fn(job=Flags(**{n: kw.pop(n) for n in names}), **kw)

    command.__signature__ = sig.replace(parameters=own + extra)
    command.__annotations__ = {p.name: p.annotation for p in own + extra}
    return command


def layout_option(k: Knob) -> tuple[Any, Any]:
    """(annotation, typer.Option) of one layout knob, from its declaration in specs.layout."""
    text = k.cli_help or k.help
    if k.cli_auto:
        return str, typer.Option(str(k.default), k.flag, help=f"{text}, or auto")
    default = k.default if k.cli_default is _SAME else k.cli_default
    if k.type in (bool, bool | None):
        return Optional[bool], typer.Option(default, f"{k.flag}/--no-{k.flag[2:]}", help=text)
    if k.choices or k.type is str:
        return str, typer.Option(default, k.flag, help=text)
    return (int if default is not None else Optional[int]), typer.Option(default, k.flag, help=text)


# The layout knobs a command takes as options (dp is derived from --gpus).
LAYOUT_OPTIONS = tuple((k.name,) + layout_option(k) for k in KNOBS if k.cli)


def layout_options(fn):
    """Add the LAYOUT_OPTIONS after --gpus of a typer command whose body takes
    `layout: dict[str, Any]` (the knob values as typed: 'auto' stays a string)."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "layout"]
    at = next((i + 1 for i, p in enumerate(own) if p.name == "gpus"), len(own))
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
             for name, ann, default in LAYOUT_OPTIONS]
    names = [name for name, _, _ in LAYOUT_OPTIONS]

    @functools.wraps(fn)
    def command(**kw):
        return fn(layout={n: kw.pop(n) for n in names}, **kw)

    kw_only = inspect.Parameter.KEYWORD_ONLY
    params = own[:at] + extra + [p.replace(kind=kw_only) for p in own[at:]]
    command.__signature__ = sig.replace(parameters=params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def override_option(name: str) -> Any:
    """typer.Option for a layout knob that replaces a plan's or engine config's own value
    (`check --micro-batch`, `--recompute`, `--precision`), from its declaration in specs.layout."""
    k = KNOB[name]
    return typer.Option(None, k.flag, help=f"{k.cli_help or k.help}; replaces the file's value "
                        "(and fills its \"auto\")")
