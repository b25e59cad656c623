"""The typer app every command module adds its commands to (`@command("fit", ...)` is typer's
`app.command` with dtplan's help style), the exit codes and the help screens' panel names.

Exit codes (as linters use them): 0 fits / passes; 1 a valid question whose answer is "does not
fit" or "a rule fails"; 2 bad input or usage; 3 an internal error (a bug).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Callable

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from planner.cli.names import option_naming
from planner.errors import naming

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_BUG = 0, 1, 2, 3

HELP = """Capacity and layout planner for distributed training of large models.

Exit codes: 0 fits / passes; 1 does not fit / a rule fails; 2 bad input or usage;
3 internal error (rerun with --debug for the traceback).

Numbers take K/M/B/T suffixes (70B parameters, 4M tokens, 15T tokens) and Ki/Mi/Gi/Ti;
sequence lengths read 8k as 8192.

`dtplan --version` prints the version; `dtplan completion bash|zsh|fish` the shell completion."""

# The variable a shell sets when it asks `dtplan` for completion candidates (the script
# `dtplan completion SHELL` prints sets it).
COMPLETE_VAR = "_DTPLAN_COMPLETE"

# The help screens' option panels, in the order every command lists them (typer prints the
# unpanelled "Options" first, then each panel where its first option appears).
MODEL, HARDWARE, BATCH, LAYOUT = "Model", "Hardware and GPUs", "Batch", "Layout"
SEARCH, MARGINS, TRAINING, OUTPUT = ("Search", "Memory margins",
                                     "Training, checkpoints and failures", "Output")
PANELS = (MODEL, HARDWARE, BATCH, LAYOUT, SEARCH, MARGINS, TRAINING, OUTPUT)


class _HelpStyle:
    """The --help option of a help screen, as typer's declarations cannot set it: no value type
    (it is a switch) and, in a command's screen, under Output."""

    help_panel: str | None = OUTPUT

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar, option.rich_help_panel = "", self.help_panel
        return option


class _Positional(TyperArgument):
    """A positional argument whose help shows no value type ("..." for a repeatable one)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return "..." if self.nargs != 1 else None


class Command(_HelpStyle, TyperCommand):
    """A dtplan command: its positional arguments show no value type either (their name already
    says FILE, SHELL or [PLAN]; "..." marks a repeatable one). It runs under its options'
    naming, so an error in the library names the option the user typed (cli.names)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for p in self.params:
            if isinstance(p, TyperArgument):   # typer builds it: no hook for its class
                p.__class__ = _Positional

    def invoke(self, ctx: Any) -> Any:
        with naming(option_naming(self.params)):
            return super().invoke(ctx)


class Group(_HelpStyle, TyperGroup):
    """A group of commands (`dtplan profiles`)."""


class Root(Group):
    """`dtplan` itself: its --help stays under Options."""

    help_panel = None


app = typer.Typer(cls=Root, add_completion=False, no_args_is_help=True, help=HELP,
                  rich_markup_mode="markdown", pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _print_version(wanted: bool) -> None:
    """`dtplan --version`'s body (the package-metadata reader loads only here: a help screen
    has no use for it)."""
    if wanted:
        from importlib.metadata import PackageNotFoundError, version
        try:
            sys.stdout.write(f"dtplan {version('dtplan')}\n")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            sys.stdout.write("dtplan unknown\n")
        raise typer.Exit(0)


@app.callback()
def dtplan(version: Annotated[bool, typer.Option("--version", "-V", help="print the version",
                                                 is_eager=True, hidden=True,
                                                 callback=_print_version)] = False) -> None:
    """Capacity and layout planner for distributed training of large models."""


def examples(*lines: str) -> str:
    """A help screen's closing paragraph: the examples, one per line."""
    return "Examples:\n\n" + "\n\n".join(f"  {x}" for x in lines)


def command(name: str, *example_lines: str, group: typer.Typer = app
            ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """typer's `app.command(name)` with dtplan's help style and the command's examples under
    its options."""
    return group.command(name, cls=Command,
                         epilog=examples(*example_lines) if example_lines else None)
