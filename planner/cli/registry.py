"""The commands declared without typer: `@command("fit")` records the function, whose option
parameters default to declarations of our own (`options.Opt`). Two binders read them: the argv
binder (`cli/bind.py`) on the common path, and typer (`cli/typer_app.py`) for help, completion,
usage errors and any argv the binder hands over. This module imports neither."""

from __future__ import annotations

from typing import Any, Callable

# command name → its function, in definition order (the order `dtplan --help` lists them)
DEFINED: dict[str, Callable[..., Any]] = {}
# called with (name, function) for each command defined once the typer app exists, so that a
# command module imported after the app adds its commands in its own place
on_define: list[Callable[[str, Callable[..., Any]], None]] = []


def command(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the command `name` (its function is returned unchanged)."""
    def record(fn: Callable[..., Any]) -> Callable[..., Any]:
        DEFINED[name] = fn
        for hook in on_define:
            hook(name, fn)
        return fn
    return record
