"""DeepSpeed JSON: the reader (config keys onto a Layout, with DeepSpeed's own assertions as rules) and
the writer (all three batch keys consistent with DP = world ÷ (TP·PP)), side by side.

Sources (ECOSYSTEM.md §1.1-1.4): ``deepspeed/runtime/config.py`` ``_batch_assertion`` /
``_set_batch_related_parameters``, ``pipe/engine.py`` ZeRO check, ``precision_config.py``.
"""

from __future__ import annotations

import json
from typing import Any

from ..validate import MAX_GLOBAL_BATCH
from ..errors import InputError
from ..specs.job import CheckOptions, Inputs
from ..specs.layout import Layout
from ..rules import config_keys
from ..verdict import GateRule, make_rule
from .common import Export, _Obj, _accumulation, _bf16, _hardware, _need, _unsupported, cli_model


# ---- reader -----------------------------------------------------------------------------------
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
    tbs = o.int("train_batch_size", auto=True, high=MAX_GLOBAL_BATCH)
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
    return Inputs(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq_len,
                  global_batch=max(1, tbs), keys=config_keys("deepspeed", layout),
                  rules=rules, notes=notes)


def _device(o: _Obj) -> str:
    dev = o.str("device", "none") or "none"
    if dev not in ("none", "cpu", "nvme"):
        raise o.fail("device", f"must be none, cpu or nvme, got {dev!r}")
    return dev


# ---- writer -----------------------------------------------------------------------------------


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
