"""CI verdicts: a plan (or an engine config read into one) → every rule, pass / fail / warn.

Rules come from four places, in this order:
1. ``estimate.estimate(...).rules``: the layout rules (world size, TP inside the NVLink domain,
   heads and KV heads vs TP, layers vs PP·v, interleaving, batch divisibility, sequence vs CP,
   experts vs EP, sharding, offload) and ``fits-in-memory`` (peak ≤ capacity minus margin);
2. the engine's own assertions when the input was a DeepSpeed / Megatron-LM / torchtitan file
   (``planner.engines``);
3. ``batch-accounting``: when the job states its accumulation steps a, the global batch must be
   exactly b × a × DP; TP, PP and CP ranks never multiply it (DESIGN.md "Batch");
4. one rule per threshold the plan sets, and ``checkpoint-interval`` when it has a checkpoint
   policy (waste δ/τ + τ/2M + R/M at the stated interval against Daly's optimum; the sizes,
   write cost and MTBF come from planner.resilience).

Each rule carries the key path it concerns (``layout.tp``, ``--pipeline-model-parallel-size``)
and that key's line in the file, so CI annotations land on the offending line.
The verdict JSON (``Verdict``) is versioned by ``schema_version``; see ``dtplan schema verdict``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, validation_message
from .specs.hardware import (DEFAULT_PROFILE, HardwareProfile, load_hardware, load_profile,
                             load_profile_file, with_overrides)
from .specs.layout import KNOBS, Layout, Rule
from .specs.model import ModelSpec
from .plan import safe_reference, validate_plan
from .plan_rules import batch_accounting_rule, checkpoint_figures, checkpoint_rules, threshold_rules
from .specs.plan import Plan
from .rules import config_keys
from .specs.job import CheckOptions, Inputs
from .verdict import FileVerdict, GateRule, Verdict, make_rule

MODEL_FIELDS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "mlp", "vocab",
                "tied_embeddings", "position", "max_positions", "qkv_bias", "linear_bias", "norm",
                "dropout", "experts", "experts_per_token", "expert_ffn", "shared_experts",
                "dense_layers")
# Inline shapes without a base default to the Llama layout (SwiGLU, RMSNorm, RoPE, untied).
INLINE_DEFAULTS = {"mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                   "tied_embeddings": False}


def resolve_model(section: Any, base_dir: Path, where: str) -> ModelSpec:
    from .hf_config import load_hf_config
    from .specs.presets import get_preset

    if isinstance(section, str):
        try:
            return get_preset(section)
        except InputError as e:
            raise InputError(f"{where}: model", e.message) from None
    if section.preset is not None and section.config is not None:
        raise InputError(f"{where}: model", "give preset or config, not both")
    inline = {k: getattr(section, k) for k in MODEL_FIELDS if getattr(section, k) is not None}
    if section.preset is not None:
        try:
            base = get_preset(section.preset).model_dump()
        except InputError as e:
            raise InputError(f"{where}: model.preset", e.message) from None
    elif section.config is not None:
        path = safe_reference(section.config, base_dir, f"{where}: model.config", "config.json")
        try:
            base = load_hf_config(path).model_dump()
        except InputError as e:
            raise InputError(f"{where}: model.config", e.message) from None
    else:
        base = {**INLINE_DEFAULTS, "source": "inline shape in the plan file"}
        missing = [k for k in ("layers", "hidden", "heads", "ffn", "vocab") if k not in inline]
        if missing:
            raise InputError(f"{where}: model", f"inline shape needs {', '.join(missing)} "
                                                "(or give preset: / config:)")
    if inline and (section.preset or section.config):
        base["source"] = f"{base.get('source', '')}; overridden in the plan: {', '.join(inline)}"
        if ("heads" in inline or "hidden" in inline) and "head_dim" not in inline:
            base.pop("head_dim", None)  # re-derived from the new hidden ÷ heads
    data = {**base, **inline}
    try:
        return ModelSpec.model_validate(data)
    except Exception as e:  # pydantic ValidationError from the model's own checks
        raise InputError(f"{where}: model", validation_message(e)) from None


def resolve_hardware(section: Any, base_dir: Path, where: str) -> HardwareProfile:
    if isinstance(section, str):
        try:
            return load_profile(section)
        except InputError as e:
            raise InputError(f"{where}: hardware", e.message) from None
    if section.profile is not None and section.file is not None:
        raise InputError(f"{where}: hardware", "give profile or file, not both")
    try:
        if section.file is not None:
            prof = load_profile_file(safe_reference(section.file, base_dir,
                                                    f"{where}: hardware.file", "profile TOML"))
        else:
            prof = load_profile(section.profile or DEFAULT_PROFILE)
        return with_overrides(prof, gpus_per_node=section.gpus_per_node,
                              gpu_memory_gb=section.gpu_memory_gb,
                              nic_gbit_per_gpu=section.nic_gbit_per_gpu)
    except InputError as e:
        raise InputError(f"{where}: hardware", f"{e.field}: {e.message}"
                         if e.field.startswith("--") else e.message) from None


def _pick_one(where: str, a: Any, a_key: str, b: Any, b_key: str, default: Any) -> Any:
    if a is not None and b is not None and a != b:
        raise InputError(f"{where}: {b_key}", f"{b!r} conflicts with {a_key} = {a!r}; give one")
    return a if a is not None else (b if b is not None else default)


def resolve_plan(plan: Plan, base_dir: Path, where: str, *, model: ModelSpec | None = None,
                 hardware: HardwareProfile | None = None) -> Inputs:
    """Plan → Inputs. ``model``/``hardware`` override the plan's (engine configs, CLI options)."""
    mod = model or resolve_model(plan.model, base_dir, where)
    hw = hardware or resolve_hardware(plan.hardware, base_dir, where)
    lay = plan.layout
    keys: dict[str, str] = {}
    rules: list[GateRule] = []
    notes: list[str] = []
    precision = _pick_one(where, plan.precision, "precision", lay.precision, "layout.precision",
                          "mixed")
    optimizer = _pick_one(where, plan.optimizer, "optimizer", lay.optimizer, "layout.optimizer",
                          "adam")
    micro = _pick_one(where, plan.batch.micro_batch, "batch.micro_batch", lay.micro_batch,
                      "layout.micro_batch", 1)
    model_gpus = lay.tp * lay.pp * lay.cp
    if lay.dp is None:
        dp = max(1, plan.gpus // model_gpus)
        keys["world-size"] = "gpus"
        if plan.gpus % model_gpus == 0:
            notes.append(f"DP = gpus ÷ (TP·PP·CP) = {plan.gpus} ÷ {model_gpus} = {dp}")
    else:
        dp = lay.dp
        keys["world-size"] = "layout.dp"
    layout = Layout(**{k.name: getattr(lay, k.name) for k in KNOBS if not k.plan_optional},
                    dp=dp, micro_batch=micro, precision=precision, optimizer=optimizer)
    b = plan.batch
    if b.global_batch is not None and b.tokens_per_batch is not None:
        raise InputError(f"{where}: batch.tokens_per_batch", "give global_batch or "
                                                             "tokens_per_batch, not both")
    if b.tokens_per_batch is not None:
        g = max(1, b.tokens_per_batch // plan.seq_len)
        rules.append(make_rule("tokens-per-batch", b.tokens_per_batch % plan.seq_len == 0,
                               f"{b.tokens_per_batch} tokens / seq {plan.seq_len}",
                               "whole number of sequences",
                               "tokens_per_batch must be a whole number of sequences",
                               key="batch.tokens_per_batch"))
        keys["batch-divisible"] = keys["batch-accounting"] = "batch.tokens_per_batch"
    elif b.global_batch is not None:
        g = b.global_batch
        keys["batch-divisible"] = keys["batch-accounting"] = "batch.global_batch"
    else:
        g = micro * (b.accumulation or 1) * dp
        notes.append(f"no global batch stated: B = b × a × DP = {micro} × {b.accumulation or 1}"
                     f" × {dp} = {g}")
        keys["batch-divisible"] = keys["batch-accounting"] = "batch"
    if b.accumulation is not None and b.global_batch is None and b.tokens_per_batch is None:
        accumulation = None  # B was derived from a; nothing to check
    else:
        accumulation = b.accumulation
    if accumulation is not None:
        keys["batch-accounting"] = "batch.accumulation"
    budget = {}
    if plan.budget is not None:
        gb = plan.budget
        for src, dst, scale in (("context_gb", "context_bytes", 1e9),
                                ("comm_buffer_gb", "comm_buffer_bytes", 1e9),
                                ("fragmentation_fraction", "fragmentation_fraction", 1.0),
                                ("margin_fraction", "margin_fraction", 1.0)):
            val = getattr(gb, src)
            if val is not None:
                budget[dst] = val * scale
    keys.update(config_keys("plan", layout))
    return Inputs(model=mod, hardware=hw, gpus=plan.gpus, layout=layout, seq_len=plan.seq_len,
                  global_batch=g, accumulation=accumulation, budget=budget,
                  thresholds=plan.thresholds, checkpoint=plan.checkpoint, keys=keys, rules=rules,
                  notes=notes)


def _from_rule(r: Rule, key: str | None) -> GateRule:
    return GateRule(name=r.name, status=r.status, measured=r.measured, limit=r.limit,
                    message=r.message, key=key)


@dataclass
class Outcome:
    rules: list[GateRule]
    estimate: Any
    notes: list[str]


def evaluate_inputs(inp: Inputs, where: str = "plan") -> Outcome:
    """Run the estimate and collect every rule for one resolved input."""
    from .estimation import estimate
    from .specs.budget import MemoryBudget

    try:
        budget = MemoryBudget(**inp.budget)
    except Exception as e:
        raise InputError(f"{where}: budget", validation_message(e)) from None
    est = estimate(inp.model, inp.hardware, inp.gpus, inp.layout, seq_len=inp.seq_len,
                   global_batch=inp.global_batch, budget=budget)
    rules = [_from_rule(r, inp.keys.get(r.name)) for r in est.rules]
    rules += inp.rules
    if inp.accumulation is not None:
        rules.append(batch_accounting_rule(inp.global_batch, inp.layout.micro_batch,
                                           inp.accumulation, inp.layout,
                                           key=inp.keys.get("batch-accounting")))
    rules += threshold_rules(inp.thresholds, est)
    ck = checkpoint_figures(inp, where)
    rules += checkpoint_rules(ck, inp.thresholds)
    return Outcome(rules=rules, estimate=est, notes=inp.notes + est.notes)


# ---- lines of keys in the file text ------------------------------------------------------------

def _segment_patterns(seg: str) -> list[re.Pattern]:
    s = re.escape(seg)
    if seg.startswith("-"):  # a command-line flag
        return [re.compile(rf"(?<![\w-]){s}(?=[\s=\"']|$)")]
    return [re.compile(rf"^\s*(?:-\s+)?[\"']?{s}[\"']?\s*[:=]"),          # key: / key = / "key":
            re.compile(rf"^\s*\[+\s*(?:[\w.\-]+\.)?{s}\s*\]+"),              # [section] / [a.seg]
            re.compile(rf"[{{,]\s*[\"']?{s}[\"']?\s*[:=]")]                    # flow / inline tables


def find_key_line(text: str, key: str | None) -> int | None:
    """1-based line of a dotted key path (``layout.tp``) or a flag, by a simple scan: each
    segment is searched from the line where the previous one was found. Comment lines are
    skipped. Returns the deepest segment found, or None."""
    if not key:
        return None
    lines = text.splitlines()
    segs = [key] if key.startswith("-") else [s for s in key.split(".") if s]
    start, found = 0, None
    for seg in segs:
        pats = _segment_patterns(seg)
        for i in range(start, len(lines)):
            stripped = lines[i].lstrip()
            if stripped.startswith("#") or stripped.startswith("//"):
                continue
            if any(p.search(lines[i]) for p in pats):
                start, found = i, i + 1
                break
        else:
            break
    return found


# ---- files ---------------------------------------------------------------------------------------

def _summary(inp: Inputs, est: Any) -> dict[str, Any]:
    lay = inp.layout
    return {
        "model": inp.model.name, "params": inp.model.param_count(),
        "hardware": inp.hardware.name, "gpus": inp.gpus, "framework": est.framework,
        "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
                   "zero": lay.zero, "micro_batch": lay.micro_batch, "schedule": lay.schedule,
                   "chunks": lay.chunks, "sequence_parallel": lay.sequence_parallel,
                   "recompute": lay.recompute, "precision": lay.precision,
                   "optimizer": lay.optimizer},
        "seq_len": inp.seq_len, "global_batch": inp.global_batch,
        "accumulation": est.accumulation,
        "peak_memory_bytes": est.peak_memory_bytes, "usable_memory_bytes": est.usable_memory_bytes,
        "capacity_bytes": est.capacity_bytes, "peak_stage": est.peak_stage,
        "step_time_s": est.step_time_s, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu,
        "bubble_fraction": est.bubble_fraction, "collective_fraction": est.collective_fraction,
    }


def _finish(verdict: FileVerdict, text: str, strict: bool) -> FileVerdict:
    for r in verdict.rules:
        if strict and r.status == "warn":
            r.status = "fail"
            r.message = f"(strict) {r.message}"
        r.line = find_key_line(text, r.key)
        verdict.counts[r.status] += 1
    verdict.ok = verdict.error is None and verdict.counts["fail"] == 0
    return verdict


def check_file(path: str, opts: CheckOptions | None = None) -> FileVerdict:
    """Verdict on one file; bad input raises InputError (the CLI turns it into exit 2)."""
    from . import engines as ec

    opts = opts or CheckOptions()
    where = str(path)
    text, fmt, data = ec.load_any(path, opts.engine)
    kind = opts.engine or ec.detect(where, fmt, data, text)
    if kind == "plan":
        plan = validate_plan(data, where)
        cli_model = ec.cli_model(opts.model) if opts.model else None
        cli_hw = load_hardware(opts.hardware) if opts.hardware else None
        inp = resolve_plan(plan, Path(path).parent, where, model=cli_model, hardware=cli_hw)
    else:
        inp = ec.read_engine(kind, where, text, data, opts)
    out = evaluate_inputs(inp, where)
    verdict = FileVerdict(file=where, kind=kind, ok=True, rules=out.rules, notes=out.notes,
                          summary=_summary(inp, out.estimate))
    return _finish(verdict, text, opts.strict)


def check_paths(paths: list[str], opts: CheckOptions | None = None) -> Verdict:
    """Verdicts on every file; a bad file is recorded with its error and the rest still run."""
    opts = opts or CheckOptions()
    files: list[FileVerdict] = []
    bad = failed = False
    for p in paths:
        try:
            files.append(check_file(p, opts))
        except InputError as e:
            bad = True
            files.append(FileVerdict(file=str(p), ok=False, error=str(e)))
            continue
        failed |= not files[-1].ok
    code = 2 if bad else (1 if failed else 0)
    return Verdict(ok=code == 0, strict=opts.strict, exit_code=code, files=files)


def verdict_json_schema() -> dict[str, Any]:
    schema = Verdict.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dtplan check verdict"
    return schema

