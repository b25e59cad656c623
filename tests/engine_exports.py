"""The exports the engine-parser tests load (tests/test_engine_parsers_*.py): every shipped
example plan and a set of layouts (ZeRO-1/2/3, hybrid sharding, TP/PP 1F1B and interleaved,
uneven stages, CP, EP, CPU offload, a full fine-tune on one GPU with offload, LoRA and QLoRA)
and fit's winner of five headline questions, each exported to each target in-process as `dtplan export` writes it: the same ``export()``,
and the same verdict under the target's framework profile (a file `export` writes only with
--allow-failing is marked so)."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from planner.errors import InputError
from planner.framework_configs import export
from planner.gate.check import evaluate_inputs
from planner.resolve.job import Flags
from planner.review.build import inputs_from_fit, inputs_from_plan
from planner.specs.framework import load_framework
from planner.specs.job import Job

ROOT = Path(__file__).resolve().parent.parent
PLANS = sorted((ROOT / "examples" / "plans").glob("*.yaml"))

_PLAN = """model: {model}
hardware: {hardware}
gpus: {gpus}
seq_len: {seq}
layout: {{{layout}}}
batch: {{global_batch: {batch}}}
"""
_8B = dict(model="llama3-8b", hardware="h100", gpus=64, seq=4096, batch=256)
_70B = dict(model="llama3-70b", hardware="h100", gpus=128, seq=8192, batch=512)
# name → plan fields; each line one layout family an expert exports
LAYOUTS: dict[str, dict[str, object]] = {
    "zero1-dp64": {**_8B, "layout": "tp: 1, pp: 1, zero: 1, micro_batch: 1"},
    "zero2-dp64": {**_8B, "layout": "tp: 1, pp: 1, zero: 2, micro_batch: 1, recompute: selective"},
    "zero3-dp64-full": {**_8B, "layout": "tp: 1, pp: 1, zero: 3, micro_batch: 2, "
                                         "recompute: full"},
    "zero3-hsdp8": {**_8B, "layout": "tp: 1, pp: 1, zero: 3, shard_group: 8, micro_batch: 1, "
                                     "recompute: full"},
    "tp2-zero3": {**_8B, "layout": "tp: 2, pp: 1, zero: 3, sp: true, micro_batch: 1, "
                                   "recompute: selective"},
    "tp8-pp2-1f1b": {**_70B, "layout": "tp: 8, pp: 2, zero: 1, sp: true, micro_batch: 1, "
                                       "recompute: full"},
    "tp8-pp2-interleaved": {**_70B, "layout": "tp: 8, pp: 2, zero: 1, sp: true, micro_batch: 1, "
                                              "recompute: full, recompute_layers: 8, "
                                              "schedule: interleaved, chunks: 2"},
    "tp8-pp3-uneven": {**_70B, "gpus": 96, "batch": 384,
                       "layout": "tp: 8, pp: 3, zero: 1, sp: true, micro_batch: 1, "
                                 "recompute: full"},
    "tp4-cp2": {**_8B, "seq": 32768, "batch": 64,
                "layout": "tp: 4, cp: 2, pp: 1, zero: 1, sp: true, micro_batch: 1, "
                          "recompute: full"},
    "zero3-hsdp-cp2": {**_8B, "seq": 32768, "batch": 64,
                       "layout": "tp: 1, cp: 2, pp: 1, zero: 3, shard_group: 16, micro_batch: 1, "
                                 "recompute: full"},
    "moe-ep8": {**_8B, "model": "mixtral-8x7b", "seq": 4096,
                "layout": "tp: 1, pp: 1, ep: 8, zero: 1, micro_batch: 1, recompute: full"},
    "zero3-cpu-offload": {**_8B, "gpus": 8, "seq": 4096, "batch": 64,
                          "layout": "tp: 1, pp: 1, zero: 3, micro_batch: 1, recompute: full, "
                                    "offload_optimizer: cpu, offload_params: cpu"},
    "zero2-cpu-offload-fp32": {**_8B, "gpus": 16, "seq": 4096, "batch": 64,
                               "layout": "tp: 1, pp: 1, zero: 2, micro_batch: 1, "
                                         "recompute: full, offload_optimizer: cpu, "
                                         "precision: fp32"},
    "full-ft-7b-1gpu-offload": {**_8B, "model": "llama2-7b", "hardware": "rtx4090", "gpus": 1,
                                "seq": 2048, "batch": 8,
                                "layout": "tp: 1, pp: 1, zero: 3, micro_batch: 1, "
                                          "recompute: full, offload_optimizer: cpu, "
                                          "offload_params: cpu"},
    "lora-8b-dp8": {**_8B, "gpus": 8, "seq": 4096, "batch": 64,
                    "layout": "tp: 1, pp: 1, zero: 2, micro_batch: 1, recompute: full, "
                              "finetune: lora, lora_rank: 16"},
}
TARGETS = ("deepspeed", "megatron", "torchtitan", "accelerate")
# fit's winner of five headline questions, each asked under the exporter's own framework
# (Accelerate runs PyTorch FSDP2), as `dtplan export QUESTION --framework F --to TARGET` does
HEADLINES: dict[str, dict[str, object]] = {
    "fit-readme-70b": dict(params="70e9", gpus=256),
    "fit-llama3-70b-8k": dict(model="llama3-70b", gpus=256, seq_len=8192),
    "fit-llama2-13b-a100": dict(model="llama2-13b", gpus=32, hardware="a100-80g"),
    "fit-llama3-8b": dict(model="llama3-8b", gpus=64),
    "fit-mixtral": dict(model="mixtral-8x7b", gpus=64)}
FRAMEWORK = {"deepspeed": "deepspeed", "megatron": "megatron", "torchtitan": "torchtitan",
             "accelerate": "fsdp"}


def names() -> list[str]:
    """Every export's name (cheap: for parametrising)."""
    return [p.stem for p in PLANS] + list(LAYOUTS) + list(HEADLINES)


def question(name: str) -> list[str]:
    """The headline question as command-line words."""
    return [w for k, x in HEADLINES[name].items()
            for w in (f"--{k.replace('_', '-')}", str(x))]


@functools.lru_cache(maxsize=None)
def headline(name: str, target: str) -> Job:
    """fit's winner of the question under the target's framework (as export computes it)."""
    fields = dict(HEADLINES[name])
    gpus = int(str(fields.pop("gpus")))
    flags = Flags(framework=FRAMEWORK[target], **{k: str(x) if k != "seq_len" else int(str(x))
                                                  for k, x in fields.items()})
    seq, batch, _ = flags.batch(gpus)
    job, _ = inputs_from_fit(flags.model_spec(), flags.hardware_profile(), gpus, seq_len=seq,
                             global_batch=batch, framework=flags.framework_profile())
    assert job is not None, f"{name}: nothing fits under {FRAMEWORK[target]}"
    return job


@dataclass(frozen=True)
class Written:
    """One export: the job it came from and the text written, or the one-line refusal."""
    name: str
    target: str
    job: Job
    text: str | None
    refusal: str | None
    failing: tuple[str, ...]   # rules failing under the target's framework (needs --allow-failing)


@functools.lru_cache(maxsize=None)
def jobs() -> tuple[tuple[str, Job], ...]:
    """(name, Job) for the shipped plans and the layout set."""
    out = [(p.stem, inputs_from_plan(str(p))) for p in PLANS]
    tmp = Path(tempfile.mkdtemp(prefix="dtplan-engine-exports-"))
    for name, fields in LAYOUTS.items():
        path = tmp / f"{name}.yaml"
        path.write_text(_PLAN.format(**fields))
        out.append((name, inputs_from_plan(str(path))))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def written(target: str, torchtitan_version: str = "0.3") -> tuple[Written, ...]:
    """Every job exported to ``target``, as `dtplan export --to target` writes it."""
    fw = load_framework(FRAMEWORK[target])
    out = []
    for name, job in [*jobs(), *((q, headline(q, target)) for q in HEADLINES)]:
        try:
            text, refusal = export(target, job, torchtitan_version).text, None
        except InputError as e:
            text, refusal = None, str(e)
        judged = replace(job, framework=fw)
        failing = tuple(r.name for r in evaluate_inputs(judged, name).rules
                        if r.status == "fail")
        out.append(Written(name, target, job, text, refusal, failing))
    return tuple(out)


def written_as_expected(target: str, name: str, refused: dict[str, str],
                        torchtitan_version: str = "0.3") -> Written | None:
    """The export of job `name` to `target`; None when the exporter refused it, which it must
    do for exactly the names in `refused`, with the reason `refused` gives."""
    w = next(x for x in written(target, torchtitan_version) if x.name == name)
    if w.text is None:
        assert name in refused and refused[name] in str(w.refusal), w.refusal
        return None
    assert name not in refused, f"{name} was written; the exporter refused it before"
    return w


def accumulation(job: Job) -> int:
    lay = job.layout
    return job.global_batch // (lay.micro_batch * lay.dp)
