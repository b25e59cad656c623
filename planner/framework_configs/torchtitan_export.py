"""torchtitan exports: by default the command line torchtitan 0.3 runs (``--module``/``--config``
naming one of its config_registry functions, then CLI overrides: 0.3 reads no TOML, "Config
System Refactor: TOML to Python Dataclass Registry", pytorch/torchtitan #2386), and on request
(``--torchtitan-version 0.2``) the v0.2.x job TOML. One set of settings, rendered either way.

Sources: torchtitan 0.3.0 ``config/manager.py`` (``--module``/``--config`` are required),
``config/configs.py`` (TrainingConfig, ParallelismConfig), ``trainer.py`` (``_validate_cuda_graphs``:
PP or EP needs ``--training.disable-cuda-graphs``; the sequence divisor ``(tp if SP else 1)·(2·cp
if cp > 1 else 1)``), ``distributed/parallel_dims.py`` (no ETP: EP borrows from dp_shard·cp·tp);
v0.2.2 ``job_config.py``, ``parallel_dims.py`` and ``models/llama3/infra/parallelize.py`` (the
divisor tp·2·cp for every job).
"""

from __future__ import annotations

import json
import re
from typing import Any

from planner.specs.job import Job
from planner.framework_configs.common import (Export, _accumulation, _bf16, _sharding,
                                              _stage_layers, _unsupported, torchrun_lines)

# The releases an export targets, declared once (the CLI's --torchtitan-version choices).
TITAN_VERSIONS = {"0.3": "torchtitan 0.3.0", "0.2": "torchtitan 0.2.2"}
TITAN_DEFAULT = "0.3"

# torchtitan's own model configs, keyed by dtplan's model name with punctuation dropped
# ("Llama-3.1-70B" → "llama3.170b"). v0.2.x: [model] name/flavor (models/llama3/__init__.py);
# 0.3: the config_registry function (models/<module>/config_registry.py), whose flavor is fixed.
# torchtitan's llama3 flavors are the Llama 3.1 shapes (Llama 3 has the same parameters).
TITAN_V02_MODELS = {"llama38b": ("llama3", "8B"), "llama3.18b": ("llama3", "8B"),
                    "llama370b": ("llama3", "70B"), "llama3.170b": ("llama3", "70B"),
                    "llama3.1405b": ("llama3", "405B")}
# (module, config function, the dtplan presets of its shape, the first the one read back)
TITAN_V03 = (("llama3", "llama3_8b", ("llama3.1-8b", "llama3-8b")),
             ("llama3", "llama3_70b", ("llama3.1-70b", "llama3-70b")),
             ("llama3", "llama3_405b", ("llama3.1-405b",)),
             ("qwen3", "qwen3_0_6b", ("qwen3-0.6b",)), ("qwen3", "qwen3_1_7b", ("qwen3-1.7b",)),
             ("qwen3", "qwen3_14b", ("qwen3-14b",)), ("qwen3", "qwen3_32b", ("qwen3-32b",)),
             ("qwen3", "qwen3_30b_a3b", ("qwen3-30b-a3b",)),
             ("gpt_oss", "gpt_oss_20b", ("gpt-oss-20b",)),
             ("gpt_oss", "gpt_oss_120b", ("gpt-oss-120b",)),
             ("deepseek_v3", "deepseek_v3_671b", ("deepseek-v3",)))
# torch.distributed.pipelining get_schedule_class names (pytorch/pytorch 1fd7abc2
# torch/distributed/pipelining/schedules.py: "DualPipeV" is ScheduleDualPipeV, two stages a rank
# in a V; torchtitan imports it since v0.2.0, distributed/pipeline_parallel.py:23 at b5bcd76c).
SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B",
             "dualpipev": "DualPipeV"}


def model_key(name: str | None) -> str:
    return re.sub(r"[^a-z0-9.]", "", (name or "").lower())


TITAN_V03_CONFIGS = {model_key(p): (m, c) for m, c, presets in TITAN_V03 for p in presets}
TITAN_V03_PRESETS = {(m, c): presets[0] for m, c, presets in TITAN_V03}


def to_torchtitan(inp: Job, version: str = TITAN_DEFAULT) -> Export:
    """The layout as torchtitan ``version`` runs it (0.3: a torchrun command line; 0.2: a job
    TOML), consistent with that release's parallel_dims / trainer rules."""
    if version not in TITAN_VERSIONS:
        raise _unsupported("torchtitan", f"version {version!r}",
                           f"--torchtitan-version is one of {', '.join(TITAN_VERSIONS)}")
    tables, notes, summary = _settings(inp, version)
    if version == "0.2":
        return _v02(inp, tables, notes, summary)
    return _v03(inp, tables, notes, summary)


def _refuse(inp: Job, version: str) -> None:
    """What torchtitan ``version`` cannot run from these settings."""
    lay, target = inp.layout, TITAN_VERSIONS[version]
    if lay.offload_optimizer == "nvme" or lay.offload_params == "nvme":
        raise _unsupported("torchtitan", "offload to NVMe (FSDP offloads to CPU only)")
    if lay.pp > 1 and lay.schedule == "zb-h1":   # pipelining's zero-bubble schedules are looped
        raise _unsupported("torchtitan", "ZB-H1 with one stage per rank")
    if lay.pp > 1 and lay.schedule == "dualpipe":   # pipelining has the V, not two model copies
        raise _unsupported("torchtitan", "DualPipe with two model copies per rank",
                           "plan with --schedule dualpipev (torchtitan's DualPipeV)")
    if lay.pp > 1 and lay.schedule == "dualpipev" and (
            inp.model.layers % (2 * lay.pp) or lay.first_stage_layers or lay.last_stage_layers):
        raise _unsupported("torchtitan", f"DualPipeV with {inp.model.layers} layers over 2 × PP "
                           f"= {2 * lay.pp} stages unevenly (its V puts the first and the last "
                           "stage on one rank)", "use a PP whose 2 × PP divides the layers")
    if version == "0.2":
        divisor, rule = lay.tp * 2 * lay.cp, "tp·2·cp"
        if lay.expert_tp not in (lay.tp, 1):   # parallel_dims.py:35-59 (v0.2.2)
            raise _unsupported("torchtitan", f"expert TP {lay.expert_tp} with TP {lay.tp} "
                               f"({target} runs ETP = TP or 1)")
    else:
        divisor = (lay.tp if lay.sequence_parallel else 1) * (2 * lay.cp if lay.cp > 1 else 1)
        rule = "(tp if sequence parallel) · (2·cp if cp > 1)"
        if lay.precision == "fp8":   # float8 is a converter set in a config function, not a flag
            raise _unsupported("torchtitan", f"fp8 from the {target} command line (float8 is a "
                               "model converter set in a config_registry function)",
                               "use --torchtitan-version 0.2, or add the converter to a config "
                               "function of your own")
        if lay.ep > 1 and lay.expert_tp != 1:   # parallel_dims.py: no ETP, experts unsharded by TP
            raise _unsupported("torchtitan", f"expert TP {lay.expert_tp} ({target} has no expert "
                               "tensor parallelism: EP borrows from dp_shard·cp·tp)",
                               "plan with --etp 1")
    if inp.seq_len % divisor:
        raise _unsupported("torchtitan", f"seq_len {inp.seq_len} with TP {lay.tp} × CP {lay.cp}: "
                           f"{target} needs it to divide by {rule} = {divisor}")


def _settings(inp: Job, version: str) -> tuple[dict[str, dict[str, Any]], list[str], str]:
    """(tables of torchtitan keys, notes, the batch line) for either release."""
    lay = inp.layout
    _refuse(inp, version)
    gas = _accumulation(inp)
    rep, shard, reshard, notes = _sharding(inp, "torchtitan")
    first, full, last = _stage_layers(inp)
    par: dict[str, Any] = {"data_parallel_replicate_degree": rep,
                           "data_parallel_shard_degree": shard,
                           "fsdp_reshard_after_forward": "always" if reshard else "never",
                           "tensor_parallel_degree": lay.tp, "context_parallel_degree": lay.cp,
                           "expert_parallel_degree": lay.ep, "pipeline_parallel_degree": lay.pp}
    if version == "0.2" and lay.expert_tp != lay.tp:
        par["expert_tensor_parallel_degree"] = lay.expert_tp
    if version == "0.3":
        par["enable_sequence_parallel"] = lay.sequence_parallel
    if lay.pp > 1:
        par.update(pipeline_parallel_schedule=SCHEDULES[lay.schedule],
                   pipeline_parallel_microbatch_size=lay.micro_batch,
                   pipeline_parallel_layers_per_stage=full // (
                       2 if lay.schedule == "dualpipev" else lay.chunks),
                   pipeline_parallel_first_stage_less_layers=full - first,
                   pipeline_parallel_last_stage_less_layers=full - last)
        local = lay.micro_batch * gas      # every micro-batch of the step goes through the pipeline
    else:
        local = lay.micro_batch            # global ÷ (local × dp) micro-steps of accumulation
    offload = lay.offload_optimizer != "none" or lay.offload_params != "none"
    training: dict[str, Any] = {
        "local_batch_size": local, "global_batch_size": inp.global_batch, "seq_len": inp.seq_len,
        "mixed_precision_param": "bfloat16" if _bf16(lay.precision) else "float32",
        "mixed_precision_reduce": "float32", "enable_cpu_offload": offload}
    if version == "0.3" and (lay.pp > 1 or lay.ep > 1):   # trainer.py _validate_cuda_graphs
        training["disable_cuda_graphs"] = True
        notes.append("CUDA graphs off (--training.disable-cuda-graphs): torchtitan 0.3 runs no "
                     "pipeline and no synchronising expert dispatch under them")
    if offload and lay.offload_params == "none":
        notes.append("FSDP CPU offload moves parameters, gradients and optimizer state together")
    ac: dict[str, Any] = {"mode": lay.recompute}
    if lay.recompute == "selective" and version == "0.2":
        ac["selective_ac_option"] = "op"
    if lay.recompute == "full" and lay.recompute_layers is not None:
        notes.append("torchtitan's full AC covers every layer; the plan recomputes "
                     f"{lay.recompute_layers} per stage")
    # the torchtitan profile prices compiled kernels (framework_profiles/torchtitan.toml
    # kernel_class): the export turns compilation on, as torchtitan's published runs do
    compiled = not (version == "0.2" and lay.pp > 1 and lay.schedule == "dualpipev")
    if not compiled:
        notes.append("compile off: torchtitan 0.2 wraps each block in torch.compile (models/llama3/"
                     "infra/parallelize.py:263, v0.2.2) and ScheduleDualPipeV refuses compiled "
                     "stage modules; 0.3 compiles blocks in place (distributed/compile.py:70)")
    tables = {"training": training, "parallelism": par, "activation_checkpoint": ac,
              "compile": {"enable": compiled}}
    summary = (f"{lay.dp} data-parallel ranks (replicate {rep} x shard {shard}), global batch "
               f"{inp.global_batch} = local {local} x DP {lay.dp} x accumulation "
               f"{inp.global_batch // (local * lay.dp)}")
    return tables, notes, summary


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _v02(inp: Job, tables: dict[str, dict[str, Any]], notes: list[str], summary: str) -> Export:
    """The v0.2.x job TOML (``--job.config_file``)."""
    mod = inp.model
    model = TITAN_V02_MODELS.get(model_key(mod.name))
    sections: list[tuple[str, dict[str, Any]]] = [
        ("job", {"description": f"dtplan export: {mod.name or 'model'} on {inp.gpus} GPUs"})]
    # a placeholder torchtitan refuses where it has no flavor: without [model] it would train
    # its debug model (job_config.py Model.name/flavor defaults "llama3"/"debugmodel")
    name, flavor = model or ("MODEL", "FLAVOR")
    model_keys: dict[str, Any] = {"name": name, "flavor": flavor}
    if not model:
        notes.append(f"[model] name/flavor: torchtitan v0.2 has no flavor for "
                     f"{mod.name or 'this model'}; register one and name it there (torchtitan "
                     "refuses the placeholders; dtplan check needs --model)")
    if inp.layout.precision == "fp8":
        model_keys["converters"] = ["quantize.linear.float8"]
    sections.append(("model", model_keys))
    sections += list(tables.items())
    lines = [f"# dtplan export for {TITAN_VERSIONS['0.2']} (v0.2.x job TOML; torchtitan 0.3 "
             "reads no TOML): " + summary, "# Run with: --job.config_file <this file>"]
    for name, body in sections:
        lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    return Export("torchtitan", "\n".join(lines) + "\n", notes, ["--gpus", str(inp.gpus)])


def _flag(table: str, key: str, value: object) -> str:
    """One tyro override: ``--table.key-name value``; a bool is ``--table.key`` or
    ``--table.no-key`` (tyro's flag pair), so a config function's own value is overridden."""
    name = f"--{table}.{key.replace('_', '-')}"
    if isinstance(value, bool):
        return name if value else f"--{table}.no-{key.replace('_', '-')}"
    return f"{name} {value}"


def _v03(inp: Job, tables: dict[str, dict[str, Any]], notes: list[str], summary: str) -> Export:
    """The torchrun command line torchtitan 0.3 runs: ``--module M --config C``, every setting
    as an override, activation checkpointing as its subcommand token last."""
    mod, hw = inp.model, inp.hardware
    known = TITAN_V03_CONFIGS.get(model_key(mod.name))
    module, config = known or ("MODULE", "CONFIG")
    if not known:
        notes.append(f"--module/--config: torchtitan 0.3 has no config for "
                     f"{mod.name or 'this model'}; write a config_registry function returning its Trainer.Config "
                     "and name it there (torchtitan refuses the placeholders; dtplan check "
                     "needs --model)")
    ac = tables["activation_checkpoint"]["mode"]
    words = [f"--module {module} --config {config}"]
    for table, body in tables.items():
        if table != "activation_checkpoint":
            words += [_flag(table, k, v) for k, v in body.items()]
    words.append(f"activation-checkpoint:{ac}")
    lines = ["#!/bin/bash",
             f"# dtplan export for {TITAN_VERSIONS['0.3']} (--module/--config and overrides; "
             f"0.3 reads no TOML): {mod.name or 'model'} on {inp.gpus} x {hw.name}",
             f"# {summary}", *torchrun_lines(inp, "-m torchtitan.train")]
    lines += [f"  {w} \\" for w in words[:-1]] + [f"  {words[-1]}"]
    return Export("torchtitan", "\n".join(lines) + "\n", notes, ["--gpus", str(inp.gpus)])
