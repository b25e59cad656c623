"""Where each efficiency constant of a profile comes from: its kind and its source, declared once
beside the value in the profile's TOML as ``key = { value = …, kind = "…", source = "…" }``
(a fitted one adds ``data = "…"``: the runs it was fitted on).

The kinds, strongest first:
- ``physics``: follows from the hardware's construction (a datasheet ratio, a wire count);
- ``kernel-benchmark``: a public kernel- or collective-level measurement (MAMF GEMM tables,
  FlashAttention figures, nccl-tests busbw), cited;
- ``framework-source``: read off a framework's or library's source at a commit (NCCL's tuning
  tables, Megatron's bucket sizes);
- ``fitted``: fitted end to end where no kernel figure exists, naming the runs in ``data``;
- ``judgement``: no defensible figure; ``source`` states the reason for the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Optional

from planner.errors import InputError
from planner.io.escape import toml_string
from planner.specs.records import FORBID

KINDS = ("physics", "kernel-benchmark", "framework-source", "fitted", "judgement")
Kind = Literal["physics", "kernel-benchmark", "framework-source", "fitted", "judgement"]
FIELDS = ("value", "kind", "source", "data")


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """A constant's kind and source (and, when fitted, the data it was fitted on)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    kind: Kind
    source: str
    data: str = ""

    def line(self) -> str:
        """``kind: source`` (``; fitted on data``), as the assumptions print it."""
        return f"{self.kind}: {self.source}" + (f"; fitted on {self.data}" if self.data else "")


def _shape(allowed: str) -> str:
    return (f'must be {{ value = <{allowed}>, kind = "<{"|".join(KINDS)}>", source = "<where it '
            'comes from, or the reason>" } (fitted: also data = "<the runs>")')


def unwrap(entry: Any, dotted: str, where: Callable[[str], str], allowed: str,
           ok: Callable[[Any], bool]) -> tuple[Any, Provenance]:
    """A checked ``{value, kind, source[, data]}`` table → (value, Provenance). ``where(key)``
    names the file and line; ``ok`` checks the value (``allowed`` says what it allows). Every
    refusal is one line naming the key and what is allowed."""
    if not isinstance(entry, dict):
        raise InputError(where(dotted), f"{dotted}: {_shape(allowed)}; got {entry!r}")
    extra = [k for k in entry if k not in FIELDS]
    if extra:
        raise InputError(where(dotted), f"{dotted}.{extra[0]}: unknown key (allowed: "
                                        f"{', '.join(FIELDS)})")
    for key in ("value", "kind", "source"):
        if key not in entry:
            raise InputError(where(dotted), f"{dotted}.{key}: missing; {dotted} {_shape(allowed)}")
    if not ok(entry["value"]):
        raise InputError(where(dotted), f"{dotted}.value: must be {allowed}, got "
                                        f"{entry['value']!r}")
    kind, source, data = entry["kind"], entry["source"], entry.get("data", "")
    if kind not in KINDS:
        raise InputError(where(dotted), f"{dotted}.kind: must be one of {', '.join(KINDS)}; "
                                        f"got {kind!r}")
    for key, text in (("source", source), ("data", data)):
        if not isinstance(text, str):
            raise InputError(where(dotted), f"{dotted}.{key}: must be a string, got {text!r}")
    if not source.strip():
        raise InputError(where(dotted), f"{dotted}.source: must name where the value comes from "
                                        "(judgement: the reason)")
    if kind == "fitted" and not data.strip():
        raise InputError(where(dotted), f"{dotted}.data: missing; a fitted constant names the "
                                        "runs it was fitted on")
    if kind != "fitted" and data:
        raise InputError(where(dotted), f"{dotted}.data: only a fitted constant names data "
                                        f"(kind is {kind})")
    return entry["value"], Provenance(kind=kind, source=source.strip(), data=data.strip())


def toml_constant(value: float, prov: Provenance) -> str:
    """The inline table a profile writes for one constant (the calibrate writer's form)."""
    data = f", data = {toml_string(prov.data)}" if prov.data else ""
    return (f"{{ value = {value:.4g}, kind = {toml_string(prov.kind)}, source = "
            f"{toml_string(prov.source)}{data} }}")


def key_line(text: str, section: str, key: str) -> Optional[int]:
    """1-based line of ``key`` inside ``[section]`` of TOML text ("" = the top level), None if
    absent: a refusal names the file and line of the constant."""
    current, pat = "", re.compile(rf"^\s*{re.escape(key)}\s*[.=]")
    for n, line in enumerate(text.splitlines(), 1):
        if m := re.match(r"^\s*\[([A-Za-z0-9_.]+)\]", line):
            current = m[1]
        elif current == section and pat.match(line):
            return n
    return None
