"""Megatron-LM CI golden values (`golden_values_*.json`) and the CI test's `model_config.yaml`.

The golden file is what Megatron's functional tests write from the TensorBoard scalars:
`{metric: {start_step, end_step, step_interval, values: {"<step>": number | "nan"}}}` with
`iteration-time` in seconds and `mem-*-bytes` in bytes (NVIDIA/Megatron-LM
tests/functional_tests). Steps a run did not reach are the string "nan" and are skipped.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from planner.evidence.model import Evidence, MemoryStats, StepStats
from planner.evidence.source import MAX_LOG_NUMBER, fail, load_json
from planner.evidence.stats import WARMUP_STEPS, spread, steady

CONFIG_KEYS = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp",
               "--expert-model-parallel-size": "ep", "--expert-tensor-parallel-size": "etp",
               "--num-layers-per-virtual-pipeline-stage": "layers_per_virtual_stage",
               "--micro-batch-size": "micro_batch_size", "--global-batch-size": "global_batch_size",
               "--seq-length": "seq_length", "--num-layers": "num_layers",
               "--hidden-size": "hidden_size", "--ffn-hidden-size": "ffn_hidden_size",
               "--num-attention-heads": "num_attention_heads",
               "--num-query-groups": "num_query_groups", "--num-experts": "num_experts",
               "--moe-router-topk": "moe_router_topk"}


def _line_of(text: str, metric: str, step: str | None = None) -> int:
    """The line of `"metric"` (and of `"step"` after it) in the JSON text, for error messages."""
    at = text.find(f'"{metric}"')
    if at < 0:
        return 1
    if step is not None:
        nxt = text.find(f'"{step}"', at)
        at = nxt if nxt >= 0 else at
    return text.count("\n", 0, at) + 1


def is_golden(data: Any) -> bool:
    return isinstance(data, dict) and bool(data) and all(
        isinstance(v, dict) and "values" in v for v in data.values())


def _series(path: Path, text: str, data: dict, metric: str) -> list[tuple[int, float]]:
    entry = data.get(metric)
    if entry is None:
        return []
    values = entry.get("values")
    if isinstance(values, list):  # older CI files: a list, one value every step_interval
        start, every = entry.get("start_step", 0), entry.get("step_interval", 1)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, every)):
            raise fail(path, _line_of(text, metric), f"{metric}: start_step and step_interval "
                       "must be integers")
        values = {str(start + i * every): v for i, v in enumerate(values)}
    if not isinstance(values, dict):
        raise fail(path, _line_of(text, metric), f"{metric}.values: expected an object or a list")
    out = []
    for step, v in values.items():
        if v == "nan" or (isinstance(v, float) and math.isnan(v)):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not step.isascii() \
                or not step.isdigit() or len(step) > 15:
            raise fail(path, _line_of(text, metric, step),
                       f"{metric}.values[{str(step)[:40]!r}]: expected a number or \"nan\", "
                       f"got {str(v)[:40]!r}")
        if not abs(v) <= MAX_LOG_NUMBER:
            raise fail(path, _line_of(text, metric, step), f"{metric}.values[{step!r}]: {v:g} "
                       f"is out of range (at most {MAX_LOG_NUMBER:g} in magnitude)")
        out.append((int(step), float(v)))
    return sorted(out)


def read_golden(path: Path, text: str, data: dict, warmup_steps: int = WARMUP_STEPS) -> Evidence:
    """Step time and memory from a golden-values file (one sampled step every interval)."""
    times = _series(path, text, data, "iteration-time")
    peak = _series(path, text, data, "mem-max-allocated-bytes")
    alloc = _series(path, text, data, "mem-allocated-bytes")
    if not (times or peak):
        raise fail(path, 1, "golden values without 'iteration-time' or 'mem-max-allocated-bytes'")
    kept, dropped = steady(times, warmup_steps, averaged=False)
    st = StepStats(steps_read=len(times), warmup_dropped=dropped, step_time_s=spread(kept))
    mem = None
    if peak or alloc:  # medians over the sampled steps: one outlier step is not the job's peak
        mem = MemoryStats(
            peak_allocated_bytes=statistics.median(v for _, v in peak) if peak else None,
            allocated_bytes=statistics.median(v for _, v in alloc) if alloc else None)
        if peak:
            mem.counters["max_over_steps_bytes"] = max(v for _, v in peak)
    ev = Evidence(path=str(path), kind="training-log", format="megatron-ci-golden", steps=st,
                  memory=mem)
    ev.notes.append("memory as logged by Megatron's TensorBoard writer (the last rank)")
    if dropped:
        ev.notes.append(f"dropped {dropped} warm-up step(s) (step ≤ {warmup_steps})")
    return ev


def is_ci_config(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("MODEL_ARGS"), dict)


def read_ci_config(path: Path, data: dict) -> Evidence:
    """The layout a Megatron CI test ran with (its MODEL_ARGS), to pair with golden values."""
    args = data["MODEL_ARGS"]
    cfg: dict[str, Any] = {}
    for flag, key in CONFIG_KEYS.items():
        v = args.get(flag)
        if isinstance(v, int) and not isinstance(v, bool):
            cfg[key] = v
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--bf16", "--fp16"):
        if args.get(flag) is True:
            cfg[flag.lstrip("-").replace("-", "_")] = True
    return Evidence(path=str(path), kind="job-config", format="megatron-ci-model-config",
                    config=cfg, notes=["a job configuration, not a measurement: pass it with "
                                       "the golden values it produced"])


def read_json_or_yaml(path: Path, raw: bytes) -> tuple[str, Any]:
    """Text and parsed content; a syntax error names its line. YAML (a CI model_config, a few
    kB) goes through the bounded parser of planner.inputs; JSON (golden values, memory
    timelines: up to millions of values) through source.load_json's depth and number bounds."""
    text = raw.decode("utf-8", errors="replace")
    if path.suffix.lower() not in (".yaml", ".yml"):
        return text, load_json(path, text)
    from planner.io.parse import parse_text
    return text, parse_text(text, "yaml", str(path))
