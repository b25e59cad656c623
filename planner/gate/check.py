"""CI verdicts: a plan (or an engine config read into one) → every rule, pass / fail / warn.

Rules come from four places, in this order:
1. ``estimate.estimate(...).rules``: the layout rules (world size, TP inside the NVLink domain,
   heads and KV heads vs TP, layers vs PP·v, interleaving, batch divisibility, sequence vs CP,
   experts vs EP, sharding, offload) and ``fits-in-memory`` (peak ≤ capacity minus margin);
2. the engine's own assertions when the input was a DeepSpeed / Megatron-LM / torchtitan file
   (``planner.framework_configs``);
3. ``batch-accounting``: when the job states its accumulation steps a, the global batch must be
   exactly b × a × DP; TP, PP and CP ranks never multiply it (DESIGN.md "Batch");
4. one rule per threshold the plan sets, and ``checkpoint-interval`` when it has a checkpoint
   policy (waste δ/τ + τ/2M + R/M at the stated interval against Daly's optimum; the sizes,
   write cost and MTBF come from planner.resilience.planning).

Inputs resolve through ``planner.resolve.job`` (plan sections, engine readers, check's
options; the flags replace a file's batch / recompute / precision keys). A failing verdict
carries the cheapest change that passes (``planner.advice.fixes``: micro-batch / recompute, another
layout, more nodes).

Each rule carries the key path it concerns (``layout.tp``, ``--pipeline-model-parallel-size``)
and that key's line in the file, so CI annotations land on the offending line.
The verdict JSON (``Verdict``) is versioned by ``schema_version``; see ``dtplan schema verdict``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any

from planner.errors import InputError, InputErrors
from planner.io.lines import find_key_line
from planner.resolve.job import resolve_file
from planner.gate.plan_rules import (batch_accounting_rule, checkpoint_figures, checkpoint_rules,
                         recompute_rule, threshold_rules)
from planner.specs.job import CheckOptions, Job
from planner.specs.layout import Rule
from planner.specs.records import json_schema
from planner.specs.verdict import FileVerdict, GateRule, Verdict


def _from_rule(r: Rule, key: str | None) -> GateRule:
    return GateRule(name=r.name, status=r.status, measured=r.measured, limit=r.limit,
                    message=r.message, key=key)


@dataclass
class Outcome:
    rules: list[GateRule]
    estimate: Any
    notes: list[str]


def evaluate_inputs(inp: Job, where: str = "plan") -> Outcome:
    """Run the estimate and collect every rule for one resolved input."""
    from planner.evaluation.estimate import estimate

    est = estimate(inp.model, inp.hardware, inp.gpus, inp.layout, seq_len=inp.seq_len,
                   global_batch=inp.global_batch, budget=inp.budget, framework=inp.framework)
    rules = [_from_rule(r, inp.keys.get(r.name)) for r in est.rules]
    rules += inp.rules
    if inp.layout.recompute == "selective":
        from planner.specs.framework import load_framework
        rules.append(recompute_rule(inp.layout, inp.framework or load_framework(None),
                                    inp.keys.get("recompute-in-framework", "layout.recompute")))
    if inp.accumulation is not None:
        rules.append(batch_accounting_rule(inp.global_batch, inp.layout.micro_batch,
                                           inp.accumulation, inp.layout,
                                           key=inp.keys.get("batch-accounting")))
    rules += threshold_rules(inp.thresholds, est)
    ck = checkpoint_figures(inp, where)
    rules += checkpoint_rules(ck, inp.thresholds)
    return Outcome(rules=rules, estimate=est, notes=inp.notes + est.notes)


# ---- files ---------------------------------------------------------------------------------------

def _summary(inp: Job, est: Any) -> dict[str, Any]:
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
    """The verdict with each rule's line in the file (and, with ``strict``, warnings made
    failures), its counts and whether it passes."""
    rules, counts = [], dict(verdict.counts)
    for r in verdict.rules:
        if strict and r.status == "warn":
            r = replace(r, status="fail", message=f"(strict) {r.message}")
        rules.append(replace(r, line=find_key_line(text, r.key)))
        counts[r.status] += 1
    return replace(verdict, rules=rules, counts=counts,
                   ok=verdict.error is None and counts["fail"] == 0)


def check_file(path: str, opts: CheckOptions | None = None, *, fix: bool = True) -> FileVerdict:
    """Verdict on one file; bad input raises InputError (the CLI turns it into exit 2). With
    ``fix``, a failing verdict carries the cheapest change that passes (planner.advice.fixes)."""
    opts = opts or CheckOptions()
    job, text, kind = resolve_file(path, opts)
    out = evaluate_inputs(job, str(path))
    verdict = FileVerdict(file=str(path), kind=kind, ok=True, rules=out.rules, notes=out.notes,
                          summary=_summary(job, out.estimate))
    verdict = _finish(verdict, text, opts.strict)
    if fix and not verdict.ok:
        from planner.advice.fixes import cheapest_fix
        verdict = replace(verdict, fix=cheapest_fix(job, verdict.rules))
    return verdict


# Failing files that get their cheapest fix in one run: each fix runs layout searches (~0.1 s),
# so a directory of failing plans stays seconds; the others say how to get theirs.
MAX_FIXES = 20


def check_paths(paths: list[str], opts: CheckOptions | None = None) -> Verdict:
    """Verdicts on every file (a directory: the plan and engine files under it, see
    ``inputs.tree``); a bad file is recorded with its errors and the rest still run. The first
    MAX_FIXES failing files carry their cheapest fix; later ones a note naming the command."""
    from planner.io.tree import expand

    opts = opts or CheckOptions()
    files: list[FileVerdict] = []
    bad = failed = False
    found, skipped = expand(paths)
    fixes = 0
    for p in found:
        try:
            files.append(check_file(p, opts, fix=fixes < MAX_FIXES))
        except InputError as e:
            bad = True
            lines = e.lines() if isinstance(e, InputErrors) else [str(e)]
            files.append(FileVerdict(file=str(p), ok=False, error="; ".join(lines), errors=lines))
            continue
        if not files[-1].ok:
            failed = True
            fixes += 1
            if fixes > MAX_FIXES:
                files[-1].notes.append(f"no fix computed: more than {MAX_FIXES} files failed in "
                                       f"this run; `dtplan check {shlex.quote(p)}` gives it")
    code = 2 if bad else (1 if failed else 0)
    return Verdict(ok=code == 0, strict=opts.strict, exit_code=code, files=files, skipped=skipped)


def verdict_json_schema() -> dict[str, Any]:
    schema = json_schema(Verdict)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dtplan check verdict"
    return schema

