"""Plan sections → a Job: ``model:`` (preset, config.json or inline shape), ``hardware:``
(profile or file, with what-if overrides), ``layout:``, ``batch:``, ``budget:``; and the check
command's overrides of a plan's batch, recompute and precision keys (the flag wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import InputError, Problems, keyed, validation_message
from planner.io.lines import with_lines
from planner.io.read import safe_reference
from planner.resolve.plan_file import plan_framework
from planner.evaluation.candidates import usable_recipe
from planner.evaluation.rules import config_keys
from planner.specs.hardware import DEFAULT_PROFILE, HardwareProfile
from planner.specs.hardware_toml import load_profile, load_profile_file, with_overrides
from planner.specs.job import CheckOptions, Job
from planner.specs.knobs import KNOBS, Layout
from planner.specs.model import ModelSpec, validate_model
from planner.specs.records import dump
from planner.specs.plan import Plan
from planner.specs.verdict import GateRule, make_rule

MODEL_FIELDS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "mlp", "vocab",
                "tied_embeddings", "position", "max_positions", "qkv_bias", "linear_bias", "norm",
                "dropout", "experts", "experts_per_token", "expert_ffn", "shared_experts",
                "dense_layers", "moe_every", "shared_expert_ffn", "window", "window_kind",
                "global_every", "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim",
                "mtp_layers")
# Inline shapes without a base default to the Llama layout (SwiGLU, RMSNorm, RoPE, untied).
INLINE_DEFAULTS = {"mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                   "tied_embeddings": False}


def model_from_section(section: Any, base_dir: Path, where: str) -> ModelSpec:
    """A plan's ``model:`` (a preset name, or preset / config.json / inline shape with overrides)."""
    from planner.specs.hf_config import load_hf_config
    from planner.specs.presets import get_preset

    if isinstance(section, str):
        return keyed(f"{where}: model", get_preset, section)
    if section.preset is not None and section.config is not None:
        raise InputError(f"{where}: model", "give preset or config, not both")
    inline = {k: getattr(section, k) for k in MODEL_FIELDS if getattr(section, k) is not None}
    if section.preset is not None:
        base = dump(keyed(f"{where}: model.preset", get_preset, section.preset))
    elif section.config is not None:
        path = safe_reference(section.config, base_dir, f"{where}: model.config", "config.json")
        base = dump(keyed(f"{where}: model.config", load_hf_config, path))
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
        return validate_model(data)
    except Exception as e:  # pydantic ValidationError from the boundary's checks
        raise InputError(f"{where}: model", validation_message(e)) from None


def hardware_from_section(section: Any, base_dir: Path, where: str) -> HardwareProfile:
    """A plan's ``hardware:`` (a profile name, or profile / file with what-if overrides)."""
    if isinstance(section, str):
        return keyed(f"{where}: hardware", load_profile, section)
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
                 hardware: HardwareProfile | None = None,
                 overrides: CheckOptions | None = None, text: str | None = None) -> Job:
    """Plan → Job. ``model``/``hardware`` replace the plan's (CLI options); ``overrides`` (the
    check command's --micro-batch, --global-batch, --recompute, --precision) replace the plan's
    keys before anything is derived from them: the flag wins, and a note says so. With the
    file's ``text``, an error names the line of its key (``plan.yaml:3: model: …``)."""
    try:
        return _resolve(plan, base_dir, where, model, hardware, overrides)
    except InputError as e:
        raise with_lines(e, where, text) from None


def _resolve(plan: Plan, base_dir: Path, where: str, model: ModelSpec | None,
             hardware: HardwareProfile | None, overrides: CheckOptions | None) -> Job:
    found = Problems()   # a bad model and a bad hardware section are reported together
    mod = model or found.run(model_from_section, plan.model, base_dir, where)
    hw = hardware or found.run(hardware_from_section, plan.hardware, base_dir, where)
    found.check()
    assert mod is not None and hw is not None   # check() raised had either failed
    notes: list[str] = []
    if overrides is not None:
        plan = _overridden(plan, overrides, notes)
    lay = plan.layout
    keys: dict[str, str] = {}
    rules: list[GateRule] = []
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
    keyed(_fp8_key(plan, where, overrides), usable_recipe, hw, precision, lay.fp8)
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
    budget = budget_from_section(plan.budget)
    keys.update(config_keys("plan", layout))
    return Job(model=mod, hardware=hw, gpus=plan.gpus, layout=layout, seq_len=plan.seq_len,
                  global_batch=g, accumulation=accumulation, budget=budget,
                  thresholds=plan.thresholds, checkpoint=plan.checkpoint, keys=keys, rules=rules,
                  notes=notes, framework=plan_framework(plan, where))


def _fp8_key(plan: Plan, where: str, overrides: CheckOptions | None) -> str:
    """Where the plan's fp8 recipe was given: layout.fp8, else the precision key that made it
    tensorwise (or --precision when the check command's flag set it)."""
    if plan.layout.fp8 != "none":
        return f"{where}: layout.fp8"
    if overrides is not None and overrides.precision is not None:
        return "--precision"
    return f"{where}: {'precision' if plan.precision is not None else 'layout.precision'}"


def budget_from_section(section: Any) -> Any:
    """The plan's ``budget:`` (GB and shares; None: every default) as the job's MemoryBudget.
    specs.plan.BudgetSection, validated when the plan loads, bounds each key at least as tightly
    as MemoryBudget does, so the plain constructor (no second validation) is enough."""
    from planner.specs.budget import MemoryBudget

    kw = {}
    for src, dst, scale in (("context_gb", "context_bytes", 1e9),
                            ("comm_buffer_gb", "comm_buffer_bytes", 1e9),
                            ("fragmentation_fraction", "fragmentation_fraction", 1.0),
                            ("margin_fraction", "margin_fraction", 1.0)):
        val = None if section is None else getattr(section, src)
        if val is not None:
            kw[dst] = val * scale
    return MemoryBudget(**kw)


def _overridden(plan: Plan, o: CheckOptions, notes: list[str]) -> Plan:
    """The plan with the flags' values in place of its own keys (a note for each it replaces)."""
    lay, b = plan.layout, plan.batch
    top: dict[str, Any] = {}
    lay_up: dict[str, Any] = {}
    batch_up: dict[str, Any] = {}
    if o.micro_batch is not None:
        was = b.micro_batch if b.micro_batch is not None else lay.micro_batch
        _say(notes, "--micro-batch", o.micro_batch, "batch.micro_batch" if b.micro_batch
             is not None or lay.micro_batch is None else "layout.micro_batch", was)
        batch_up["micro_batch"], lay_up["micro_batch"] = o.micro_batch, None
    if o.global_batch is not None:
        key, was = (("batch.tokens_per_batch", b.tokens_per_batch) if b.tokens_per_batch
                    is not None else ("batch.global_batch", b.global_batch))
        _say(notes, "--global-batch", o.global_batch, key, was)
        batch_up.update(global_batch=o.global_batch, tokens_per_batch=None)
    if o.recompute is not None:
        _say(notes, "--recompute", o.recompute, "layout.recompute", lay.recompute)
        lay_up.update(recompute=o.recompute, recompute_layers=None)
    if o.precision is not None:
        _say(notes, "--precision", o.precision, "precision",
             plan.precision if plan.precision is not None else lay.precision)
        top["precision"], lay_up["precision"] = o.precision, None
    return plan.model_copy(update={**top, "layout": lay.model_copy(update=lay_up),
                                   "batch": b.model_copy(update=batch_up)})


def _say(notes: list[str], flag: str, value: Any, key: str, was: Any) -> None:
    if was is not None and was != value:
        notes.append(f"{flag} {value} overrides {key} = {was} (the flag wins)")
    elif was is None:
        notes.append(f"{flag} {value} sets {key}")
