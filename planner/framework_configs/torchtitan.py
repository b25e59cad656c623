"""torchtitan: the reader of a v0.2.x job TOML and of a 0.3 command line (``--module``/``--config``
and tyro overrides, read into the same tables), with each release's parallel_dims / trainer rules.
The writer is ``torchtitan_export``.

Sources (ECOSYSTEM.md §3): v0.2.2 ``job_config.py``, ``parallel_dims.py::_validate``, ``train.py``,
``parallelize.py``; 0.3.0 ``config/manager.py``, ``trainer.py``, ``distributed/parallel_dims.py``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from planner.io.validate import MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from planner.errors import InputError, Problems
from planner.specs.job import CheckOptions, Job
from planner.specs.knobs import Layout, Offload, Recompute, Schedule
from planner.evaluation.rules import config_keys
from planner.specs.model import ModelSpec
from planner.specs.verdict import GateRule, make_rule
from planner.framework_configs.common import _Obj, _hardware, _need, given_model
from planner.framework_configs.megatron_args import _shell_lines
from planner.framework_configs.torchtitan_export import TITAN_V03_PRESETS


# ---- reader -----------------------------------------------------------------------------------
# torchtitan's llama3 flavors are the Llama 3.1 shapes (torchtitan/models/llama3/__init__.py).
TITAN_FLAVORS = {("llama3", "8b"): "llama3.1-8b", ("llama3", "70b"): "llama3.1-70b",
                 ("llama3", "405b"): "llama3.1-405b"}
TITAN_SINGLE: dict[str, Schedule] = {"1f1b": "1f1b", "gpipe": "gpipe"}
TITAN_MULTI = {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble",
               "dualpipev", "pipelineschedulemulti"}
TITAN_AC: dict[str, Recompute] = {"none": "none", "selective": "selective", "full": "full", "memory_budget": "selective"}


def read_torchtitan(where: str, data: Any, opts: CheckOptions) -> Job:
    """A torchtitan v0.2.x job TOML, or a 0.3 command line read into the same tables
    (``titan_cmdline``), with that release's parallel_dims / trainer rules (§3.1)."""
    notes: list[str] = []
    rules: list[GateRule] = []
    release = data.pop(RELEASE, "0.2") if isinstance(data, dict) else "0.2"
    data = _overridden(data, opts, notes) if isinstance(data, dict) else data
    o = _Obj(where, data)
    par, tr, ac, mo = o.sub("parallelism"), o.sub("training"), o.sub("activation_checkpoint"), \
        o.sub("model")
    found = Problems()   # every missing input at once
    gpus = _need(found, opts.gpus, "--gpus", "a torchtitan config does not state the GPU count "
                                             "(WORLD_SIZE)")
    hw = found.run(_hardware, opts, notes)
    model = found.run(_model, mo, opts, notes, release)
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
    etp = _release_rules(release, o, (shard, tp, pp, cp, ep, etp), seq, rules)
    schedule_name = par.str("pipeline_parallel_schedule", "1F1B")
    sched_key = schedule_name.lower()
    pp_mb = par.int("pipeline_parallel_microbatch_size", 1)
    chunks = 1
    schedule: Schedule = "1f1b"
    if pp > 1:
        lps = par.int("pipeline_parallel_layers_per_stage")
        stages = 0
        if lps:
            first = par.int("pipeline_parallel_first_stage_less_layers", 1, low=0)
            last = par.int("pipeline_parallel_last_stage_less_layers", 1, low=0)
            stages = -(-(model.layers + first + last) // lps)
        if sched_key in TITAN_SINGLE:
            schedule = TITAN_SINGLE[sched_key]
        elif sched_key == "dualpipev":
            # a V: exactly two stages per rank (pipeline_parallel.py:552-557 at b5bcd76c)
            schedule = "dualpipev"
            if lps:
                rules.append(make_rule("torchtitan-pp-stages", stages == 2 * pp,
                                       f"{stages} virtual stages, PP {pp}", f"= 2 × PP = {2 * pp}",
                                       "V schedules assume 2 stages per rank",
                                       key="parallelism.pipeline_parallel_layers_per_stage"))
        elif sched_key in TITAN_MULTI:
            schedule = "interleaved"
            if lps:
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
    # the FSDP mesh is dp_shard × cp (parallel_dims.py build_mesh: CP ranks always shard the
    # states); the plan's shard group counts those DP·CP ranks
    fsdp = shard * cp
    if fsdp > 1:
        after_fwd = {"always": True, "never": False}.get(reshard, pp == 1)
        zero = 3 if after_fwd else 2
    else:
        zero = 0
    mp = tr.str("mixed_precision_param", "bfloat16")
    precision = opts.precision or ("fp32" if mp == "float32" else "mixed")
    offload: Offload = "cpu" if tr.bool("enable_cpu_offload") else "none"
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp if ep > 1 else None, zero=zero,
                    shard_group=fsdp if (rep > 1 and fsdp > 1) else None, micro_batch=micro,
                    schedule=schedule, chunks=chunks, sp=tp > 1, recompute=TITAN_AC[mode],
                    offload_optimizer=offload if zero else "none",
                    offload_params=offload if zero >= 3 else "none", precision=precision,
                    optimizer="adamw")
    return Job(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq,
               global_batch=gbs, keys=config_keys("torchtitan", layout),
               rules=rules, notes=notes)


def _release_rules(release: str, o: _Obj, dims: tuple[int, int, int, int, int, int], seq: int,
                   rules: list[GateRule]) -> int:
    """The rules that differ between releases; returns the expert TP the release runs.
    v0.2.2: ETP is TP or 1 (parallel_dims.py:35-59) and seq_len divides by tp·2·cp for every job
    (parallelize.py). 0.3.0: no ETP (EP borrows from dp_shard·cp·tp, so that product divides
    by EP: parallel_dims.py build_mesh), seq_len divides by (tp if SP)·(2·cp if cp > 1)
    (trainer.py), and PP or EP needs CUDA graphs off (trainer.py _validate_cuda_graphs)."""
    shard, tp, pp, cp, ep, etp = dims
    par, tr = o.sub("parallelism"), o.sub("training")
    if release == "0.2":
        if ep > 1:
            rules.append(make_rule("torchtitan-etp", etp in (tp, 1), f"ETP {etp}, TP {tp}",
                                   "ETP = TP or 1", "Currently we only support ETP=TP or ETP=1",
                                   key="parallelism.expert_tensor_parallel_degree"))
        rules.append(make_rule("torchtitan-seq-divisor", seq % (tp * 2 * cp) == 0,
                               f"seq_len {seq} % (TP {tp} × 2 × CP {cp})", "= 0",
                               "seq_len must divide by tp·2·cp (ParallelDims.seq_len_divisor)",
                               key="training.seq_len"))
        return etp
    sp = par.bool("enable_sequence_parallel", True)
    divisor = (tp if sp else 1) * (2 * cp if cp > 1 else 1)
    rules.append(make_rule("torchtitan-seq-divisor", seq % divisor == 0,
                           f"seq_len {seq} % {divisor}", "= 0", "seq_len must divide by "
                           "(tp if sequence parallel) · (2·cp if cp > 1) (trainer.py)",
                           key="training.seq_len"))
    if ep > 1:
        rules.append(make_rule("torchtitan-ep-borrows", (shard * cp * tp) % ep == 0,
                               f"dp_shard {shard} × CP {cp} × TP {tp} % EP {ep}", "= 0",
                               "EP borrows from dp_shard·cp·tp (parallel_dims.py build_mesh)",
                               key="parallelism.expert_parallel_degree"))
    rules.append(make_rule("torchtitan-cuda-graphs", (pp == 1 and ep == 1)
                           or tr.bool("disable_cuda_graphs"), f"PP {pp}, EP {ep}",
                           "--training.disable-cuda-graphs when PP or EP > 1",
                           "CUDA graphs do not support pipeline parallelism (or a synchronising "
                           "expert dispatch) yet. Set --training.disable_cuda_graphs.",
                           key="training.disable_cuda_graphs"))
    return 1


def _model(mo: _Obj, opts: CheckOptions, notes: list[str], release: str) -> ModelSpec:
    """--model wins; else [model] name and flavor as torchtitan's llama3 presets (v0.2), or
    --module/--config as torchtitan's config functions (0.3)."""
    from planner.specs.presets import get_preset
    if opts.model or opts.params:
        return given_model(opts)
    if release == "0.3":
        module, config = mo.str("module") or "", mo.str("config") or ""
        known = TITAN_V03_PRESETS.get((module, config))
        if known is None:
            raise mo.fail("config", f"{module!r} {config!r} is not a torchtitan 0.3 config "
                          "dtplan knows; pass --model")
        notes.append(f"--module {module} --config {config} read as the {known} preset")
        return get_preset(known)
    raw_name, raw_flavor = mo.str("name") or "", mo.str("flavor") or ""
    name, flavor = raw_name.lower(), raw_flavor.lower()
    preset = TITAN_FLAVORS.get((name, flavor))
    if preset is None:   # named by the key, as written (the lookup alone ignores case)
        raise mo.fail("flavor", f"{raw_flavor!r} of model {raw_name or '?'!r} is not a known "
                                "torchtitan shape; pass --model")
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


# ---- a torchtitan 0.3 command line ------------------------------------------------------------
RELEASE = "__release__"    # the key titan_cmdline adds: which release's rules apply
_INT = re.compile(r"^-?\d+$")


def titan_cmdline(text: str, where: str) -> dict[str, Any]:
    """A torchtitan 0.3 command line as the tables of its Trainer.Config: ``--table.key value``
    (dashes or underscores), tyro's ``--table.key`` / ``--table.no-key`` booleans, the
    ``activation-checkpoint:MODE`` subcommand, ``--module``/``--config`` as [model]. Everything
    before ``torchtitan.train`` (torchrun's own flags) is the launcher's."""
    tokens: list[str] = []
    for line in _shell_lines(text):
        try:
            tokens += shlex.split(line, comments=True)
        except ValueError as e:
            raise InputError(where, f"cannot split shell line ({e}): {line.strip()[:60]}") from None
    start = next((i + 1 for i, t in enumerate(tokens) if re.search(r"torchtitan[./]train", t)), 0)
    tables: dict[str, Any] = {RELEASE: "0.3"}
    i, tokens = 0, tokens[start:]
    while i < len(tokens):
        tok, i = tokens[i], i + 1
        if tok.startswith("activation-checkpoint:"):
            tables.setdefault("activation_checkpoint", {})["mode"] = \
                tok.split(":", 1)[1].replace("-", "_")
            continue
        if not tok.startswith("--"):
            continue
        name, eq, inline = tok[2:].partition("=")
        table, _, key = name.partition(".")
        has_value = eq or (i < len(tokens) and not tokens[i].startswith("--")
                           and ":" not in tokens[i])
        value: Any = inline if eq else tokens[i] if has_value else True
        i += 1 if has_value and not eq else 0
        if not key:   # --module / --config
            tables.setdefault("model", {})[table] = value
            continue
        key = key.replace("-", "_")
        if value is True and key.startswith("no_"):
            key, value = key[3:], False
        elif isinstance(value, str) and _INT.match(value):
            value = int(value)
        tables.setdefault(table.replace("-", "_"), {})[key] = value
    return tables
