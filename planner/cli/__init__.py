"""The `dtplan` command: typer parses the options (the commands in this package, declared on
`planner.cli.root.app`), the library answers, the renderers print. `main` is the console
script; `planner.cli.dispatch.run(argv)` runs one command line and returns its exit code.

Exit codes (as linters use them): 0 fits / passes; 1 a valid question whose answer is "does not
fit" or "a rule fails"; 2 bad input or usage; 3 an internal error (a bug).
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

# BLAS thread pools dtplan never uses (its arrays are element-wise) cost start-up time; the
# user's own setting wins.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

# glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD.
_MALLOPT = ((-1, 1 << 27), (-2, 1 << 26), (-3, 1 << 26))


def _keep_freed_memory() -> None:
    """glibc gives every allocation over 128 KB its own mmap and unmaps it on free, so each of
    the search's large numpy temporaries page-faults afresh (~0.1 s CPU in `fit`); a process
    that lives a second keeps them on its heap instead. Linux/glibc only; MALLOC_* set by the
    user win."""
    if not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") for k in os.environ):
        return
    try:
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
    main() keeps off during the first imports is back on. Called once the commands are
    imported, and by `fit` again once it has imported its search; only in the console script's
    own process (a library caller's collector is left alone)."""
    if _CLI_PROCESS:
        gc.freeze()
        gc.enable()


def main() -> None:
    """The console script: one BLAS thread unless the user set a count, freed memory kept for
    reuse, then run."""
    if "numpy" not in sys.modules:
        for var in _BLAS_THREADS:
            os.environ.setdefault(var, "1")
    # pydantic scans every installed distribution's entry points for plugins when it builds its
    # first model (3-10 ms); dtplan's models need none. PYDANTIC_DISABLE_PLUGINS set by the user wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _keep_freed_memory()
    global _CLI_PROCESS
    _CLI_PROCESS = True
    gc.disable()   # imports build long-lived objects, not garbage: nothing to collect (settled)
    # Imported here, not at the top: the commands import numpy, which reads its thread count
    # (set just above) as it loads.
    from planner.cli.dispatch import run
    sys.exit(run(sys.argv[1:]))
