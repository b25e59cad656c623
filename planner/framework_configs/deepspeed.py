"""DeepSpeed JSON: the reader (config keys onto a Layout, with DeepSpeed's own assertions as rules) and
the writer (all three batch keys consistent with DP = world ÷ (TP·PP)), side by side.

Sources (ECOSYSTEM.md §1.1-1.4): ``deepspeed/runtime/config.py`` ``_batch_assertion`` /
``_set_batch_related_parameters``, ``pipe/engine.py`` ZeRO check, ``precision_config.py``.
"""

from __future__ import annotations

import json
from typing import Any, cast

from planner.io.validate import MAX_GLOBAL_BATCH, MAX_GPUS
from planner.errors import InputError, Problems
from planner.specs.job import CheckOptions, Job
from planner.specs.knobs import Layout, Offload, Recompute
from planner.evaluation.rules import config_keys
from planner.specs.verdict import GateRule, make_rule
from planner.framework_configs.common import Export, _Obj, _accumulation, _bf16, _hardware, _need, _unsupported, given_model, schedule_refusal


# ---- reader -----------------------------------------------------------------------------------
DS_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "fusedadam": "adam", "cpuadam": "adam",
                 "sgd": "sgd-momentum"}


def read_deepspeed(where: str, data: Any, opts: CheckOptions) -> Job:
    """DeepSpeed JSON (ECOSYSTEM.md §1). TP/PP come from --tp/--pp (Megatron-DeepSpeed passes
    them as flags); DP = world ÷ (TP·PP·Ulysses SP) as in ``DeepSpeedConfig.__init__`` (§1.4).
    "auto" values (the Hugging Face Trainer's integration fills them from its own arguments)
    are resolved by check's options; every missing input is reported at once."""
    o = _Obj(where, data)
    notes: list[str] = []
    rules: list[GateRule] = []
    found = Problems()
    gpus = _need(found, opts.gpus, "--gpus", "a DeepSpeed config does not state the GPU count")
    seq_len = _need(found, opts.seq_len, "--seq-len", "a DeepSpeed config does not state the "
                                                      "sequence length")
    model = (found.run(given_model, opts) if opts.model or opts.params else
             _need(found, None, "--model", "a DeepSpeed config does not describe the model"))
    hw = found.run(_hardware, opts, notes)
    keys = found.run(_batch_keys, o, opts, notes)
    state = found.run(_precision, o, opts, notes)
    found.check()
    # found.check() raised if any of these failed to read: each is present from here on
    assert model is not None and hw is not None and keys is not None and state is not None
    tbs, mbs, gas = keys
    precision, precision_rule = state
    tp, pp, ep = opts.tp or 1, opts.pp or 1, opts.ep or 1
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
    stated = [k for k, v in (("train_batch_size", tbs), ("train_micro_batch_size_per_gpu", mbs),
                             ("gradient_accumulation_steps", gas)) if v is not None]
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
    _current_keys(data, rules, notes)
    off_opt = _device(zo.sub("offload_optimizer"))
    off_par = _device(zo.sub("offload_param"))
    rules.append(precision_rule)

    opt_type = (o.sub("optimizer").str("type") or "adam").lower()
    optimizer = DS_OPTIMIZERS.get(opt_type, "adam")
    if opt_type not in DS_OPTIMIZERS:
        notes.append(f"optimizer {opt_type!r} counted as Adam (two fp32 moments)")
    recompute: Recompute = "full" if "activation_checkpointing" in data else "none"
    if opts.recompute is not None:
        if opts.recompute != recompute:
            notes.append(f"--recompute {opts.recompute} overrides "
                         f"{'activation_checkpointing' if recompute == 'full' else 'no activation_checkpointing'}"
                         f" ({recompute}; the flag wins)")
        recompute = cast(Recompute, opts.recompute)   # the CLI's choice (none, selective, full)
    elif recompute == "full":
        notes.append("activation_checkpointing present: assuming full recompute of every layer "
                     "(the block configures deepspeed.checkpointing; the model code switches it on)")
    layout = Layout(tp=tp, pp=pp, dp=dp, ep=ep, zero=stage, micro_batch=max(1, mbs),
                    recompute=recompute, offload_optimizer=off_opt, offload_params=off_par,
                    precision=precision, optimizer=optimizer)
    return Job(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq_len,
               global_batch=max(1, tbs), keys=config_keys("deepspeed", layout),
               rules=rules, notes=notes)


# The DeepSpeed release the writer targets, and the keys it rejects before parsing anything else
# (_reject_removed_config_keys, deepspeed/runtime/config.py:80-141 of 0.19.8; issue #8489, PR
# #8490): MiCS hybrid sharding went in 0.19.7, with nothing in its place.
DEEPSPEED_TARGET = "DeepSpeed 0.19.8"
REMOVED_TOP = ("nebula", "compression_training", "quantize_training", "sparse_attention", "amp",
               "sparse_gradients", "eigenvalue", "elasticity", "graph_harvesting",
               "curriculum_learning", "progressive_layer_drop")
REMOVED_ZERO = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")


def _current_keys(data: Any, rules: list[GateRule], notes: list[str]) -> None:
    """A key DeepSpeed 0.19.8 rejects fails the check (DeepSpeedConfigError at startup); ZeRO++
    hpZ is read for what it is: ZeRO-3 sharded over the whole data-parallel group, plus a
    secondary bf16 copy of 2·N/hpz bytes per GPU (partition_parameters.py:1118-1130), not a
    hybrid shard."""
    zo = data.get("zero_optimization") if isinstance(data, dict) else None
    zo = zo if isinstance(zo, dict) else {}
    gone = [k for k in REMOVED_TOP if k in data] + [f"zero_optimization.{k}" for k in REMOVED_ZERO
                                                   if k in zo]
    for key in gone:
        rules.append(make_rule("ds-removed-key", False, key, f"not in {DEEPSPEED_TARGET}",
                               f"DeepSpeed ≥ 0.19.7/0.19.8 rejects {key} (removed, issue #8489); "
                               "MiCS hybrid sharding has no successor", key=key))
    hpz = zo.get("zero_hpz_partition_size")
    if isinstance(hpz, int) and hpz > 1:
        notes.append(f"zero_hpz_partition_size {hpz} (ZeRO++ hpZ): parameters, gradients and "
                     "optimizer states stay sharded over the whole data-parallel group, with a "
                     f"secondary bf16 copy of 2·N/{hpz} bytes per GPU that dtplan does not price; "
                     "it is not hybrid sharding")


# Each batch key, the check option that states it, and what the HF Trainer fills "auto" with
# (transformers integrations/deepspeed.py trainer_config_process: per_device_train_batch_size,
# gradient_accumulation_steps, world_size × both).
BATCH_KEYS = (("train_batch_size", "--global-batch", "global_batch"),
              ("train_micro_batch_size_per_gpu", "--micro-batch", "micro_batch"),
              ("gradient_accumulation_steps", None, None))


def _batch_keys(o: _Obj, opts: CheckOptions, notes: list[str]) -> tuple[Any, Any, Any]:
    """(train_batch_size, micro-batch, accumulation) as stated, None where DeepSpeed infers it;
    a flag replaces the key (the flag wins) and fills "auto"; "auto" without its flag is an
    error naming the flag (the accumulation's "auto" is the Trainer's default 1)."""
    found = Problems()
    out = []
    for key, flag, attr in BATCH_KEYS:
        raw = o.data.get(key)
        value = None if raw == "auto" else o.int(key, high=MAX_GLOBAL_BATCH if attr ==
                                                 "global_batch" else MAX_GPUS)
        given = getattr(opts, attr) if attr else None
        if given is not None:
            said = ('fills "auto" of' if raw == "auto" else "sets" if value in (None, given)
                    else "overrides")
            notes.append(f"{flag} {given} {said} {key}" + (f" = {value} (the flag wins)"
                                                          if said == "overrides" else ""))
            value = given
        elif attr is None and opts.micro_batch is not None and opts.global_batch is not None:
            value = None   # both flags state the batch: DeepSpeed derives the accumulation
            if raw is not None:
                notes.append(f"{key} {raw!r} replaced by --global-batch ÷ (--micro-batch × DP) "
                             "(the flags win)")
        elif raw == "auto" and attr == "micro_batch":
            found.add(f"{o.where}: {key}", f'"auto" (filled by the HF Trainer from '
                      f'per_device_train_batch_size): pass {flag} N')
        elif raw == "auto" and attr == "global_batch":
            notes.append(f'{key}: "auto" → micro-batch × accumulation × DP, as the HF Trainer '
                         'fills it (or pass --global-batch N)')
        elif raw == "auto" and opts.global_batch is None:
            value = 1
            notes.append(f'{key}: "auto" → 1, the HF Trainer\'s default (pass --global-batch N '
                         'to state the batch and accumulate)')
        out.append(value)
    if out[0] is None and out[1] is None and not found.errors:
        found.add(f"{o.where}: train_batch_size", "DeepSpeed needs train_batch_size or "
                  "train_micro_batch_size_per_gpu (it asserts one of them is given); or pass "
                  "--micro-batch N / --global-batch N")
    found.check()
    return out[0], out[1], out[2]


def _precision(o: _Obj, opts: CheckOptions, notes: list[str]) -> tuple[str, GateRule]:
    """The precision from bf16/bfloat16/fp16 ``enabled`` (fp32 when none is on), with
    DeepSpeed's exclusivity rule; "auto" (the HF Trainer's --bf16/--fp16) needs --precision,
    and --precision replaces what the file says (the flag wins)."""
    state, autos = {}, []
    for key in ("bf16", "bfloat16", "fp16"):
        sub = o.sub(key)
        if sub.data.get("enabled") == "auto":
            autos.append(f"{key}.enabled")
            state[key] = False
        else:
            state[key] = sub.bool("enabled")
    bf16, fp16 = state["bf16"] or state["bfloat16"], state["fp16"]
    rule = make_rule("ds-precision-exclusive", not (bf16 and fp16),
                     f"bf16 {'on' if bf16 else 'off'}, fp16 {'on' if fp16 else 'off'}",
                     "not both", "bfloat16 and fp16 modes cannot be simultaneously enabled",
                     key="fp16" if "fp16" in o.data else "bf16")
    stated = "mixed" if (bf16 or fp16) else "fp32"
    if opts.precision is not None:
        if autos:
            notes.append(f"--precision {opts.precision} fills {', '.join(autos)}: \"auto\"")
        elif opts.precision != stated:
            notes.append(f"--precision {opts.precision} overrides the file's {stated} "
                         "(the flag wins)")
        return opts.precision, rule
    if autos:
        raise InputError(f"{o.where}: {autos[0]}", '"auto" (filled by the HF Trainer from --bf16 '
                         '/ --fp16): pass --precision mixed (bf16 or fp16) or --precision fp32')
    return stated, rule


def _device(o: _Obj) -> Offload:
    dev = o.str("device", "none") or "none"
    if dev not in ("none", "cpu", "nvme"):
        raise o.fail("device", f"must be none, cpu or nvme, got {dev!r}")
    return cast(Offload, dev)   # one of the three, checked above


# ---- writer -----------------------------------------------------------------------------------


def to_deepspeed(inp: Job) -> Export:
    """DeepSpeed JSON: all three batch keys consistent with DP = world ÷ (TP·PP) (§1.1, §1.4)."""
    lay, mod = inp.layout, inp.model
    if lay.cp > 1:
        raise _unsupported("deepspeed", f"context parallel (CP {lay.cp})",
                           "use --to megatron or torchtitan")
    if lay.pp > 1 and lay.zero >= 2:
        raise _unsupported("deepspeed", f"ZeRO-{lay.zero} with pipeline parallel (PP {lay.pp}): "
                           "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    if lay.shard_group:   # MiCS (mics_shard_size) was removed in 0.19.7; hpZ is not HSDP
        raise _unsupported("deepspeed", f"hybrid sharding (shard group {lay.shard_group}): "
                           f"{DEEPSPEED_TARGET} has none (MiCS was removed in 0.19.7; ZeRO++ hpZ "
                           "keeps the full data-parallel shard plus a secondary copy)",
                           "use --to megatron, torchtitan or accelerate, or plan without "
                           "shard_group")
    if lay.schedule != "1f1b" and lay.pp > 1:
        raise schedule_refusal("deepspeed", lay.schedule)
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
    for key, dev in (("offload_optimizer", lay.offload_optimizer), ("offload_param", lay.offload_params)):
        if dev != "none":
            block: dict[str, str | bool] = {"device": dev, "pin_memory": True}
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
             "--pp", str(lay.pp), *(["--ep", str(lay.ep)] if lay.ep > 1 else [])]
    notes.insert(0, f"written for {DEEPSPEED_TARGET} (its current keys; JSON has no comments)")
    return Export("deepspeed", json.dumps(cfg, indent=2) + "\n", notes, check)
