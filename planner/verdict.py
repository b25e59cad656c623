"""The verdict of `dtplan check`: one rule, one file, all files (the JSON schema users script
against), and how a rule is made. Used by the plan gate and the engine-config readers alike."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

VERDICT_SCHEMA_VERSION = 1
Status = Literal["pass", "fail", "warn"]


class GateRule(BaseModel):
    """One checked rule in a verdict."""

    name: str = Field(description="stable rule id, e.g. fits-in-memory, layers-divisible-by-pp")
    status: Status
    measured: str = Field("", description="the value found, human-readable")
    limit: str = Field("", description="what the rule allows, human-readable")
    message: str = Field("", description="what the rule means")
    key: Optional[str] = Field(None, description="key path in the file the rule concerns "
                               "(layout.tp, train_batch_size, --micro-batch-size)")
    line: Optional[int] = Field(None, description="1-based line of that key in the file")


class FileVerdict(BaseModel):
    """The verdict on one input file."""

    file: str
    kind: Literal["plan", "deepspeed", "megatron", "torchtitan", "unknown"] = "unknown"
    ok: bool = Field(description="no rule failed and the file was valid input")
    error: Optional[str] = Field(None, description="bad input: the one-line reason (exit 2)")
    counts: dict[str, int] = Field(default_factory=lambda: {"pass": 0, "warn": 0, "fail": 0})
    summary: dict[str, Any] = Field(default_factory=dict, description="inputs and headline "
                                    "estimates (SI units: bytes, seconds)")
    rules: list[GateRule] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Verdict(BaseModel):
    """``dtplan check --format json`` output."""

    schema_version: Literal[1] = VERDICT_SCHEMA_VERSION
    command: Literal["check"] = "check"
    ok: bool
    strict: bool
    exit_code: int = Field(description="0 all pass, 1 a rule failed, 2 bad input")
    files: list[FileVerdict]


def make_rule(name: str, ok: bool, measured: str, limit: str, message: str, *,
              key: str | None = None, warn: bool = False) -> GateRule:
    """A rule that fails (or only warns, with ``warn``) when ``ok`` is False."""
    status: Status = "pass" if ok else ("warn" if warn else "fail")
    return GateRule(name=name, status=status, measured=measured, limit=limit, message=message,
                    key=key)
