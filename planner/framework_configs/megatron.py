"""Megatron-LM: the reader (a launch script or args file checked with ``validate_args``' assertions)
and the writer (a torchrun launch fragment with Megatron-LM's flags), side by side.

Sources: Megatron-LM ``megatron/training/arguments.py::validate_args`` at
core_v0.15.3, ``num_microbatches_calculator.py``, ``transformer_config.py``.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import cast

from planner.errors import InputError, Problems, keyed, validation_message
from planner.evaluation.candidates import usable_recipe
from planner.io.lines import at_line
from planner.specs.finetune import fp8_recipe
from planner.specs.job import CheckOptions, Job
from planner.specs.knobs import Fp8Recipe, Layout, Recompute
from planner.specs.model import ModelSpec, validate_model
from planner.evaluation.rules import config_keys
from planner.specs.verdict import GateRule, make_rule
from planner.framework_configs.common import Export, _accumulation, _hardware, _need, _stage_layers, _unsupported, given_model, schedule_refusal, torchrun_lines
from planner.evaluation.error_band import generation
from planner.framework_configs.megatron_args import (MEGATRON_TARGET, _megatron_model, _overrides, _shard_group,
                                                     connections_line, launch_rules,
                                                     parse_megatron_args, per_chunk_recompute)
from planner.framework_configs.megatron_moe import (dispatcher_flags, ep_overlap_flags,
                                                    ep_overlap_rule, expert_rules, job_framework)
from planner.framework_configs.megatron_pipeline import (group_flags, group_rule, pipeline_flags,
                                                         read_pipeline)


# ---- reader -----------------------------------------------------------------------------------
def read_megatron(where: str, text: str, opts: CheckOptions) -> Job:
    """A Megatron-LM launch script or args file, checked with validate_args' assertions (§2.2)."""
    notes: list[str] = []
    a = parse_megatron_args(text, where, notes)
    rules: list[GateRule] = []
    tp = a.get("--tensor-model-parallel-size", 1)
    pp = a.get("--pipeline-model-parallel-size", 1)
    cp = a.get("--context-parallel-size", 1)
    ep = a.get("--expert-model-parallel-size", 1)
    found = Problems()   # every missing input at once
    gpus = _gpus(a, opts, notes, found)
    hw = found.run(_hardware, opts, notes)
    model = found.run(_model, a, opts, where, rules)
    seq = _need(found, a.get("--seq-length") or opts.seq_len, "--seq-len",
                "the arguments give no --seq-length")
    notes += _overrides(a, opts)
    mbs = a.get("--micro-batch-size")
    if mbs is None:
        found.add(f"{where}: --micro-batch-size", "missing; Megatron-LM requires it (or pass "
                                                 "--micro-batch N)")
    found.check()   # raised had any of these failed to read: each is present from here on
    assert model is not None and hw is not None and gpus is not None and mbs is not None
    world_ok = gpus % (tp * pp * cp) == 0
    rules.append(make_rule("megatron-world-divisible", world_ok,
                           f"{gpus} % (TP {tp} × PP {pp} × CP {cp})", "= 0",
                           "world size is not divisible by total_model_size = TP·PP·CP "
                           "(validate_args)", key="--tensor-model-parallel-size"))
    dp = max(1, gpus // (tp * pp * cp))
    gbs = a.get("--global-batch-size", mbs * dp)
    if "--global-batch-size" not in a:
        notes.append(f"--global-batch-size not given: Megatron uses micro × DP = {gbs}")
    layers = model.layers

    chunks, first, last = read_pipeline(a, layers, pp, where, rules)
    interleaved = chunks > 1
    rules.append(make_rule("megatron-global-batch", gbs % (mbs * dp) == 0 and gbs >= mbs * dp,
                           f"{gbs} % ({mbs} × DP {dp})", "= 0", "global batch size is not "
                           "divisible by micro batch size times data parallel size "
                           "(num_microbatches_calculator)", key="--global-batch-size"
                           if "--global-batch-size" in a else "--micro-batch-size"))
    if interleaved and gbs % (mbs * dp) == 0:
        rules.append(group_rule(a, pp, gbs // (mbs * dp), notes))
    rules.append(make_rule("megatron-heads-tp", model.heads % tp == 0,
                           f"{model.heads} heads % TP {tp}", "= 0",
                           "num_attention_heads must be a multiple of tensor_model_parallel_size",
                           key="--tensor-model-parallel-size"))
    kv = model.kv_heads
    kv_ok = kv % tp == 0
    rules.append(make_rule("megatron-query-groups-tp", kv_ok or tp % kv == 0,
                           f"{kv} query groups, TP {tp}", "multiple of TP (core_v0.15); "
                           "a divisor is accepted only after 2025-12", "num_query_groups must be "
                           "a multiple of tensor_model_parallel_size",
                           key="--num-query-groups" if "--num-query-groups" in a
                           else "--tensor-model-parallel-size", warn=tp % kv == 0))
    if "--kv-channels" not in a and "--hidden-size" in a:
        rules.append(make_rule("megatron-hidden-heads", a["--hidden-size"] % a.get(
            "--num-attention-heads", 1) == 0, f"{a['--hidden-size']} % {a.get('--num-attention-heads')}",
            "= 0", "hidden_size must be divisible by num_attention_heads without --kv-channels",
            key="--hidden-size"))
    if cp > 1:
        rules.append(make_rule("megatron-cp-seq", seq % (2 * cp) == 0, f"seq {seq} % (2 × CP {cp})",
                               "= 0", "seq-length should be a multiple of 2 * "
                               "context-parallel-size", key="--context-parallel-size"))
    sp = bool(a.get("--sequence-parallel"))
    if sp:
        rules.append(make_rule("megatron-sp-needs-tp", tp > 1, f"TP {tp}", "> 1",
                               "--sequence-parallel with TP = 1 is silently switched off",
                               key="--sequence-parallel", warn=True))
    max_pos = a.get("--max-position-embeddings")
    if max_pos is not None:
        rules.append(make_rule("megatron-positions", max_pos >= seq,
                               f"max_position_embeddings {max_pos}", f"≥ seq {seq}",
                               "max_position_embeddings must be >= seq_length",
                               key="--max-position-embeddings"))
    etp = expert_rules(a, model.experts, gpus, rules)

    gran = a.get("--recompute-granularity") or ("selective" if a.get("--recompute-activations")
                                                else None)
    method = a.get("--recompute-method")
    rec_layers = None
    if gran not in (None, "full", "selective"):
        raise InputError(f"{where}: --recompute-granularity", f"must be full or selective, got "
                                                               f"{gran!r}")
    if gran == "selective":
        rules.append(make_rule("megatron-recompute", method is None, f"method {method}",
                               "none with selective", "recompute method is not yet supported "
                               "for selective recomputing granularity", key="--recompute-method"))
    elif gran == "full":
        n = a.get("--recompute-num-layers")
        per_rank = max(1, layers // (pp * chunks))
        ok = method in ("block", "uniform") and n is not None and 1 <= n <= per_rank
        rules.append(make_rule("megatron-recompute", ok, f"method {method}, num_layers {n}",
                               f"block|uniform and 1..{per_rank}", "full recompute needs "
                               "--recompute-method block|uniform and --recompute-num-layers "
                               "between 1 and the layers per pipeline rank",
                               key="--recompute-granularity"))
        if method == "block" and n is not None:   # n per model chunk: v·n per stage
            rec_layers = min(n, per_rank) * chunks
    if a.get("--distribute-saved-activations"):
        rules.append(make_rule("megatron-distribute-saved", tp > 1 and gran == "full" and not sp,
                               f"TP {tp}, granularity {gran}, SP {sp}", "TP > 1, full, no SP",
                               "--distribute-saved-activations needs TP > 1 and full recompute "
                               "and is incompatible with sequence parallel",
                               key="--distribute-saved-activations"))
    if a.get("--overlap-param-gather"):
        ok = bool(a.get("--use-distributed-optimizer") or a.get("--use-megatron-fsdp")) \
            and bool(a.get("--overlap-grad-reduce"))
        rules.append(make_rule("megatron-overlap-param-gather", ok, "--overlap-param-gather",
                               "needs the distributed optimizer and --overlap-grad-reduce",
                               "--overlap-param-gather requires --use-distributed-optimizer (or "
                               "Megatron-FSDP) and --overlap-grad-reduce",
                               key="--overlap-param-gather"))
    bf16, fp16 = bool(a.get("--bf16")), bool(a.get("--fp16"))
    rules.append(make_rule("megatron-precision-exclusive", not (bf16 and fp16),
                           f"--bf16 {bf16}, --fp16 {fp16}", "not both",
                           "--bf16 and --fp16 are mutually exclusive",
                           key="--fp16" if fp16 else "--bf16"))
    if a.get("--use-torch-fsdp2"):
        rules.append(make_rule("megatron-fsdp2", pp == 1 and ep == 1
                               and not a.get("--use-distributed-optimizer")
                               and bool(a.get("--untie-embeddings-and-output-weights"))
                               and not fp16, f"PP {pp}, EP {ep}", "PP 1, EP 1, untied, no "
                               "distributed optimizer, no fp16", "--use-torch-fsdp2 restrictions "
                               "(validate_args)", key="--use-torch-fsdp2"))

    launch_rules(a, tp, cp, hw is not None and generation(hw) in ("B200", "GB200"), rules)
    ep_overlap_rule(a, pp, interleaved, ep, gran, rules)
    zero = 1 if a.get("--use-distributed-optimizer") else 0
    shard = _shard_group(a, dp * cp, rules)
    strategy = a.get("--data-parallel-sharding-strategy")
    if (a.get("--use-megatron-fsdp") or a.get("--use-torch-fsdp2")):
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2,
                "optim_grads_params": 3}.get(strategy or "optim_grads_params", 3)
    # Megatron keeps fp32 main gradients by default (DESIGN.md: 18 bytes/param with Adam).
    precision = opts.precision or ("mixed-fp32-grads" if (bf16 or fp16) else "fp32")
    fp8 = _read_fp8(a, rules)
    if fp8 != "none" and opts.precision is None:
        precision = "fp8"
    optimizer = {"adam": "adam", "sgd": "sgd-momentum"}.get(a.get("--optimizer", "adam"), "adam")
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=mbs,
                    shard_group=shard if zero >= 1 else None, chunks=chunks, sp=sp,
                    first_stage_layers=first, last_stage_layers=last,
                    schedule="interleaved" if interleaved else "1f1b", recompute=cast(Recompute, gran or "none"),
                    recompute_layers=rec_layers, precision=precision, optimizer=optimizer,
                    fp8=fp8 if precision in ("mixed", "fp8") else "none")
    # a recipe the GPU cannot run, refused at the flag that named it (file:line)
    flag = ("--precision" if fp8 == "none" else at_line(where, "--fp8-recipe" if "--fp8-recipe"
                                                         in a else "--fp8-format", text))
    keyed(flag, usable_recipe, hw, precision, layout.fp8)
    fw = job_framework(a, where, notes)   # what the arguments switch on or state
    return Job(model=model, hardware=hw, gpus=gpus, layout=layout, seq_len=seq,
               global_batch=gbs, keys=config_keys("megatron", layout),
               rules=rules, notes=notes, framework=fw)


def _gpus(a: dict, opts: CheckOptions, notes: list[str], found: Problems) -> int | None:
    """--gpus, else torchrun's --nproc_per_node × --nnodes, else --world-size."""
    gpus = opts.gpus
    if gpus is None:
        per_node = a.get("--nproc_per_node") or a.get("--nproc-per-node")
        if per_node:
            gpus = per_node * a.get("--nnodes", 1)
            notes.append(f"GPU count from torchrun: {per_node} per node × {a.get('--nnodes', 1)} "
                         f"nodes = {gpus}")
        elif a.get("--world-size"):
            gpus = a["--world-size"]
    return _need(found, gpus, "--gpus", "the arguments do not state the GPU count (no torchrun "
                                        "--nproc_per_node/--nnodes)")


def _model(a: dict, opts: CheckOptions, where: str, rules: list[GateRule]) -> ModelSpec:
    """--model wins (with rules that the arguments' shape matches it); else the shape flags."""
    shape = _megatron_model(a, where)
    if opts.model or opts.params:
        model = given_model(opts)
        if shape:
            for flag, field_ in (("--num-layers", "layers"), ("--hidden-size", "hidden"),
                                 ("--num-attention-heads", "heads")):
                rules.append(make_rule(f"megatron-model-{field_}", a[flag] == getattr(model, field_),
                                       f"{flag} {a[flag]}", f"= {getattr(model, field_)} "
                                       f"({model.name})", f"the arguments' {field_} must match "
                                       "--model", key=flag))
        return _with_mtp(model, a)
    if not shape:
        raise InputError("--model", "the arguments do not give the model shape (--num-layers, "
                                    "--hidden-size, --num-attention-heads); pass --model")
    if shape["vocab"] is None:
        raise InputError("--model", "the arguments give no --vocab-size (Megatron takes it "
                                    "from the tokenizer); pass --model or add --vocab-size")
    try:
        return validate_model(shape)
    except Exception as e:
        raise InputError(f"{where}: model flags", validation_message(e)) from None


def _with_mtp(model: ModelSpec, a: dict) -> ModelSpec:
    """The model with the MTP modules the arguments build: Megatron builds --mtp-num-layers of
    them (core_v0.15.3 arguments.py:1666, default none), whatever the model was published with."""
    mtp = a.get("--mtp-num-layers") or 0
    return model if model.mtp_layers == mtp else dataclasses.replace(model, mtp_layers=mtp)


# ---- writer -----------------------------------------------------------------------------------
def to_megatron(inp: Job) -> Export:
    """A torchrun launch fragment with Megatron-LM's flags (§2.1), obeying validate_args (§2.2)."""
    _refuse_for_megatron(inp.layout, inp.model)
    notes: list[str] = []
    gas = _accumulation(inp)
    first, full, last = _stage_layers(inp)
    a = (_parallel_flags(inp, (first, full, last), notes) + _model_flags(inp)
         + _recipe_flags(inp.layout, full, notes))
    if inp.model.position == "rope":
        notes.append("--rotary-base is not in the model spec: add the model's (Llama 3: 500000)")
    return Export("megatron", _launch_script(inp, a, gas), notes, [])


def _refuse_for_megatron(lay: Layout, mod: ModelSpec) -> None:
    """What Megatron-LM cannot run: offload, GPipe/ZB-H1/DualPipe(V), ALiBi."""
    if lay.offload_optimizer != "none" or lay.offload_params != "none":
        raise _unsupported("megatron", "ZeRO-Offload", "use --to deepspeed")
    if lay.schedule not in ("1f1b", "interleaved") and lay.pp > 1:
        raise schedule_refusal("megatron", lay.schedule)
    if mod.position == "alibi":
        raise _unsupported("megatron", "ALiBi position embeddings")
    if mod.mtp_layers and mod.position not in ("rope", "none"):   # arguments.py:1186-1191
        raise _unsupported("megatron", f"MTP modules with {mod.position} position embeddings "
                           "(Megatron's MTP runs with rope or none)")


def _parallel_flags(inp: Job, stage_layers: tuple[int, int, int],
                    notes: list[str]) -> list[tuple[str, object]]:
    """TP, PP (interleaved or uneven stages), SP, CP and the experts' flags."""
    lay, mod = inp.layout, inp.model
    a: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp),
        *pipeline_flags(lay, mod.layers, stage_layers, notes, mod.mtp_layers),
        *group_flags(lay, inp.global_batch // (lay.micro_batch * lay.dp))]
    if lay.sequence_parallel:
        a.append(("--sequence-parallel", None))
    if lay.cp > 1:
        a.append(("--context-parallel-size", lay.cp))
    if mod.is_moe:
        a += [("--num-experts", mod.experts), ("--moe-router-topk", mod.experts_per_token),
              ("--expert-model-parallel-size", lay.ep),
              *([("--expert-tensor-parallel-size", lay.etp)] if lay.etp is not None else []),
              ("--moe-ffn-hidden-size", mod.expert_width),
              *dispatcher_flags(inp), ("--moe-grouped-gemm", None)]
        a += ep_overlap_flags(inp)   # where dtplan prices the pairing
        if mod.shared_experts:
            a.append(("--moe-shared-expert-intermediate-size", mod.shared_experts * mod.expert_width))
        if mod.dense_layers:
            notes.append(f"the first {mod.dense_layers} layers are dense: set --moe-layer-freq "
                         "accordingly")
    elif lay.ep > 1:
        raise InputError("--to", f"EP {lay.ep} needs a mixture-of-experts model")
    return a


def _model_flags(inp: Job) -> list[tuple[str, object]]:
    """Batch, sequence and the architecture (GQA, SwiGLU, norm, positions, biases, dropout)."""
    lay, mod = inp.layout, inp.model
    a: list[tuple[str, object]] = [
        ("--micro-batch-size", lay.micro_batch), ("--global-batch-size", inp.global_batch),
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
    if mod.mtp_layers:   # core_v0.15.3 arguments.py:1666: D sequential MTP modules
        a.append(("--mtp-num-layers", mod.mtp_layers))
    return a


# --fp8-recipe's choices (core_v0.15.3 arguments.py:1318-1321; its default is delayed)
MEGATRON_FP8 = ("tensorwise", "delayed", "mxfp8", "blockwise")


def _read_fp8(a: dict, rules: list[GateRule]) -> Fp8Recipe:
    """The fp8 recipe a Megatron command line runs: none without --fp8-format, else its
    --fp8-recipe (delayed when absent, Megatron's default); a recipe argparse refuses fails."""
    if not a.get("--fp8-format"):
        return "none"
    recipe = str(a.get("--fp8-recipe", "delayed"))
    rules.append(make_rule("megatron-fp8-recipe", recipe in MEGATRON_FP8, f"--fp8-recipe {recipe}",
                           ", ".join(MEGATRON_FP8), "--fp8-recipe must be one of "
                           + ", ".join(MEGATRON_FP8), key="--fp8-recipe"))
    return cast(Fp8Recipe, recipe) if recipe in MEGATRON_FP8 else "none"


def _recipe_flags(lay: Layout, full: int, notes: list[str]) -> list[tuple[str, object]]:
    """Recompute, ZeRO (distributed optimizer / Megatron FSDP), precision and optimizer."""
    a: list[tuple[str, object]] = []
    if lay.recompute == "selective":
        a.append(("--recompute-activations", None))
    elif lay.recompute == "full":
        if lay.recompute_layers is None:
            a += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
        else:   # Megatron counts block recompute per model chunk (transformer_block.py:389-500)
            a += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                  ("--recompute-num-layers", per_chunk_recompute(lay, full))]
    if lay.zero == 1:
        a += [("--use-distributed-optimizer", None), ("--overlap-grad-reduce", None),
              ("--overlap-param-gather", None)]
    elif lay.zero >= 2:   # Megatron-FSDP: validate_args requires the fsdp_dtensor format
        a += [("--use-megatron-fsdp", None),
              ("--data-parallel-sharding-strategy", "optim_grads" if lay.zero == 2
               else "optim_grads_params"), ("--ckpt-format", "fsdp_dtensor")]
    if lay.shard_group and lay.zero >= 1:   # hybrid sharding: replicas of a sharded group
        if (lay.dp * lay.cp) % lay.shard_group:   # parallel_state.py:792: DP·CP % R == 0
            raise _unsupported("megatron", f"shard group {lay.shard_group} in DP·CP {lay.dp * lay.cp}")
        a.append(("--num-distributed-optimizer-instances", lay.dp * lay.cp // lay.shard_group))
    if lay.precision in ("mixed", "mixed-fp32-grads", "bf16-pure", "fp8"):
        a.append(("--bf16", None))
    recipe = fp8_recipe(lay.precision, lay.fp8)
    if recipe != "none":
        if recipe not in MEGATRON_FP8:
            raise _unsupported("megatron", f"the {recipe} fp8 recipe", f"{MEGATRON_TARGET}'s "
                               f"--fp8-recipe is one of {', '.join(MEGATRON_FP8)}")
        a += [("--fp8-format", "hybrid"), ("--fp8-recipe", recipe)]
    if lay.precision in ("mixed", "bf16-pure"):
        notes.append("Megatron keeps fp32 main gradients (18 bytes/param with Adam); "
                     "dtplan check counts that recipe")
    if lay.optimizer in ("sgd", "sgd-momentum"):
        a.append(("--optimizer", "sgd"))
    elif lay.optimizer not in ("adam", "adamw"):
        notes.append(f"optimizer {lay.optimizer}: Megatron's own optimizers are adam and sgd")
    return a


def _launch_script(inp: Job, a: list[tuple[str, object]], gas: int) -> str:
    """The torchrun command over the nodes, one flag a line."""
    lay, mod, hw = inp.layout, inp.model, inp.hardware
    lines = ["#!/bin/bash",
             f"# dtplan export for {MEGATRON_TARGET}: {mod.name or 'model'} on "
             f"{inp.gpus} x {hw.name}",
             f"# TP {lay.tp} x PP {lay.pp} x CP {lay.cp} x DP {lay.dp}; "
             f"global batch {inp.global_batch} = micro {lay.micro_batch} x accumulation {gas} x DP {lay.dp}",
             "# Add the data, tokenizer, optimizer-schedule and checkpoint flags of your run.",
             connections_line(lay, generation(hw) in ("B200", "GB200")), "",
             *torchrun_lines(inp, "pretrain_gpt.py")]
    flags = [f"  {k}" + ("" if v is None else f" {shlex.quote(str(v))}") for k, v in a]
    lines += [f + " \\" for f in flags[:-1]] + [flags[-1]]
    return "\n".join(lines) + "\n"
