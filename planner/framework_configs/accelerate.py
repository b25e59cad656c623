"""Accelerate config YAML for FSDP2 (ECOSYSTEM.md §4: the config YAML and the FSDP ↔ ZeRO mapping);
TP and CP through ``parallelism_config``. Writer only: ``dtplan check`` reads no Accelerate file.
"""

from __future__ import annotations

import math

from planner.specs.job import Job
from planner.framework_configs.common import Export, _accumulation, _bf16, _sharding, _unsupported


LAYER_CLASSES = {"llama": "LlamaDecoderLayer", "mixtral": "MixtralDecoderLayer",
                 "qwen2": "Qwen2DecoderLayer", "mistral": "MistralDecoderLayer", "gpt2": "GPT2Block"}


def to_accelerate(inp: Job) -> Export:
    """Accelerate config YAML for FSDP2 (§4.2); TP and CP through ``parallelism_config``."""
    import yaml
    lay, mod, hw = inp.layout, inp.model, inp.hardware
    if lay.pp > 1:
        raise _unsupported("accelerate", f"pipeline parallel (PP {lay.pp}) with FSDP",
                           "use --to megatron, deepspeed or torchtitan")
    if lay.ep > 1:
        raise _unsupported("accelerate", f"expert parallel (EP {lay.ep})",
                           "use --to megatron or torchtitan")
    if lay.offload_optimizer == "nvme" or lay.offload_params == "nvme":
        raise _unsupported("accelerate", "offload to NVMe with FSDP (CPU only)")
    gas = _accumulation(inp)
    notes: list[str] = []
    per_node = min(hw.scale_up.gpus_per_node, inp.gpus)
    cfg: dict = {"compute_environment": "LOCAL_MACHINE", "debug": False,
                 "machine_rank": 0, "main_training_function": "main",
                 "mixed_precision": ("fp8" if lay.precision == "fp8" else
                                     "bf16" if _bf16(lay.precision) else "no"),
                 "num_machines": math.ceil(inp.gpus / per_node), "num_processes": inp.gpus,
                 "rdzv_backend": "static", "same_network": True, "use_cpu": False}
    simple_ddp = lay.zero == 0 and lay.tp == lay.cp == 1
    if simple_ddp:
        cfg["distributed_type"] = "MULTI_GPU"
    else:
        rep, shard, reshard, n = _sharding(inp, "accelerate")
        notes += n
        layer_cls = next((c for k, c in LAYER_CLASSES.items() if k in (mod.name or "").lower()),
                         None)
        fsdp = {"fsdp_version": 2, "fsdp_reshard_after_forward": reshard,
                "fsdp_offload_params": lay.offload_optimizer != "none" or lay.offload_params != "none",
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_transformer_layer_cls_to_wrap": layer_cls or "DecoderLayer",
                "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
                "fsdp_activation_checkpointing": lay.recompute == "full"}
        if layer_cls is None:
            notes.append("fsdp_transformer_layer_cls_to_wrap: set your model's decoder-layer class")
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = fsdp
        if lay.tp > 1 or lay.cp > 1 or rep > 1:
            cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": rep,
                                         "parallelism_config_dp_shard_size": shard,
                                         "parallelism_config_tp_size": lay.tp,
                                         "parallelism_config_cp_size": lay.cp}
    if lay.recompute == "selective":
        notes.append("Accelerate's activation checkpointing is whole-layer; selective recompute "
                     "is not expressible and is left off")
    header = [f"# dtplan export (Accelerate config YAML): {mod.name or 'model'} on {inp.gpus} GPUs",
              f"# The training script sets the batch: per-device batch {lay.micro_batch}, "
              f"gradient_accumulation_steps {gas}, global batch {inp.global_batch}, "
              f"sequence length {inp.seq_len}.", "# Run with: accelerate launch --config_file <this file> train.py"]
    body = yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)
    return Export("accelerate", "\n".join(header) + "\n" + body, notes, [])
