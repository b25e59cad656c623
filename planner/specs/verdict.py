"""The verdict of `dtplan check`: one rule, one file, all files (the JSON schema users script
against), and how a rule is made. Used by the plan gate and the engine-config readers alike."""

from __future__ import annotations

from typing import Any, Literal, Optional

from planner.specs.plain import Plain, record, spec

VERDICT_SCHEMA_VERSION = 1
Status = Literal["pass", "fail", "warn"]


@record
class GateRule(Plain):
    """One checked rule in a verdict."""

    name: str = spec(description="stable rule id, e.g. fits-in-memory, layers-divisible-by-pp")
    status: Status
    measured: str = spec("", description="the value found, human-readable")
    limit: str = spec("", description="what the rule allows, human-readable")
    message: str = spec("", description="what the rule means")
    key: Optional[str] = spec(None, description="key path in the file the rule concerns "
                               "(layout.tp, train_batch_size, --micro-batch-size)")
    line: Optional[int] = spec(None, description="1-based line of that key in the file")


@record
class Fix(Plain):
    """The cheapest change found that makes a failing file pass the estimate's rules, tried in
    order of cost: the same split with another micro-batch / recompute (a config edit), another
    layout on the same GPUs (a checkpoint conversion), more nodes (a bigger allocation)."""

    kind: Literal["tune", "relayout", "more-nodes", "none"] = spec(
        description="tune: micro-batch / recompute only; relayout: another layout on the same "
        "GPUs; more-nodes: the plan's split needs more nodes; none: nothing tried passes")
    summary: str = spec(description="one line a user can act on")
    options: list[str] = spec(factory=list, description="`dtplan check` options that "
                               "apply the fix (rerun with them to confirm)")
    layout: Optional[dict[str, Any]] = spec(None, description="the layout that passes "
                                             "(Layout field names)")
    gpus: Optional[int] = spec(None, description="GPU count of the fix")
    extra_nodes: Optional[int] = spec(None, description="nodes added (more-nodes)")
    step_time_s: Optional[float] = spec(None, description="estimated step time of the fix [s]")
    peak_memory_bytes: Optional[float] = spec(None, description="device-total peak of the fix "
                                               "[bytes]")


@record
class FileVerdict(Plain):
    """The verdict on one input file."""

    file: str
    kind: Literal["plan", "deepspeed", "megatron", "torchtitan", "unknown"] = "unknown"
    ok: bool = spec(description="no rule failed and the file was valid input")
    error: Optional[str] = spec(None, description="bad input: the reasons, '; '-joined (exit 2)")
    errors: list[str] = spec(factory=list, description="bad input: one line per "
                              "missing or invalid input (option or key: what is allowed)")
    counts: dict[str, int] = spec(factory=lambda: {"pass": 0, "warn": 0, "fail": 0})
    summary: dict[str, Any] = spec(factory=dict, description="inputs and headline "
                                    "estimates (SI units: bytes, seconds)")
    rules: list[GateRule] = spec(factory=list)
    notes: list[str] = spec(factory=list)
    fix: Optional[Fix] = spec(None, description="on a failing verdict: the cheapest change "
                               "that passes")


@record
class Verdict(Plain):
    """``dtplan check --format json`` output."""

    schema_version: Literal[1] = VERDICT_SCHEMA_VERSION
    command: Literal["check"] = "check"
    ok: bool
    strict: bool
    exit_code: int = spec(description="0 all pass, 1 a rule failed, 2 bad input")
    files: list[FileVerdict]
    skipped: list[str] = spec(factory=list, description="files under a directory "
                               "argument that are neither a plan nor an engine config")


def make_rule(name: str, ok: bool, measured: str, limit: str, message: str, *,
              key: str | None = None, warn: bool = False) -> GateRule:
    """A rule that fails (or only warns, with ``warn``) when ``ok`` is False."""
    status: Status = "pass" if ok else ("warn" if warn else "fail")
    return GateRule(name=name, status=status, measured=measured, limit=limit, message=message,
                    key=key)
