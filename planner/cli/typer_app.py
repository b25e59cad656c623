"""The typer app: every command, for help screens, completion, usage errors and any argv the
argv binder (`cli/bind.py`) hands over. Commands declared in `cli/registry.py` join it as their
option declarations' typer.Options, in definition order."""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable

import typer

try:  # typer ≥ 0.20 vendors click as typer._click; older releases depend on click itself
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

from planner.cli import EXIT_INPUT, EXIT_OK, HELP, _fail
from planner.cli import registry
from planner.cli.options import Opt

app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, rich_markup_mode="markdown",
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})


def typer_form(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with each Opt default as its typer.Option (same name, module and docstring)."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p.replace(default=p.default.option()) if isinstance(p.default, Opt) else p
              for p in sig.parameters.values()]

    @functools.wraps(fn)
    def call(**kw: Any) -> Any:
        return fn(**kw)

    call.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params}
    return call


def _add(name: str, fn: Callable[..., Any]) -> None:
    app.command(name)(typer_form(fn))


for _name, _fn in list(registry.DEFINED.items()):
    _add(_name, _fn)
registry.on_define.append(_add)


def main(argv: list[str], help_screen: bool) -> int:
    """Parse and run argv through typer; click's usage errors as the one line, exit 2. Input
    errors and bugs propagate to `cli.run`. `help_screen`: polish the help first."""
    command = typer.main.get_group(app)  # a group even when one command is registered
    if help_screen:
        from planner.cli.help import polish  # panels, metavars and examples: only a help screen needs them
        command = polish(command)
    try:
        rv = command.main(args=argv, prog_name="dtplan", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        sys.stdout.write(e.ctx.get_help() + "\n")
        return EXIT_OK
    except click_exc.UsageError as e:
        return _fail(e.format_message().replace("\n", " "), EXIT_INPUT)
    except (typer.Exit, getattr(click_exc, "Exit", typer.Exit)) as e:
        return e.exit_code
    except (typer.Abort, getattr(click_exc, "Abort", typer.Abort)):
        return _fail("aborted", 130)
    return rv if isinstance(rv, int) else EXIT_OK
