"""The verdict of `dtplan check`: one rule, one file, all files (the JSON schema users script
against), and how a rule is made. Used by the plan gate and the engine-config readers alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

from pydantic import Field

VERDICT_SCHEMA_VERSION: Literal[1] = 1
Status = Literal["pass", "fail", "warn"]
# what a checked file is: a plan or one engine's config (unknown: it could not be read)
FileKind = Literal["plan", "deepspeed", "megatron", "torchtitan", "unknown"]


@dataclass(frozen=True, kw_only=True)
class GateRule:
    """One checked rule in a verdict."""

    name: Annotated[str, Field(
        description="stable rule id, e.g. fits-in-memory, layers-divisible-by-pp")]
    status: Status
    measured: Annotated[str, Field(description="the value found, human-readable")] = ""
    limit: Annotated[str, Field(description="what the rule allows, human-readable")] = ""
    message: Annotated[str, Field(description="what the rule means")] = ""
    key: Annotated[Optional[str], Field(
        description="key path in the file the rule concerns (layout.tp, "
                    "train_batch_size, --micro-batch-size)")] = None
    line: Annotated[Optional[int], Field(
        description="1-based line of that key in the file")] = None


@dataclass(frozen=True, kw_only=True)
class Fix:
    """The cheapest change found that makes a failing file pass the estimate's rules, tried in
    order of cost: the same split with another micro-batch / recompute (a config edit), another
    layout on the same GPUs (a checkpoint conversion), more nodes (a bigger allocation)."""

    kind: Annotated[Literal["tune", "relayout", "more-nodes", "none"], Field(
        description="tune: micro-batch / recompute only; relayout: another layout on the same "
                    "GPUs; more-nodes: the plan's split needs more nodes; none: nothing tried "
                    "passes")]
    summary: Annotated[str, Field(description="one line a user can act on")]
    options: Annotated[list[str], Field(
        description="`dtplan check` options that apply the fix "
                    "(rerun with them to confirm)")] = field(default_factory=list)
    layout: Annotated[Optional[dict[str, Any]], Field(
        description="the layout that passes (Layout field names)")] = None
    gpus: Annotated[Optional[int], Field(description="GPU count of the fix")] = None
    extra_nodes: Annotated[Optional[int], Field(description="nodes added (more-nodes)")] = None
    step_time_s: Annotated[Optional[float], Field(
        description="estimated step time of the fix [s]")] = None
    peak_memory_bytes: Annotated[Optional[float], Field(
        description="device-total peak of the fix [bytes]")] = None


@dataclass(frozen=True, kw_only=True)
class FileVerdict:
    """The verdict on one input file."""

    file: str
    kind: FileKind = "unknown"
    ok: Annotated[bool, Field(description="no rule failed and the file was valid input")]
    error: Annotated[Optional[str], Field(
        description="bad input: the reasons, '; '-joined (exit 2)")] = None
    errors: Annotated[list[str], Field(
        description="bad input: one line per missing or invalid "
                    "input (option or key: what is allowed)")] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"pass": 0, "warn": 0, "fail": 0})
    summary: Annotated[dict[str, Any], Field(
        description="inputs and headline estimates (SI units: "
                    "bytes, seconds)")] = field(default_factory=dict)
    rules: list[GateRule] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fix: Annotated[Optional[Fix], Field(
        description="on a failing verdict: the cheapest change that passes")] = None


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """``dtplan check --format json`` output."""

    schema_version: Literal[1] = VERDICT_SCHEMA_VERSION
    command: Literal["check"] = "check"
    ok: bool
    strict: bool
    exit_code: Annotated[int, Field(description="0 all pass, 1 a rule failed, 2 bad input")]
    files: list[FileVerdict]
    skipped: Annotated[list[str], Field(
        description="files under a directory argument that are "
                    "neither a plan nor an engine config")] = field(default_factory=list)


def make_rule(name: str, ok: bool, measured: str, limit: str, message: str, *,
              key: str | None = None, warn: bool = False) -> GateRule:
    """A rule that fails (or only warns, with ``warn``) when ``ok`` is False."""
    status: Status = "pass" if ok else ("warn" if warn else "fail")
    return GateRule(name=name, status=status, measured=measured, limit=limit, message=message,
                    key=key)
