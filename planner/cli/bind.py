"""The argv binder: a command's argv → the keyword arguments typer would pass its function,
without importing typer, click or pydantic (typer 0.29 builds a pydantic TypeAdapter per option
as it parses: ~60 ms of start-up on `dtplan fit`).

It reads the same declarations as typer (`options.Opt` defaults of a command declared in
`cli/registry.py`) and the same value parsers (`Opt.check`), and follows click's parser on the
argv it accepts: `--name VALUE`, `--name=VALUE`, `-x VALUE`, switches and their `--no-` forms,
the last value of a repeated option, every value of a list option, each default put through the
option's parser as typer does. Anything else — a positional word, `--`, an unknown option, a
missing or dash-led value, a switch given a value, a missing required option, a value a parser
or choice refuses, an annotation it does not know — returns None: the caller hands the argv to
typer unchanged, so every help screen and error stays typer's own, byte for byte.
"""

from __future__ import annotations

import inspect
import typing
from enum import Enum
from typing import Any, Callable, Optional

from planner.cli.options import Opt

# (parameter name, its declaration, how its value is formed: "number" (through the Opt's
# parser), "flag" (a switch), "text", "list" (a repeatable text option) or "choice" (an Enum),
# the parser or the Enum)
_Param = tuple[str, Opt, str, Any]


def _shape(annotation: Any, o: Opt) -> str | None:
    """Which of the value forms typer gives this annotation, or None if the binder does not
    know it (the command is then typer's alone)."""
    if o.kind == "flag":
        return "flag" if annotation in (bool, Optional[bool]) else None
    if o.numeric:
        return "number" if typing.get_origin(annotation) is not list else None
    if annotation in (str, Optional[str]):
        return "text"
    if annotation in (list[str], typing.List[str], Optional[list[str]], Optional[typing.List[str]]):
        return "list"
    if isinstance(annotation, type) and issubclass(annotation, Enum) and all(
            m.name == m.value and isinstance(m.value, str) for m in annotation):
        return "choice"
    return None


def _table(fn: Callable[..., Any]) -> tuple[list[_Param], dict[str, tuple[str, Any]]] | None:
    """(the parameters in order, option string → (parameter, the switch's value or None)); None
    if a parameter is not an Opt of a known form."""
    params: list[_Param] = []
    flags: dict[str, tuple[str, Any]] = {}
    for p in inspect.signature(fn, eval_str=True).parameters.values():
        o = p.default
        form = _shape(p.annotation, o) if isinstance(o, Opt) else None
        if form is None:
            return None
        params.append((p.name, o, form, p.annotation if form == "choice" else o.check()))
        for decl in (*o.flags, *o.aliases):
            on, _, off = decl.partition("/")
            flags[on] = (p.name, True if form == "flag" else None)
            if off:
                flags[off] = (p.name, False)
    return params, flags


_TABLES: dict[Callable[..., Any], Any] = {}


def _given(args: list[str], flags: dict[str, tuple[str, Any]],
           lists: set[str]) -> dict[str, Any] | None:
    """The raw values argv gives each parameter (click's last-wins, lists appended)."""
    given: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in flags:   # also every positional word, "--" and "-"
            return None
        param, switch = flags[name]
        if switch is not None:
            if eq:
                return None
            given[param] = switch
            continue
        if not eq:
            if i == len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        if param in lists:
            given.setdefault(param, []).append(value)
        else:
            given[param] = value
    return given


def _value(form: str, how: Any, raw: Any) -> Any:
    """One parameter's value as typer forms it from the raw text (or the default); raises on
    what typer would refuse."""
    if raw is None:
        return None
    if form == "number":
        return how(raw)                 # InputError on a refused value
    if form == "list":
        if isinstance(raw, str):   # typer: "Value must be an iterable."
            raise TypeError(raw)
        return [str(x) for x in raw]
    if form == "choice":
        return raw if isinstance(raw, how) else how(raw)   # ValueError on a refused value
    if form == "text" and not isinstance(raw, str):
        raise TypeError(raw)
    return raw


def bind(fn: Callable[..., Any], args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments typer would call `fn` with for `args` (the argv after the command
    name), or None where typer must answer."""
    if fn not in _TABLES:
        _TABLES[fn] = _table(fn)
    table = _TABLES[fn]
    if table is None:
        return None
    params, flags = table
    given = _given(args, flags, {name for name, _, form, _ in params if form == "list"})
    if given is None:
        return None
    kwargs: dict[str, Any] = {}
    for name, o, form, how in params:
        raw = given.get(name, o.default)
        if raw is ...:   # a required option not given: typer says so
            return None
        try:
            kwargs[name] = _value(form, how, raw)
        except Exception:  # a refused value: typer prints its own error for it
            return None
    return kwargs
