"""Typed, bounded access to a parsed Hugging Face ``config.json``: each bad value becomes
``InputError(<path>, "<key>: <what is allowed>")``; each key read is recorded (so the readers can
name the keys they did not understand) and each size field taken from the model type's
documented default is recorded too (so the output can say so)."""

from __future__ import annotations

import builtins
import json
import math
from typing import Any

from planner.errors import InputError


class ConfigFields:
    """Typed accessors that turn a bad value into InputError(path, "key: ...")."""

    def __init__(self, where: str, data: dict[str, Any],
                 defaults: dict[str, Any] | None = None):
        self.where, self.data = where, data
        self.defaults = defaults or {}        # the model type's documented defaults
        self.read: set[str] = set()           # keys a reader asked for
        self.defaulted: list[str] = []        # keys absent here, taken from ``defaults``

    def get(self, key: str) -> Any:
        """The raw value (None when absent), the key recorded as read."""
        self.read.add(key)
        return self.data.get(key)

    def default(self, key: str) -> Any:
        """The type's default for an absent key, recorded as taken (None: no default)."""
        value = self.defaults.get(key)
        if value is not None and key not in self.defaulted:
            self.defaulted.append(key)
        return value

    def fail(self, key: str, message: str) -> InputError:
        return InputError(self.where, f"{key}: {message}")

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def int(self, key: str, default: int | None = None, *, allow_zero: bool = False) -> int:
        """A required integer: the config's, else ``default``, else the type's default."""
        value = self.optional_int(key, default, allow_zero=allow_zero)
        if value is None:
            raise self.fail(key, "missing; a positive integer is required")
        return value

    def optional_int(self, key: str, default: builtins.int | None = None, *,
                allow_zero: bool = False) -> builtins.int | None:
        """An optional integer: the config's, else ``default``, else the type's default, else
        None."""
        value = self.get(key)
        if value is None:
            value = self.default(key) if default is None else default
        if value is None:
            return None
        # JSON has no int/float split; accept 4096.0 but not 4096.5, and never true/false.
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise self.fail(key, f"must be an integer, got {json.dumps(value)}")
        number = int(value)
        if number < 0 or (number == 0 and not allow_zero):
            kind = "a non-negative" if allow_zero else "a positive"
            raise self.fail(key, f"must be {kind} integer, got {number}")
        return number

    def bool(self, key: str, default: bool | None = None) -> bool:
        value = self.get(key)
        if value is None:
            typed = self.defaults.get(key)
            return bool(typed) if default is None else default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {json.dumps(value)}")
        return value

    def number(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, got {json.dumps(value)}")
        return float(value)

    def str(self, key: str) -> str | None:
        value = self.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {json.dumps(value)}")
        return value


def check_rope(c: ConfigFields) -> None:
    # Values do not change the parameter count, but a malformed block means a broken file.
    theta = c.number("rope_theta")
    if theta is not None and theta <= 0:
        raise c.fail("rope_theta", f"must be positive, got {theta:g}")
    for key in ("rope_parameters", "rope_scaling"):
        block = c.get(key)
        if block is not None and not isinstance(block, dict):
            raise c.fail(key, f"must be an object or null, got {json.dumps(block)}")
        if isinstance(block, dict) and block.get("rope_theta") is not None:
            t = block["rope_theta"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
                raise c.fail(f"{key}.rope_theta", f"must be a positive number, got {json.dumps(t)}")


def dropout(c: ConfigFields, keys: tuple[str, ...], default: float) -> bool:
    for key in keys:
        value = c.number(key)
        if value is not None and value < 0:
            raise c.fail(key, f"must be >= 0, got {value:g}")
        if (default if value is None else value) > 0:
            return True
    return False


def heads(c: ConfigFields, hidden: int, heads_key: str, kv_key: str | None,
           kv: int | None = None) -> tuple[int, int, int]:
    n_heads = c.int(heads_key)
    if kv is None:
        # absent KV heads: multi-head attention, kv = heads (every class here does so for None)
        kv = c.int(kv_key, n_heads) if kv_key else n_heads
    if n_heads % kv:
        raise c.fail(kv_key or heads_key, f"must divide {heads_key} ({n_heads}); got {kv}")
    head_dim = c.optional_int("head_dim")
    if head_dim is None:
        if hidden % n_heads:
            raise c.fail(heads_key, f"must divide the hidden size ({hidden}) when head_dim is "
                                    f"absent; got {n_heads}")
        head_dim = hidden // n_heads
    return n_heads, kv, head_dim


def int_list(c: ConfigFields, key: str) -> tuple[int, ...]:
    """A list of non-negative layer indices (absent or null: empty)."""
    value = c.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                          or x < 0 for x in value):
        raise c.fail(key, f"must be a list of layer indices, got {json.dumps(value)[:80]}")
    return tuple(value)


def string_list(c: ConfigFields, key: str) -> tuple[str, ...] | None:
    """A list of strings (absent or null: None)."""
    value = c.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise c.fail(key, f"must be a list of strings, got {json.dumps(value)[:80]}")
    return tuple(value)
