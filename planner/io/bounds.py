"""The bounds every parser of user text keeps (nesting, values, aliases, integer size), and the
refusals and markers the parsers share (planner.io.parse and its YAML reader)."""

from __future__ import annotations

from typing import Optional

from planner.errors import InputError

MAX_DEPTH = 32                  # nesting of mappings/lists; a plan needs 3
MAX_NODES = 20_000              # YAML nodes composed (after alias expansion counting)
MAX_ALIASES = 100               # YAML alias uses; plans need none
MAX_INT = 2**53                 # largest integer a float64 represents exactly
MAX_INT_DIGITS = 20             # longer integer literals are refused unread (2^53 has 16)


class Refused(Exception):
    """A bound was exceeded; ``line`` is 1-based when known; ``label`` prefixes the message
    ("refused: nested deeper ..." but "n_layer: integer of 400 digits ...")."""

    def __init__(self, message: str, line: Optional[int] = None, label: str = "refused: "):
        super().__init__(message)
        self.line, self.label = line, label


class YamlSyntax(Exception):
    """PyYAML could not read the text; the message is " at line L column C: problem"."""


class YamlWord(str):
    """A YAML 1.1 boolean word (yes / no / on / off) kept as written: a string where a string is
    meant (a plan named ``off``), a bool where a bool is meant (specs.plan converts it)."""

    def as_bool(self) -> bool:
        return self.lower() in ("yes", "on")


class _Bad:
    """A number that broke a bound, kept in the parsed data so the walk can name its key."""

    def __init__(self, reason: str, literal: Optional[str], line: Optional[int] = None) -> None:
        self.reason, self.literal, self.line = reason, literal, line


def int_bound_reason(literal: str) -> Optional[str]:
    """Why an integer literal is refused (None if it is within bounds); never calls int() on
    more than MAX_INT_DIGITS digits."""
    digits = sum(ch.isdigit() for ch in literal)
    if digits > MAX_INT_DIGITS:
        return f"integer of {digits} digits is out of range; at most {MAX_INT} (2^53) in magnitude"
    try:
        value = int(literal.replace("_", ""), 0)
    except ValueError:
        try:
            value = int(literal.replace("_", ""))  # leading zeros: "007"
        except ValueError:
            return None  # not an integer literal; the parser reports it
    if abs(value) > MAX_INT:
        return f"integer {value} is out of range; at most {MAX_INT} (2^53) in magnitude"
    return None


def bounded_int(literal: str, field: str, upper: int = MAX_INT) -> int:
    """``int(literal)`` within ±MAX_INT and at most ``upper`` (for readers of flags in text
    files); otherwise an InputError naming ``field``."""
    reason = int_bound_reason(literal)
    if reason:
        raise InputError(field, reason)
    try:
        if not literal.isascii():   # int() reads ８０; the command line refuses it (inputs.numbers)
            raise ValueError(literal)
        value = int(literal)
    except ValueError:
        shown = literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} characters)"
        raise InputError(field, f"must be an integer, got {shown!r}") from None
    if value > upper:
        raise InputError(field, f"must be at most {upper}, got {value}")
    return value
