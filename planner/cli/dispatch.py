"""One `dtplan` command line: typer parses it and calls the command; around that, the exit-code
contract. Bad input or usage is one line naming the option and what is allowed, exit 2 (typer's
usage errors in its own words, folded onto the line); a bug is one line and a hint, exit 3
(`--debug` anywhere on the line: the traceback instead).
"""

from __future__ import annotations

import os
import sys

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer._completion_classes import completion_init

from planner.cli import settled
from planner.cli.root import COMPLETE_VAR, EXIT_BUG, EXIT_INPUT, EXIT_OK, app
from planner.errors import InputError
from planner.io.stdout import encodable_streams, say, silence_stdout


# Importing a command module registers its commands; `dtplan --help` lists them in this order.
MODULES = ("fit_cmd", "plan_cmds", "catalog", "gate", "report_cmds", "quick", "calibrate",
           "compare", "completion")
# The module of each command, in the order `dtplan --help` lists them. A run imports only the
# one its command line names: typer builds the click command of every registered command on
# each run (~35 ms for all of them, ~2 ms for one); help, completion and a mistyped name import
# them all.
COMMANDS = {"fit": "fit_cmd", "memory": "plan_cmds", "estimate": "plan_cmds",
            "models": "catalog", "profiles": "catalog", "check": "gate", "schema": "gate",
            "report": "report_cmds", "export": "report_cmds", "comm": "quick", "bubble": "quick",
            "batch": "quick", "checkpoint": "quick", "scaling": "quick", "layout": "quick",
            "calibrate": "calibrate", "compare": "compare", "completion": "completion"}
_ORDER = {name: i for i, name in enumerate(COMMANDS)}


def register(argv: list[str]) -> None:
    """Import the module of the command argv names (every command module when it names none
    or a shell is asking for completions). The commands are listed in COMMANDS' order whatever
    order their modules were imported in (a process that ran `check` before `--help`)."""
    name = argv[0] if argv else ""
    one = name in COMMANDS and COMPLETE_VAR not in os.environ
    for module in (COMMANDS[name],) if one else MODULES:
        _load(module)
    app.registered_commands.sort(key=lambda c: _ORDER.get(c.name or "", len(_ORDER)))


def _load(module: str) -> None:  # noqa: C901 - one import statement per command module
    """Import one command module: importing it registers its commands (plain import
    statements, so the architecture test reads every edge)."""
    if module == "fit_cmd":
        from planner.cli import fit_cmd  # noqa: F401
    elif module == "plan_cmds":
        from planner.cli import plan_cmds  # noqa: F401
    elif module == "catalog":
        from planner.cli import catalog  # noqa: F401
    elif module == "gate":
        from planner.cli import gate  # noqa: F401
    elif module == "report_cmds":
        from planner.cli import report_cmds  # noqa: F401
    elif module == "quick":
        from planner.cli import quick  # noqa: F401
    elif module == "calibrate":
        from planner.cli import calibrate  # noqa: F401
    elif module == "compare":
        from planner.cli import compare  # noqa: F401
    elif module == "completion":
        from planner.cli import completion  # noqa: F401
    else:
        raise ValueError(f"no command module {module!r}")


def _fail(message: str, code: int) -> int:
    # One line whatever the user typed: control characters in echoed values are escaped.
    say("error", message)
    return code


def _parse_and_call(argv: list[str]) -> int:
    """typer parses argv and calls the command; its usage errors as the one line, exit 2. Input
    errors and bugs propagate to `run`."""
    try:
        rv = typer.main.get_group(app).main(args=argv, prog_name="dtplan", standalone_mode=False)
    except NoArgsIsHelpError as e:
        sys.stdout.write(e.ctx.get_help() + "\n")
        return EXIT_OK
    except UsageError as e:
        return _fail(e.format_message().replace("\n", " "), EXIT_INPUT)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        return _fail("aborted", 130)
    return rv if isinstance(rv, int) else EXIT_OK


def run(argv: list[str]) -> int:
    """Run the CLI on argv and return the exit code (the console script's path; tests call it)."""
    encodable_streams()   # a Latin-1 or ASCII terminal: ASCII fallbacks, not exit 3
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    register(argv)
    settled()   # the command is imported: out of the collector's sight
    if COMPLETE_VAR in os.environ:  # a shell asking for candidates: typer's shell classes
        completion_init()           # (dtplan's help screens list no --install-completion)
    try:
        return _parse_and_call(argv)
    except InputError as e:  # several at once (errors.InputErrors): one line each
        for line in getattr(e, "lines", lambda: [str(e)])():
            _fail(line, EXIT_INPUT)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader left (| head): the rest goes nowhere, not to a traceback
        silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:  # Ctrl-C: the shell's 128 + SIGINT, quietly
        return 130
    except Exception as e:  # a bug: one line and a hint unless --debug
        if debug:
            raise
        return _fail(f"internal error ({type(e).__name__}: {e}); rerun with --debug for the "
                     "traceback and please report it", EXIT_BUG)
