"""The `dtplan` command: parses options, calls the library, renders. A command declared in
`cli/registry.py` whose argv the binder (`cli/bind.py`) accepts runs without typer; everything
else — help, completion, usage errors, the other commands — goes through the typer app
(`cli/typer_app.py`, built on first use: `planner.cli.app`).

Exit codes (as linters use them): 0 fits / passes; 1 a valid question whose answer is "does not
fit" or "a rule fails"; 2 bad input or usage; 3 an internal error (a bug).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from planner.errors import InputError

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_BUG = 0, 1, 2, 3

HELP = """Capacity and layout planner for distributed training of large models.

Exit codes: 0 fits / passes; 1 does not fit / a rule fails; 2 bad input or usage;
3 internal error (rerun with --debug for the traceback).

Numbers take K/M/B/T suffixes (70B parameters, 4M tokens, 15T tokens) and Ki/Mi/Gi/Ti;
sequence lengths read 8k as 8192.

`dtplan --version` prints the version; `dtplan completion bash|zsh|fish` the shell completion."""



def __getattr__(name: str) -> Any:
    """`app`, the typer app (every command registered so far, and each one after), built on
    first use: the common path never imports typer."""
    if name == "app":
        from planner.cli.typer_app import app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Importing a module registers its commands. Only the invoked command's module is imported
# (each costs imports and click objects); anything else (--help, a typo) imports them all, and
# `dtplan --help` lists them in this order.
MODULES = ("fit_cmd", "plan_cmds", "catalog", "gate", "report_cmds", "quick", "calibrate", "compare",
           "completion")
COMMANDS = {"fit": "fit_cmd", "estimate": "plan_cmds", "memory": "plan_cmds",
            "models": "catalog", "profiles": "catalog", "check": "gate", "schema": "gate",
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
        from planner.specs.selection import command_scope
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


# Set (to anything) in the environment: every argv goes through typer (tests compare the two).
TYPER_ONLY_VAR = "_DTPLAN_TYPER_ONLY"


def _help_or_typo(argv: list[str]) -> bool:
    return not argv or "--help" in argv or "-h" in argv or argv[0] not in COMMANDS


def _bound(argv: list[str]) -> Any:
    """The call of the command argv names with the keyword arguments the argv binder gives it,
    or None where typer must parse (see cli/bind.py)."""
    from planner.cli.registry import DEFINED
    fn = DEFINED.get(argv[0])
    if fn is None:
        return None
    from planner.cli.bind import bind
    kwargs = bind(fn, argv[1:])
    return None if kwargs is None else (lambda: fn(**kwargs))


def run(argv: list[str]) -> int:
    """Run the CLI on argv and return the exit code (used by main and by tests)."""
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] in (["--version"], ["-V"]):
        sys.stdout.write(f"dtplan {_version()}\n")
        return EXIT_OK
    completing = COMPLETE_VAR in os.environ
    if completing:  # a shell asking for candidates: every command
        register([])
        from planner.cli.completion import enable_completion
        enable_completion()
    else:
        register(argv)
    settled()
    help_screen = _help_or_typo(argv)
    fast = not (completing or TYPER_ONLY_VAR in os.environ or help_screen)
    try:
        with _scope(argv):   # a --framework / plan / engine-config selection lasts one run
            call = _bound(argv) if fast else None
            if call is not None:
                rv = call()
            else:
                from planner.cli import typer_app
                rv = typer_app.main(argv, help_screen=help_screen)
    except InputError as e:  # several at once (errors.InputErrors): one line each
        for line in getattr(e, "lines", lambda: [str(e)])():
            _fail(line, EXIT_INPUT)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader left (| head): the rest goes nowhere, not to a traceback
        from planner.io.stdout import silence_stdout
        silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:  # Ctrl-C: the shell's 128 + SIGINT, quietly (as typer's path)
        return 130
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


# Set by main(): the console script's own process, whose imports live until it exits.
_CLI_PROCESS = False


def settled() -> None:
    """Every object so far lives until exit (modules, classes): moved out of the collector's
    sight (gc.freeze), so the search's full collections stop walking numpy's and dtplan's
    modules again and again (2-5 % of a `fit`'s instructions, callgrind), and the collector
    main() keeps off during the first imports is back on. Called once the command's module is
    imported, and by `fit` again once it has imported its search; only in the console script's
    own process (a library caller's collector is left alone)."""
    if _CLI_PROCESS:
        import gc
        gc.freeze()
        gc.enable()


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
    global _CLI_PROCESS
    _CLI_PROCESS = True
    import gc
    gc.disable()   # imports build long-lived objects, not garbage: nothing to collect (settled)
    sys.exit(run(sys.argv[1:]))
