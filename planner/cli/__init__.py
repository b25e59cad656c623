"""The `dtplan` command: a thin typer layer that parses options, calls the library, renders.

Exit codes (as linters use them): 0 fits / passes; 1 a valid question whose answer is "does not
fit" or "a rule fails"; 2 bad input or usage; 3 an internal error (a bug).
"""

from __future__ import annotations

import os
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

Numbers take K/M/B/T suffixes (70B parameters, 4M tokens, 15T tokens) and Ki/Mi/Gi/Ti;
sequence lengths read 8k as 8192.

`dtplan --version` prints the version; `dtplan completion bash|zsh|fish` the shell completion."""

app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, rich_markup_mode="markdown",
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})

# Importing a module registers its commands. Only the invoked command's module is imported
# (each costs imports and click objects); anything else (--help, a typo) imports them all, and
# `dtplan --help` lists them in this order.
MODULES = ("fit_cmd", "plan_cmds", "gate", "report_cmds", "quick", "calibrate", "compare",
           "completion")
COMMANDS = {"fit": "fit_cmd", "estimate": "plan_cmds", "memory": "plan_cmds",
            "models": "plan_cmds", "profiles": "plan_cmds", "check": "gate", "schema": "gate",
            "report": "report_cmds", "export": "report_cmds", "comm": "quick", "bubble": "quick",
            "batch": "quick", "checkpoint": "quick", "scaling": "quick", "layout": "quick",
            "calibrate": "calibrate", "compare": "compare", "completion": "completion"}

# BLAS thread pools dtplan never uses (its arrays are element-wise) cost start-up time; the
# user's own setting wins.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def register(argv: list[str]) -> None:
    """Import the module of the command argv names, or every command module."""
    import importlib
    name = argv[0] if argv else None
    for mod in (COMMANDS[name],) if name in COMMANDS else MODULES:
        importlib.import_module(f"{__name__}.{mod}")


def _scope(argv: list[str]):
    """The framework selection's per-run scope, for a command; --help and typos select nothing.
    (The selection's state has its own module: opening the scope loads no profile model.)"""
    if argv and argv[0] in COMMANDS:
        from ..specs.selection import command_scope
        return command_scope()
    import contextlib
    return contextlib.nullcontext()


# The variable a shell sets when it asks `dtplan` for completion candidates.
COMPLETE_VAR = "_DTPLAN_COMPLETE"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("dtplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _fail(message: str, code: int) -> int:
    # One line whatever the user typed: control characters in echoed values are escaped.
    message = "".join(ch if ch >= " " and ch != "\x7f" else repr(ch)[1:-1] for ch in message)
    sys.stderr.write(f"dtplan: error: {message}\n")
    return code


def run(argv: list[str]) -> int:
    """Run the CLI on argv and return the exit code (used by main and by tests)."""
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"dtplan {_version()}\n")
        return EXIT_OK
    if COMPLETE_VAR in os.environ:  # a shell asking for candidates: every command
        register([])
        from .completion import enable_completion
        enable_completion()
    else:
        register(argv)
    command = typer.main.get_group(app)  # a group even when one command is registered
    if not argv or "--help" in argv or "-h" in argv or argv[0] not in COMMANDS:
        from .help import polish  # panels, metavars and examples: only a help screen needs them
        command = polish(command)
    try:
        with _scope(argv):   # a --framework / plan / engine-config selection lasts one run
            rv = command.main(args=argv, prog_name="dtplan", standalone_mode=False)
    except InputError as e:  # several at once (errors.InputErrors): one line each
        for line in getattr(e, "lines", lambda: [str(e)])():
            _fail(line, EXIT_INPUT)
        return EXIT_INPUT
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


# glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD.
_MALLOPT = ((-1, 1 << 27), (-2, 1 << 26), (-3, 1 << 26))


def _keep_freed_memory() -> None:
    """glibc gives every allocation over 128 KB its own mmap and unmaps it on free, so each of
    the search's large numpy temporaries page-faults afresh (~0.1 s CPU in `fit`); a process
    that lives a second keeps them on its heap instead. Linux/glibc only; MALLOC_* set by the
    user win."""
    import os
    if not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") for k in os.environ):
        return
    try:
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    for param, value in _MALLOPT:
        mallopt(param, value)


def main() -> None:
    """The console script: one BLAS thread unless the user set a count, freed memory kept for
    reuse, then run."""
    import os
    if "numpy" not in sys.modules:
        for var in _BLAS_THREADS:
            os.environ.setdefault(var, "1")
    # pydantic scans every installed distribution's entry points for plugins when it builds its
    # first model (3-10 ms); dtplan's models need none. PYDANTIC_DISABLE_PLUGINS set by the user wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _keep_freed_memory()
    sys.exit(run(sys.argv[1:]))
