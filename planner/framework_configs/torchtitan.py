"""torchtitan v0.2.x job TOML: the reader (parallel_dims / train.py / parallelize rules) and the writer
(a job TOML consistent with them), side by side.

Sources (ECOSYSTEM.md §3): v0.2.2 ``job_config.py``, ``parallel_dims.py::_validate``, ``train.py``,
``parallelize.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from planner.io.validate import MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from planner.errors import InputError, Problems
from planner.specs.job import CheckOptions, Job
from planner.specs.knobs import Layout, Offload, Recompute, Schedule
from planner.evaluation.rules import config_keys
from planner.specs.model import ModelSpec
from planner.specs.verdict import GateRule, make_rule
from planner.framework_configs.common import (Export, _Obj, _accumulation, _bf16, _hardware, _need, _sharding,
                     _stage_layers, _unsupported, cli_model)


# ---- reader -----------------------------------------------------------------------------------
# torchtitan's llama3 flavors are the Llama 3.1 shapes (torchtitan/models/llama3/__init__.py).
TITAN_FLAVORS = {("llama3", "8b"): "llama3.1-8b", ("llama3", "70b"): "llama3.1-70b",
                 ("llama3", "405b"): "llama3.1-405b"}
TITAN_SINGLE: dict[str, Schedule] = {"1f1b": "1f1b", "gpipe": "gpipe"}
TITAN_MULTI = {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble",
               "dualpipev", "pipelineschedulemulti"}
TITAN_AC: dict[str, Recompute] = {"none": "none", "selective": "selective", "full": "full", "memory_budget": "selective"}


def read_torchtitan(where: str, data: Any, opts: CheckOptions) -> Job:
    """A torchtitan v0.2.x job TOML, with parallel_dims / train.py / parallelize rules (§3.1)."""
    notes: list[str] = []
    rules: list[GateRule] = []
    data = _overridden(data, opts, notes) if isinstance(data, dict) else data
    o = _Obj(where, data)
    par, tr, ac, mo = o.sub("parallelism"), o.sub("training"), o.sub("activation_checkpoint"), \
        o.sub("model")
    found = Problems()   # every missing input at once
    gpus = _need(found, opts.gpus, "--gpus", "a torchtitan config does not state the GPU count "
                                             "(WORLD_SIZE)")
    hw = found.run(_hardware, opts, notes)
    model = found.run(_model, mo, opts, notes)
    found.check()
    # found.check() raised if any of these failed to read: each is present from here on
    assert model is not None and hw is not None
    rep = par.int("data_parallel_replicate_degree", 1)
    shard = par.int("data_parallel_shard_degree", -1, low=-1)
    if shard == 0 or shard < -1:
        raise par.fail("data_parallel_shard_degree", f"must be -1 or >= 1, got {shard}")
    tp = par.int("tensor_parallel_degree", 1)
    pp = par.int("pipeline_parallel_degree", 1)
    cp = par.int("context_parallel_degree", 1)
    ep = par.int("expert_parallel_degree", 1)
    etp = par.int("expert_tensor_parallel_degree", 1)
    if shard == -1:
        shard = max(1, gpus // (rep * cp * tp * pp))
        notes.append(f"data_parallel_shard_degree = -1 → WORLD ÷ (replicate·cp·tp·pp) = {shard}")
    world = rep * shard * cp * tp * pp
    rules.append(make_rule("torchtitan-world-size", world == gpus,
                           f"{rep} × {shard} × {cp} × {tp} × {pp} = {world}", f"= {gpus}",
                           "Invalid parallel dims: dp_replicate * dp_shard * cp * tp * pp != "
                           "WORLD_SIZE", key="parallelism.data_parallel_shard_degree"))
    if ep > 1:
        rules.append(make_rule("torchtitan-etp", etp in (tp, 1), f"ETP {etp}, TP {tp}",
                               "ETP = TP or 1", "Currently we only support ETP=TP or ETP=1",
                               key="parallelism.expert_tensor_parallel_degree"))
    if rep > 1 and shard == 1:
        rules.append(make_rule("torchtitan-ddp-1d", tp == pp == cp == 1,
                               f"DDP with TP {tp}, PP {pp}, CP {cp}", "no other parallelism",
                               "DDP has not supported > 1D parallelism",
                               key="parallelism.data_parallel_replicate_degree"))
    local = tr.int("local_batch_size") or tr.int("batch_size", 8)
    if "local_batch_size" not in tr.data and "batch_size" not in tr.data:
        notes.append("training.local_batch_size not given: torchtitan's default 8")
    dp = rep * shard
    gbs = tr.int("global_batch_size", -1, low=-1, high=MAX_GLOBAL_BATCH)
    if gbs == -1:
        gbs = local * dp
    elif gbs < 1:
        raise tr.fail("global_batch_size", f"must be -1 or >= 1, got {gbs}")
    rules.append(make_rule("torchtitan-global-batch", gbs % (local * dp) == 0,
                           f"{gbs} % (local {local} × dp {dp})", "= 0",
                           "global_batch_size % (local_batch_size * dp_replicate * dp_shard) "
                           "must be 0 (train.py)", key="training.global_batch_size"
                           if "global_batch_size" in tr.data else "training.local_batch_size"))
    seq = tr.int("seq_len", 2048, high=MAX_SEQ_LEN)
    if opts.seq_len and opts.seq_len != seq:
        raise InputError("--seq-len", f"{opts.seq_len} conflicts with training.seq_len = {seq}")
    # parallelize.py asserts it for every job (the divisor is 2 when tp = cp = 1)
    rules.append(make_rule("torchtitan-seq-divisor", seq % (tp * 2 * cp) == 0,
                           f"seq_len {seq} % (TP {tp} × 2 × CP {cp})", "= 0",
                           "seq_len must divide by tp·2·cp (ParallelDims.seq_len_divisor)",
                           key="training.seq_len"))
    schedule_name = par.str("pipeline_parallel_schedule", "1F1B")
    sched_key = schedule_name.lower()
    pp_mb = par.int("pipeline_parallel_microbatch_size", 1)
    chunks = 1
    schedule: Schedule = "1f1b"
    if pp > 1:
        if sched_key in TITAN_SINGLE:
            schedule = TITAN_SINGLE[sched_key]
        elif sched_key in TITAN_MULTI:
            schedule = "interleaved"
            lps = par.int("pipeline_parallel_layers_per_stage")
            if lps:
                first = par.int("pipeline_parallel_first_stage_less_layers", 1, low=0)
                last = par.int("pipeline_parallel_last_stage_less_layers", 1, low=0)
                stages = -(-(model.layers + first + last) // lps)
                rules.append(make_rule("torchtitan-pp-stages", stages % pp == 0 and stages >= 2 * pp,
                                       f"{stages} virtual stages, PP {pp}",
                                       "multiple of PP, ≥ 2 per rank",
                                       "multi-stage schedules need ≥ 2 stages per rank and the "
                                       "stage count divisible by PP",
                                       key="parallelism.pipeline_parallel_layers_per_stage"))
                chunks = max(2, stages // pp)
            else:
                chunks = 2
                notes.append(f"{schedule_name}: assuming 2 stages per rank (set "
                             "pipeline_parallel_layers_per_stage to say otherwise)")
        else:
            raise par.fail("pipeline_parallel_schedule", f"Unknown schedule name "
                           f"{schedule_name!r}; known: 1F1B, GPipe, Interleaved1F1B, LoopedBFS, "
                           "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV")
        rules.append(make_rule("torchtitan-pp-microbatch", local % pp_mb == 0,
                               f"local_batch_size {local} % microbatch {pp_mb}", "= 0",
                               "Batch size must be divisible by microbatch_size",
                               key="parallelism.pipeline_parallel_microbatch_size"))
        n_mb = local // pp_mb
        rules.append(make_rule("torchtitan-pp-enough-microbatches", n_mb >= pp * chunks,
                               f"{n_mb} micro-batches", f"≥ PP × stages/rank = {pp * chunks}",
                               "fewer micro-batches than pipeline stages leaves stages idle "
                               "(torchtitan logs a warning)", key="training.local_batch_size",
                               warn=True))
        micro = pp_mb
    else:
        micro = local
    mode = ac.str("mode", "selective")
    if mode not in TITAN_AC:
        raise ac.fail("mode", f"must be selective, full, memory_budget or none, got {mode!r}")
    if mode == "memory_budget":
        notes.append("activation_checkpoint.mode memory_budget counted as selective recompute")
    reshard = par.str("fsdp_reshard_after_forward", "default")
    if shard > 1:
        after_fwd = {"always": True, "never": False}.get(reshard, pp == 1)
        zero = 3 if after_fwd else 2
    else:
        zero = 0
    mp = tr.str("mixed_precision_param", "bfloat16")
    precision = opts.precision or ("fp32" if mp == "float32" else "mixed")
    offload: Offload = "cpu" if tr.bool("enable_cpu_offload") else "none"
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero,
                    shard_group=shard if (rep > 1 and shard > 1) else None, micro_batch=micro,
                    schedule=schedule, chunks=chunks, sp=tp > 1, recompute=TITAN_AC[mode],
                    offload_optimizer=offload if zero else "none",
                    offload_params=offload if zero >= 3 else "none", precision=precision,
                    optimizer="adamw")
    return Job(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq,
               global_batch=gbs, keys=config_keys("torchtitan", layout),
               rules=rules, notes=notes)


def _model(mo: _Obj, opts: CheckOptions, notes: list[str]) -> ModelSpec:
    """--model wins; else [model] name and flavor as torchtitan's llama3 presets."""
    if opts.model:
        return cli_model(opts.model)
    raw_name, raw_flavor = mo.str("name") or "", mo.str("flavor") or ""
    name, flavor = raw_name.lower(), raw_flavor.lower()
    preset = TITAN_FLAVORS.get((name, flavor))
    if preset is None:   # named by the key, as written (the lookup alone ignores case)
        raise mo.fail("flavor", f"{raw_flavor!r} of model {raw_name or '?'!r} is not a known "
                                "torchtitan shape; pass --model")
    from planner.specs.presets import get_preset
    notes.append(f"[model] {name} {flavor} read as the {preset} preset")
    return get_preset(preset)


def _overridden(data: dict, opts: CheckOptions, notes: list[str]) -> dict:
    """The job TOML with check's flags in place of its keys (the flag wins; a note for each):
    --micro-batch is the pipeline micro-batch under PP, else training.local_batch_size."""
    pp = (data.get("parallelism") or {}).get("pipeline_parallel_degree", 1) \
        if isinstance(data.get("parallelism"), dict) else 1
    moves = (("--micro-batch", opts.micro_batch, "parallelism" if pp != 1 else "training",
              "pipeline_parallel_microbatch_size" if pp != 1 else "local_batch_size"),
             ("--global-batch", opts.global_batch, "training", "global_batch_size"),
             ("--recompute", opts.recompute, "activation_checkpoint", "mode"))
    out = dict(data)
    for flag, value, table, key in moves:
        if value is None:
            continue
        section = dict(out.get(table) or {}) if isinstance(out.get(table) or {}, dict) else {}
        was = section.get(key)
        notes.append(f"{flag} {value} " + (f"overrides {table}.{key} = {was} (the flag wins)"
                                           if was not in (None, value) else f"sets {table}.{key}"))
        section[key] = value
        out[table] = section
    if opts.precision is not None:
        notes.append(f"--precision {opts.precision} replaces training.mixed_precision_param "
                     "(the flag wins)")
    return out


# ---- writer -----------------------------------------------------------------------------------


# torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py@v0.2.2), keyed by the model
# name with punctuation dropped ("Llama-3-70B" → "llama370b").
TITAN_MODELS = {"llama38b": ("llama3", "8B"), "llama3.18b": ("llama3", "8B"),
                "llama370b": ("llama3", "70B"), "llama3.170b": ("llama3", "70B"),
                "llama3.1405b": ("llama3", "405B")}


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def to_torchtitan(inp: Job) -> Export:
    """torchtitan v0.2.x job TOML (§3), consistent with parallel_dims / train.py rules (§3.1)."""
    lay, mod = inp.layout, inp.model
    gas = _accumulation(inp)
    rep, shard, reshard, notes = _sharding(inp, "torchtitan")
    if lay.offload_optimizer == "nvme" or lay.offload_params == "nvme":
        raise _unsupported("torchtitan", "offload to NVMe (FSDP offloads to CPU only)")
    if inp.seq_len % (lay.tp * 2 * lay.cp):
        raise _unsupported("torchtitan", f"seq_len {inp.seq_len} with TP {lay.tp} × CP {lay.cp}: "
                           "it must divide by tp·2·cp")
    if lay.expert_tp not in (lay.tp, 1):   # parallel_dims.py:35-59 (v0.2.2): ETP is TP or 1
        raise _unsupported("torchtitan", f"expert TP {lay.expert_tp} with TP {lay.tp} "
                           "(it runs ETP = TP or 1)")
    first, full, last = _stage_layers(inp)
    par: dict = {"data_parallel_replicate_degree": rep, "data_parallel_shard_degree": shard,
                 "fsdp_reshard_after_forward": "always" if reshard else "never",
                 "tensor_parallel_degree": lay.tp, "context_parallel_degree": lay.cp,
                 "expert_parallel_degree": lay.ep, "pipeline_parallel_degree": lay.pp}
    if lay.expert_tp != lay.tp:
        par["expert_tensor_parallel_degree"] = lay.expert_tp
    if lay.pp > 1:
        if lay.schedule == "zb-h1":   # torch.distributed.pipelining's zero-bubble ones are looped
            raise _unsupported("torchtitan", "ZB-H1 with one stage per rank")
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
    sections: list[tuple[str, dict[str, Any]]] = [
        ("job", {"description": f"dtplan export: {mod.name or 'model'} on {inp.gpus} GPUs"})]
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
