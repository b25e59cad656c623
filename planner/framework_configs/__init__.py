"""Engine configs, one module per engine with its reader and writer side by side, so the round trip
``dtplan export`` → ``dtplan check`` lives in one file: ``deepspeed`` (JSON), ``megatron``
(launch-script flags), ``torchtitan`` (0.3 command line or v0.2 job TOML; the writer in
``torchtitan_export``), ``accelerate`` (config YAML, writer only).

Each reader maps the engine's keys onto a Layout, batch and model, and applies the engine's own
assertions as rules whose ``key`` is the engine's spelling, so annotations point at the line.
Each writer states the layout in the engine's own keys and respects the engine's own rules, so
``dtplan check`` reads the export back to the same verdict. What an engine cannot express is
refused with one line naming it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.errors import InputError
from planner.framework_configs import peft
from planner.specs.finetune import Tuning
from planner.specs.framework import FrameworkProfile, framework_names, load_framework
from planner.specs.job import CheckOptions, Job
from planner.framework_configs.accelerate import to_accelerate
from planner.framework_configs.common import (ENGINES, TARGETS, Export, cli_model, detect,
                                              given_model, load_any)
from planner.framework_configs.deepspeed import read_deepspeed, to_deepspeed
from planner.framework_configs.megatron import read_megatron, to_megatron
from planner.framework_configs.megatron_args import parse_megatron_args
from planner.framework_configs.torchtitan import read_torchtitan, titan_cmdline
from planner.framework_configs.torchtitan_export import TITAN_DEFAULT, TITAN_VERSIONS, to_torchtitan


def read_engine(kind: str, where: str, text: str, data: Any, opts: CheckOptions) -> Job:
    """The Job an engine config states; its framework is the engine's own profile (each engine
    kind names one), part of the job so that the next file starts from nothing."""
    if kind == "deepspeed":
        job = read_deepspeed(where, data, opts)
    elif kind == "megatron":
        job = read_megatron(where, text, opts)
    elif kind == "torchtitan":
        job = read_torchtitan(where, titan_cmdline(text, where) if data is None else data, opts)
    else:
        raise InputError("--engine", f"must be one of {', '.join(ENGINES)}, got {kind!r}")
    if kind in framework_names() and job.framework is None:   # a reader may narrow its own
        job.framework = load_framework(kind)
    return _in_range(job, where)


def _in_range(job: Job, where: str) -> Job:
    """The layout an engine config implies, within each knob's range (specs.knobs ge/le): the
    readers bound what they read, but some degrees are derived (DeepSpeed's micro-batch is
    train_batch_size ÷ DP), and a plain Layout does not validate itself."""
    from planner.specs.knobs import KNOBS
    from planner.io.validate import within
    for k in KNOBS:
        x = getattr(job.layout, k.name, None)
        if type(x) is int:
            within(f"{where}: {k.name}", x, k.ge, k.le, fmt=",.0f",
                   got=f"{x:,} (what the config implies)")
    return job


WRITERS = {"deepspeed": to_deepspeed, "megatron": to_megatron, "torchtitan": to_torchtitan,
           "accelerate": to_accelerate}


def export(target: str, inp: Job, torchtitan_version: str = TITAN_DEFAULT) -> Export:
    """The engine config for ``inp`` (torchtitan: the release ``torchtitan_version`` runs)."""
    if target not in WRITERS:
        raise InputError("--to", f"must be one of {', '.join(TARGETS)}, got {target!r}")
    tuning = Tuning.of(inp.layout)
    peft.refuse(target, tuning)
    written = to_torchtitan(inp, torchtitan_version) if target == "torchtitan" \
        else WRITERS[target](inp)
    if tuning.frozen:
        written.notes.append(peft.peft_note(tuning))
    return written


def as_run(inp: Job, fw: FrameworkProfile) -> Job:
    """The job as the target framework runs what its config says: a ZeRO stage the framework
    does not implement becomes the next one it does, as the writers write it (FSDP has no
    ZeRO-1: SHARD_GRAD_OP, common._sharding), so the export is judged as `dtplan check` of the
    written file judges it."""
    lay = inp.layout
    up = min((z for z in fw.time.zero_stages if z > lay.zero), default=None)
    if lay.dp * lay.cp == 1 or lay.zero in fw.time.zero_stages or up is None:
        return inp
    return replace(inp, layout=replace(lay, zero=up), framework=fw)


__all__ = ["ENGINES", "TARGETS", "TITAN_DEFAULT", "TITAN_VERSIONS", "Export", "as_run", "cli_model",
           "detect", "export", "given_model", "load_any",
           "parse_megatron_args", "read_engine"]
