"""Options shared by the commands that take a model, hardware, a layout and a batch."""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import InputError
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
# Hardware.
HARDWARE = typer.Option(None, "--hardware", help="profile name (default h100; `dtplan profiles`)")
HARDWARE_FILE = typer.Option(None, "--hardware-file", help="profile TOML file")
GPUS_PER_NODE = typer.Option(None, "--gpus-per-node", help="what-if: GPUs per node / NVLink domain")
GPU_MEMORY = typer.Option(None, "--gpu-memory-gb", help="what-if: GPU memory (GiB)")
NIC = typer.Option(None, "--nic-gbit", help="what-if: NIC Gb/s per GPU")
# Batch.
SEQ_LEN = typer.Option(None, "--seq-len", help="sequence length (default 4096)")
GLOBAL_BATCH = typer.Option(None, "--global-batch", help="sequences per optimizer step")
TOKENS_PER_BATCH = typer.Option(None, "--tokens-per-batch", help="tokens per step (default 4M)")


def model_from_options(model, model_config, params, layers, hidden, heads, kv_heads, ffn, vocab,
                       mlp):
    from ..resolve import resolve_model
    return resolve_model(model=model, model_config=model_config,
                         params=parse_number("--params", params) if params is not None else None,
                         layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, mlp=mlp)


def hardware_from_options(hardware, hardware_file, gpus_per_node, gpu_memory_gb, nic_gbit):
    from ..resolve import resolve_hardware
    return resolve_hardware(hardware=hardware, hardware_file=hardware_file,
                            gpus_per_node=gpus_per_node, gpu_memory_gb=gpu_memory_gb,
                            nic_gbit_per_gpu=nic_gbit)


def batch_from_options(seq_len, global_batch, tokens_per_batch) -> tuple[int, int, str]:
    from ..resolve import resolve_batch
    tpb = parse_number("--tokens-per-batch", tokens_per_batch) if tokens_per_batch else None
    return resolve_batch(seq_len=seq_len, global_batch=global_batch, tokens_per_batch=tpb)


def optional_int(field: str, text: Optional[str]) -> Optional[int]:
    """'auto' → None; otherwise a whole number ≥ 1."""
    if text is None or text == "auto":
        return None
    x = parse_number(field, text)
    if x != int(x) or x < 1:
        raise InputError(field, f"must be a whole number ≥ 1 or 'auto', got {text!r}")
    return int(x)
