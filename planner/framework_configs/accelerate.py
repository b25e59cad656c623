"""Accelerate config YAML for FSDP2 (ECOSYSTEM.md §4: the config YAML and the FSDP ↔ ZeRO mapping);
TP and CP through ``parallelism_config``; several nodes with the fields ``accelerate launch``
passes to torchrun. Writer only: ``dtplan check`` reads no Accelerate file.

Written for Accelerate 1.15.0: ``commands/config/config_args.py`` (ClusterConfig: unknown
top-level keys rejected), ``commands/launch.py`` and ``utils/launch.py::prepare_multi_gpu_env``
(nproc_per_node = num_processes // num_machines; same_network → torchrun master_addr =
main_process_ip, master_port = main_process_port, node_rank = machine_rank).
"""

from __future__ import annotations

import math

from planner.specs.job import Job
from planner.framework_configs.common import Export, _accumulation, _bf16, _sharding, _unsupported


ACCELERATE_TARGET = "Accelerate 1.15.0"
# What each node's copy must say: the head node's address (torchrun's master_addr), and its own
# rank. A placeholder no resolver accepts, so a file left unfilled fails at launch, loudly.
HEAD_NODE_IP = "HEAD_NODE_IP"
MAIN_PROCESS_PORT = 29500   # torchrun's and Accelerate's default master port

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
    machines = math.ceil(inp.gpus / per_node)
    if inp.gpus % machines:   # Accelerate starts num_processes // num_machines per node
        raise _unsupported("accelerate", f"{inp.gpus} GPUs over {machines} nodes of "
                           f"{per_node}: it starts the same number of processes on every node",
                           f"plan a multiple of {machines} GPUs")
    cfg: dict = {"compute_environment": "LOCAL_MACHINE", "debug": False,
                 "machine_rank": 0, "main_training_function": "main",
                 "mixed_precision": ("fp8" if lay.precision == "fp8" else
                                     "bf16" if _bf16(lay.precision) else "no"),
                 "num_machines": machines, "num_processes": inp.gpus,
                 "rdzv_backend": "static", "same_network": True, "use_cpu": False}
    if machines > 1:
        cfg.update(main_process_ip=HEAD_NODE_IP, main_process_port=MAIN_PROCESS_PORT)
        notes.append(f"{machines} nodes: on each node set machine_rank (0 on the head node, "
                     f"1..{machines - 1} on the others) and main_process_ip ({HEAD_NODE_IP} is a "
                     "placeholder: the head node's address, reachable from every node)")
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
    header = [f"# dtplan export for {ACCELERATE_TARGET} (config YAML): {mod.name or 'model'} on "
              f"{inp.gpus} GPUs, {machines} node(s) of {inp.gpus // machines} processes",
              f"# The training script sets the batch: per-device batch {lay.micro_batch}, "
              f"gradient_accumulation_steps {gas}, global batch {inp.global_batch}, "
              f"sequence length {inp.seq_len}.", "# Run with: accelerate launch --config_file <this file> train.py"]
    if machines > 1:
        header.append(f"# On every node: a copy with its machine_rank and main_process_ip = the "
                      f"head node's address (replace {HEAD_NODE_IP})")
    body = yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)
    return Export("accelerate", "\n".join(header) + "\n" + body, notes, [])
