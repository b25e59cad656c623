"""The `dtplan` command: a thin typer layer that parses options, calls the library, renders.

Exit codes (as linters use them): 0 fits / passes; 1 a valid question whose answer is "does not
fit" or "a rule fails"; 2 bad input or usage; 3 an internal error (a bug).
"""

from __future__ import annotations

import sys

import typer

try:  # typer ≥ 0.20 vendors click as typer._click; older releases depend on click itself
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

from ..errors import InputError

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_BUG = 0, 1, 2, 3

HELP = """Capacity and layout planner for distributed training of large models.

Exit codes: 0 fits / passes; 1 does not fit / a rule fails; 2 bad input or usage;
3 internal error (rerun with --debug for the traceback).

`dtplan --version` prints the version; `dtplan completion bash|zsh|fish` the shell completion."""

app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, rich_markup_mode="markdown",
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})

# Importing a module registers its commands; `dtplan --help` lists them in this order.
from . import fit_cmd, plan_cmds, gate, report_cmds, quick, calibrate, completion  # noqa: E402,F401,I001


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("dtplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"dtplan: error: {message}\n")
    return code


def run(argv: list[str]) -> int:
    """Run the CLI on argv and return the exit code (used by main and by tests)."""
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"dtplan {_version()}\n")
        return EXIT_OK
    if completion.COMPLETE_VAR in __import__("os").environ:  # a shell asking for candidates
        completion.enable_completion()
    from .help import polish  # panels, metavars and examples in every help screen
    command = polish(typer.main.get_command(app))
    try:
        rv = command.main(args=argv, prog_name="dtplan", standalone_mode=False)
    except InputError as e:
        return _fail(str(e), EXIT_INPUT)
    except click_exc.NoArgsIsHelpError as e:
        sys.stdout.write(e.ctx.get_help() + "\n")
        return EXIT_OK
    except click_exc.UsageError as e:
        return _fail(e.format_message().replace("\n", " "), EXIT_INPUT)
    except (typer.Exit, getattr(click_exc, "Exit", typer.Exit)) as e:
        return e.exit_code
    except (typer.Abort, getattr(click_exc, "Abort", typer.Abort)):
        return _fail("aborted", 130)
    except BrokenPipeError:  # the reader left (| head): the rest goes nowhere, not to a traceback
        from ..render.terminal import silence_stdout
        silence_stdout()
        return EXIT_OK
    except Exception as e:  # a bug: one line and a hint unless --debug
        if debug:
            raise
        return _fail(f"internal error ({type(e).__name__}: {e}); rerun with --debug for the "
                     "traceback and please report it", EXIT_BUG)
    return rv if isinstance(rv, int) else EXIT_OK


def main() -> None:
    sys.exit(run(sys.argv[1:]))
