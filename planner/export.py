"""Engine-ready configs from a resolved plan (or the search's winner).

Each writer states the layout in the engine's own keys and respects the engine's own rules, so
``dtplan check`` reads the export back (``planner.engine_configs``) to the same verdict.
Key names and rules: ECOSYSTEM.md §1 (DeepSpeed ``config.py`` batch assertion, ZeRO block,
``pipe/engine.py`` ZeRO ≤ 1 with PP), §2 (Megatron-LM ``arguments.py`` at core_v0.15.0), §3
(torchtitan v0.2.2 ``job_config.py`` / ``parallel_dims.py``), §4 (Accelerate config YAML and the
FSDP ↔ ZeRO mapping). What an engine cannot express is refused with one line naming it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from .engine.stages import stage_layers
from .errors import InputError
from .specs.job import Inputs

TARGETS = ("deepspeed", "megatron", "torchtitan", "accelerate")


@dataclass
class Export:
    target: str
    text: str
    notes: list[str] = field(default_factory=list)   # caveats for stderr
    check_args: list[str] = field(default_factory=list)  # what `dtplan check` needs besides the file


def _accumulation(inp: Inputs) -> int:
    lay = inp.layout
    per_step = lay.micro_batch * lay.dp
    if inp.global_batch % per_step:
        raise InputError("--to", f"global batch {inp.global_batch} is not a multiple of "
                         f"micro-batch × DP = {per_step}; no engine can run it")
    return inp.global_batch // per_step


def _stage_layers(inp: Inputs) -> tuple[int, int, int]:
    """(first, full, last) layers per (virtual) stage: engine.stages, the split the estimate
    uses."""
    first, full, last = stage_layers(inp.model.layers, inp.layout.pp, inp.layout.chunks)
    return int(first), int(full), int(last)


def _unsupported(target: str, what: str, instead: str = "") -> InputError:
    return InputError("--to", f"{target} cannot express {what}" + (f"; {instead}" if instead else ""))


def _bf16(precision: str) -> bool:
    return precision in ("mixed", "mixed-fp32-grads", "bf16-pure", "fp8")


# ---- DeepSpeed ------------------------------------------------------------------------------

def to_deepspeed(inp: Inputs) -> Export:
    """DeepSpeed JSON: all three batch keys consistent with DP = world ÷ (TP·PP) (§1.1, §1.4)."""
    lay, mod = inp.layout, inp.model
    if lay.cp > 1:
        raise _unsupported("deepspeed", f"context parallel (CP {lay.cp})",
                           "use --to megatron or torchtitan")
    if lay.pp > 1 and lay.zero >= 2:
        raise _unsupported("deepspeed", f"ZeRO-{lay.zero} with pipeline parallel (PP {lay.pp}): "
                           "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    if lay.shard_group and lay.zero < 3:
        raise _unsupported("deepspeed", f"hybrid sharding at ZeRO-{lay.zero} (MiCS needs ZeRO-3)")
    if lay.schedule != "1f1b" and lay.pp > 1:
        raise _unsupported("deepspeed", f"the {lay.schedule} pipeline schedule (its pipeline "
                           "engine runs 1F1B)", "use --to megatron or torchtitan")
    if lay.offload_optimizer == "nvme" or lay.offload_params == "nvme":
        pass  # expressible; the path is a placeholder (note below)
    notes: list[str] = []
    gas = _accumulation(inp)
    h = mod.hidden
    zo: dict = {"stage": lay.zero, "contiguous_gradients": True, "overlap_comm": lay.zero >= 1,
                "reduce_scatter": True,
                # HF Trainer's "auto" sizes (transformers integrations/deepspeed.py): h², 0.9·h², 10·h
                "reduce_bucket_size": h * h}
    if lay.zero in (1, 2):
        zo.update(allgather_partitions=True, allgather_bucket_size=h * h)
    if lay.zero == 3:
        zo.update(stage3_prefetch_bucket_size=int(0.9 * h * h),
                  stage3_param_persistence_threshold=10 * h,
                  stage3_max_live_parameters=int(1e9), stage3_max_reuse_distance=int(1e9),
                  stage3_gather_16bit_weights_on_model_save=True)
        if lay.shard_group:
            zo["mics_shard_size"] = lay.shard_group
            notes.append(f"hybrid sharding over {lay.shard_group} ranks written as MiCS "
                         "(mics_shard_size); dtplan check reads it as full ZeRO-3 sharding")
    for key, dev in (("offload_optimizer", lay.offload_optimizer), ("offload_param", lay.offload_params)):
        if dev != "none":
            block = {"device": dev, "pin_memory": True}
            if dev == "nvme":
                block["nvme_path"] = "/local_nvme"
                notes.append(f"{key}.nvme_path is a placeholder: set it to a local NVMe mount")
            zo[key] = block
    cfg: dict = {"train_batch_size": inp.global_batch,
                 "train_micro_batch_size_per_gpu": lay.micro_batch,
                 "gradient_accumulation_steps": gas,
                 "gradient_clipping": 1.0, "steps_per_print": 10, "wall_clock_breakdown": False,
                 "zero_optimization": zo}
    if _bf16(lay.precision):
        cfg["bf16"] = {"enabled": True}
        if lay.precision == "fp8":
            notes.append("fp8: DeepSpeed runs bf16 here; FP8 matmuls come from Transformer Engine "
                         "in the model code")
    else:
        cfg["fp16"] = {"enabled": False}
        cfg["bf16"] = {"enabled": False}
    if lay.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False,
                                           "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False,
                                           "synchronize_checkpoint_boundary": False,
                                           "profile": False}
        notes.append("activation_checkpointing configures deepspeed.checkpointing; switch "
                     "recomputation on in the model (Megatron-DeepSpeed: "
                     "--deepspeed-activation-checkpointing --recompute-granularity full)")
    elif lay.recompute == "selective":
        notes.append("selective recompute is a model flag, not a DeepSpeed key (Megatron-DeepSpeed:"
                     " --recompute-granularity selective); dtplan check counts it as none")
    if lay.tp > 1 or lay.pp > 1:
        notes.append(f"TP {lay.tp} and PP {lay.pp} are set in the model code / launcher "
                     "(Megatron-DeepSpeed --tensor-model-parallel-size / "
                     "--pipeline-model-parallel-size), not in this JSON")
    if lay.ep > 1:
        notes.append(f"EP {lay.ep}: DeepSpeed-MoE sets ep_size in the model code")
    check = ["--gpus", str(inp.gpus), "--seq-len", str(inp.seq_len), "--tp", str(lay.tp),
             "--pp", str(lay.pp)]
    return Export("deepspeed", json.dumps(cfg, indent=2) + "\n", notes, check)


# ---- Megatron-LM ----------------------------------------------------------------------------

def to_megatron(inp: Inputs) -> Export:
    """A torchrun launch fragment with Megatron-LM's flags (§2.1), obeying validate_args (§2.2)."""
    lay, mod, hw = inp.layout, inp.model, inp.hardware
    notes: list[str] = []
    if lay.shard_group:
        raise _unsupported("megatron", f"hybrid sharding (shard group {lay.shard_group})",
                           "use --to torchtitan or accelerate")
    if lay.offload_optimizer != "none" or lay.offload_params != "none":
        raise _unsupported("megatron", "ZeRO-Offload", "use --to deepspeed")
    if lay.schedule == "gpipe" and lay.pp > 1:
        raise _unsupported("megatron", "the GPipe schedule (it runs 1F1B or interleaved 1F1B)")
    if mod.position == "alibi":
        raise _unsupported("megatron", "ALiBi position embeddings")
    gas = _accumulation(inp)
    first, full, last = _stage_layers(inp)
    a: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp)]
    if lay.schedule == "interleaved":
        if mod.layers % lay.pp or (mod.layers // lay.pp) % lay.chunks:
            raise _unsupported("megatron", f"interleaving {mod.layers} layers over PP {lay.pp} × "
                               f"v {lay.chunks} unevenly (layers per rank must divide by v)")
        a.append(("--num-layers-per-virtual-pipeline-stage", mod.layers // lay.pp // lay.chunks))
        if lay.pp == 2:
            a.append(("--overlap-p2p-communication", None))
    elif first != full or last != full:
        a += [("--decoder-first-pipeline-num-layers", first),
              ("--decoder-last-pipeline-num-layers", last)]
        notes.append(f"uneven pipeline: {first} layers on the first stage, {last} on the last, "
                     f"{full} on the others")
    if lay.sequence_parallel:
        a.append(("--sequence-parallel", None))
    if lay.cp > 1:
        a.append(("--context-parallel-size", lay.cp))
    if mod.is_moe:
        a += [("--num-experts", mod.experts), ("--moe-router-topk", mod.experts_per_token),
              ("--expert-model-parallel-size", lay.ep),
              ("--moe-ffn-hidden-size", mod.expert_width),
              ("--moe-token-dispatcher-type", "alltoall"), ("--moe-grouped-gemm", None)]
        if mod.shared_experts:
            a.append(("--moe-shared-expert-intermediate-size", mod.shared_experts * mod.expert_width))
        if mod.dense_layers:
            notes.append(f"the first {mod.dense_layers} layers are dense: set --moe-layer-freq "
                         "accordingly")
    elif lay.ep > 1:
        raise InputError("--to", f"EP {lay.ep} needs a mixture-of-experts model")
    a += [("--micro-batch-size", lay.micro_batch), ("--global-batch-size", inp.global_batch),
          ("--seq-length", inp.seq_len),
          ("--max-position-embeddings", max(inp.seq_len, mod.max_positions or 0)),
          ("--num-layers", mod.layers), ("--hidden-size", mod.hidden),
          ("--ffn-hidden-size", mod.ffn), ("--num-attention-heads", mod.heads),
          ("--kv-channels", mod.head_dim), ("--vocab-size", mod.vocab)]
    if mod.kv_heads != mod.heads:
        a += [("--group-query-attention", None), ("--num-query-groups", mod.kv_heads)]
    if mod.mlp == "swiglu":
        a.append(("--swiglu", None))
    a.append(("--normalization", "RMSNorm" if mod.norm == "rmsnorm" else "LayerNorm"))
    a.append(("--position-embedding-type", {"rope": "rope", "learned": "learned_absolute",
                                            "none": "none"}[mod.position]))
    if not mod.tied_embeddings:
        a.append(("--untie-embeddings-and-output-weights", None))
    if not mod.linear_bias:
        a.append(("--disable-bias-linear", None))
        if mod.qkv_bias:
            a.append(("--add-qkv-bias", None))
    if not mod.dropout:
        a += [("--attention-dropout", 0), ("--hidden-dropout", 0)]
    if lay.recompute == "selective":
        a.append(("--recompute-activations", None))
    elif lay.recompute == "full":
        if lay.recompute_layers is None:
            a += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
        else:
            a += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                  ("--recompute-num-layers", min(lay.recompute_layers, full))]
    if lay.zero == 1:
        a += [("--use-distributed-optimizer", None), ("--overlap-grad-reduce", None),
              ("--overlap-param-gather", None)]
    elif lay.zero >= 2:
        a += [("--use-megatron-fsdp", None),
              ("--data-parallel-sharding-strategy", "optim_grads" if lay.zero == 2
               else "optim_grads_params")]
    if lay.precision in ("mixed", "mixed-fp32-grads", "bf16-pure", "fp8"):
        a.append(("--bf16", None))
    if lay.precision == "fp8":
        a.append(("--fp8-format", "hybrid"))
    if lay.precision in ("mixed", "bf16-pure"):
        notes.append("Megatron keeps fp32 main gradients (18 bytes/param with Adam); "
                     "dtplan check counts that recipe")
    if lay.optimizer in ("sgd", "sgd-momentum"):
        a.append(("--optimizer", "sgd"))
    elif lay.optimizer not in ("adam", "adamw"):
        notes.append(f"optimizer {lay.optimizer}: Megatron's own optimizers are adam and sgd")
    if mod.position == "rope":
        notes.append("--rotary-base is not in the model spec: add the model's (Llama 3: 500000)")
    node = hw.scale_up.gpus_per_node
    per_node = min(node, inp.gpus)
    nodes = math.ceil(inp.gpus / per_node)
    lines = ["#!/bin/bash",
             f"# dtplan export (Megatron-LM core_v0.15 flags): {mod.name or 'model'} on "
             f"{inp.gpus} x {hw.name}",
             f"# TP {lay.tp} x PP {lay.pp} x CP {lay.cp} x DP {lay.dp}; "
             f"global batch {inp.global_batch} = micro {lay.micro_batch} x accumulation {gas} x DP {lay.dp}",
             "# Add the data, tokenizer, optimizer-schedule and checkpoint flags of your run.",
             "export CUDA_DEVICE_MAX_CONNECTIONS=1", "",
             f"torchrun --nproc_per_node {per_node} --nnodes {nodes} pretrain_gpt.py \\"]
    flags = [f"  {k}" + ("" if v is None else f" {v}") for k, v in a]
    lines += [f + " \\" for f in flags[:-1]] + [flags[-1]]
    return Export("megatron", "\n".join(lines) + "\n", notes, [])


# ---- torchtitan -------------------------------------------------------------------------------

# torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py@v0.2.2), keyed by the model
# name with punctuation dropped ("Llama-3-70B" → "llama370b").
TITAN_MODELS = {"llama38b": ("llama3", "8B"), "llama3.18b": ("llama3", "8B"),
                "llama370b": ("llama3", "70B"), "llama3.170b": ("llama3", "70B"),
                "llama3.1405b": ("llama3", "405B")}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _sharding(inp: Inputs, target: str) -> tuple[int, int, bool, list[str]]:
    """(dp_replicate, dp_shard, reshard_after_forward, notes) from the ZeRO stage and the
    shard group: FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, HSDP = replicate × shard (§4.1)."""
    lay = inp.layout
    notes = []
    if lay.dp == 1:
        return 1, 1, False, notes
    if lay.zero == 0:
        if lay.tp == lay.pp == lay.cp == 1:
            return lay.dp, 1, False, notes
        notes.append("ZeRO-0 with TP/PP/CP: DDP cannot combine with other parallelism in "
                     f"{target}; exported as FSDP without resharding (ZeRO-2-like, less memory)")
    if lay.zero == 1:
        notes.append("FSDP has no ZeRO-1: exported as SHARD_GRAD_OP (ZeRO-2, less memory)")
    shard = lay.shard_group or lay.dp
    return lay.dp // shard, shard, lay.zero >= 3, notes


def to_torchtitan(inp: Inputs) -> Export:
    """torchtitan v0.2.x job TOML (§3), consistent with parallel_dims / train.py rules (§3.1)."""
    lay, mod = inp.layout, inp.model
    gas = _accumulation(inp)
    rep, shard, reshard, notes = _sharding(inp, "torchtitan")
    if lay.offload_optimizer == "nvme" or lay.offload_params == "nvme":
        raise _unsupported("torchtitan", "offload to NVMe (FSDP offloads to CPU only)")
    if inp.seq_len % (lay.tp * 2 * lay.cp):
        raise _unsupported("torchtitan", f"seq_len {inp.seq_len} with TP {lay.tp} × CP {lay.cp}: "
                           "it must divide by tp·2·cp")
    first, full, last = _stage_layers(inp)
    par: dict = {"data_parallel_replicate_degree": rep, "data_parallel_shard_degree": shard,
                 "fsdp_reshard_after_forward": "always" if reshard else "never",
                 "tensor_parallel_degree": lay.tp, "context_parallel_degree": lay.cp,
                 "expert_parallel_degree": lay.ep, "pipeline_parallel_degree": lay.pp}
    if lay.pp > 1:
        schedule = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}[lay.schedule]
        per_stage = full // lay.chunks
        par.update(pipeline_parallel_schedule=schedule,
                   pipeline_parallel_microbatch_size=lay.micro_batch,
                   pipeline_parallel_layers_per_stage=per_stage,
                   pipeline_parallel_first_stage_less_layers=full - first,
                   pipeline_parallel_last_stage_less_layers=full - last)
        local = lay.micro_batch * gas      # every micro-batch of the step goes through the pipeline
    else:
        local = lay.micro_batch            # global ÷ (local × dp) micro-steps of accumulation
    training = {"local_batch_size": local, "global_batch_size": inp.global_batch,
                "seq_len": inp.seq_len,
                "mixed_precision_param": "bfloat16" if _bf16(lay.precision) else "float32",
                "mixed_precision_reduce": "float32",
                "enable_cpu_offload": lay.offload_optimizer != "none" or lay.offload_params != "none"}
    if training["enable_cpu_offload"] and lay.offload_params == "none":
        notes.append("FSDP CPU offload moves parameters, gradients and optimizer state together")
    ac: dict = {"mode": lay.recompute}
    if lay.recompute == "selective":
        ac["selective_ac_option"] = "op"
    if lay.recompute == "full" and lay.recompute_layers is not None:
        notes.append("torchtitan's full AC covers every layer; the plan recomputes "
                     f"{lay.recompute_layers} per stage")
    model = TITAN_MODELS.get(re.sub(r"[^a-z0-9.]", "", (mod.name or "").lower()))
    sections = [("job", {"description": f"dtplan export: {mod.name or 'model'} on {inp.gpus} GPUs"})]
    model_keys: dict = {"name": model[0], "flavor": model[1]} if model else {}
    if not model:
        notes.append(f"[model] name/flavor: {mod.name or 'this model'} has no torchtitan flavor "
                     "here; set them (dtplan check needs --model)")
    if lay.precision == "fp8":
        model_keys["converters"] = ["quantize.linear.float8"]
    if model_keys:
        sections.append(("model", model_keys))
    sections += [("training", training), ("parallelism", par), ("activation_checkpoint", ac)]
    lines = [f"# dtplan export (torchtitan v0.2.x TOML): {lay.dp} data-parallel ranks "
             f"(replicate {rep} x shard {shard}), global batch {inp.global_batch} = "
             f"local {local} x DP {lay.dp} x accumulation {inp.global_batch // (local * lay.dp)}",
             "# Run with: --job.config_file <this file>"]
    for name, body in sections:
        lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    check = ["--gpus", str(inp.gpus)] + ([] if model else ["--model", mod.name or "?"])
    return Export("torchtitan", "\n".join(lines) + "\n", notes, check)


# ---- Accelerate --------------------------------------------------------------------------------

LAYER_CLASSES = {"llama": "LlamaDecoderLayer", "mixtral": "MixtralDecoderLayer",
                 "qwen2": "Qwen2DecoderLayer", "mistral": "MistralDecoderLayer", "gpt2": "GPT2Block"}


def to_accelerate(inp: Inputs) -> Export:
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


WRITERS = {"deepspeed": to_deepspeed, "megatron": to_megatron, "torchtitan": to_torchtitan,
           "accelerate": to_accelerate}


def export(target: str, inp: Inputs) -> Export:
    if target not in WRITERS:
        raise InputError("--to", f"must be one of {', '.join(TARGETS)}, got {target!r}")
    return WRITERS[target](inp)
