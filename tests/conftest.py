"""Shared helpers: run the installed `dtplan` entry point as a user would."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest
from hypothesis import settings

# Every property test draws the same examples on every run (the suite is deterministic, as CI
# needs); DTPLAN_HYPOTHESIS=random explores new draws locally.
settings.register_profile("dtplan", derandomize=True, database=None)
settings.register_profile("random", derandomize=False)
settings.load_profile("random" if os.environ.get("DTPLAN_HYPOTHESIS") == "random" else "dtplan")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Run:
    """One CLI run: exit code, stdout, stderr (also under subprocess's names)."""

    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    returncode = property(lambda self: self.code)
    stdout = property(lambda self: self.out)
    stderr = property(lambda self: self.err)

    def json(self):
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"Run(code={self.code}, err={self.err[-500:]!r})"


def _command() -> list[str]:
    exe = shutil.which("dtplan")
    return [exe] if exe else [sys.executable, "-m", "planner"]


# What makes rich write escape sequences into a pipe (a CI runner may set FORCE_COLOR): the
# children print plain text whatever the caller's environment says.
TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE")


# The child's environment: a wide terminal (COLUMNS `columns`), and bytecode caching on as for
# an installed wheel (PYTHONDONTWRITEBYTECODE=1 in the caller's environment would make every
# `dtplan` run recompile the planner's modules, ~60 ms each of the suite's ~600 runs).
def child_env(columns: str = "200") -> dict[str, str]:
    drop = ("PYTHONDONTWRITEBYTECODE", *TERMINAL_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "COLUMNS": columns}


# How the tests run `dtplan`. In-process by default: the console script's own function
# (planner.cli:main) on the argv, with the child's environment,
# working directory, stdin and fresh stdout/stderr swapped in -- the same parsing, rendering
# and exit codes without a Python start-up per run (~0.35 s each, most of the suite's time).
# DTPLAN_TEST_SUBPROCESS=1 runs every call as a real `dtplan` process instead; tests of
# process-level behaviour (locale, umask, pipes, signals) always do, and
# tests/test_cli_in_process.py holds the two ways equal byte for byte.
SUBPROCESS = os.environ.get("DTPLAN_TEST_SUBPROCESS") == "1"


def run_dtplan(*args, cwd=None, stdin: str | None = None, columns: str = "200") -> Run:
    """Call the real `dtplan` entry point: run_dtplan("memory", "--params", "7e9"), its output
    laid out for a pipe `columns` wide."""
    argv = [str(a) for a in args]
    if SUBPROCESS or "--debug" in argv:   # --debug lets a traceback out of the process
        return run_subprocess(argv, cwd=cwd, stdin=stdin, columns=columns)
    return run_in_process(argv, cwd=cwd, stdin=stdin, columns=columns)


def run_subprocess(argv: list[str], cwd=None, stdin: str | None = None,
                   columns: str = "200") -> Run:
    """`dtplan` as its own process, as a user runs it."""
    p = subprocess.run(_command() + argv, capture_output=True, text=True,
                       cwd=str(cwd or ROOT), input=stdin, timeout=120, env=child_env(columns))
    return Run(p.returncode, p.stdout, p.stderr)


# Python's own warning filters for a script (what the child process starts with; pytest's
# are wider and would swallow what a user sees on stderr).
_PYTHON_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                   ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                   ("ignore", ResourceWarning, ""))


def _universal(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")   # as subprocess's text mode reads


@contextlib.contextmanager
def _as_child(cwd, stdin: str | None, warn: str | None = None, columns: str = "200"):
    """This process dressed as the child: its environment, directory, argv and streams, and
    Python's warning filters for a script (or one action for every warning: `warn`)."""
    saved = (dict(os.environ), os.getcwd(), sys.argv, sys.stdin, sys.stdout, sys.stderr)
    env = child_env(columns)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(str(cwd or ROOT))
    given = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    sys.stdin, sys.stdout, sys.stderr = given, io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_PYTHON_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            if warn:
                warnings.simplefilter(warn)
            warnings.showwarning = _show_warning
            yield sys.stdout, sys.stderr
    finally:
        os.environ.clear()
        os.environ.update(saved[0])
        os.chdir(saved[1])
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved[2:]


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


# The click command tree typer builds from the registered commands, once per set of them: a
# process builds it once (dispatch._parse_and_call), and building it for every command module
# takes ~30 ms, more than most runs take after it (once any test has imported every command
# module, as --help does). Keyed on what is registered, which only grows.
_TREES: dict[tuple[int, int, int], object] = {}


def _tree_once(build):
    def get_group(typer_instance):
        key = (id(typer_instance), len(typer_instance.registered_commands),
               len(typer_instance.registered_groups))
        if key not in _TREES:
            _TREES[key] = build(typer_instance)
        return _TREES[key]
    return get_group


@contextlib.contextmanager
def tree_built_once():
    """typer.main.get_group built once per registered set for the run (unless a caller already
    put its own builder in place: tests/fuzz_support.py rebuilds now and then)."""
    import typer.main

    build = typer.main.get_group
    if build.__module__ != "typer.main":
        yield
        return
    typer.main.get_group = _tree_once(build)
    try:
        yield
    finally:
        typer.main.get_group = build


def run_in_process(argv: list[str], cwd=None, stdin: str | None = None,
                   warn: str | None = None, columns: str = "200") -> Run:
    """`dtplan` in this process: the console script's function (planner.cli:main, what
    [project.scripts] names) on sys.argv, its exit status taken as the interpreter takes it.
    main() leaves its process-wide settings behind (the collector frozen and re-enabled, the
    console-script flag): undone here, so the next test's process is the test runner's again."""
    import planner.cli
    from planner.cli import main

    collecting = gc.isenabled()
    with tree_built_once(), _as_child(cwd, stdin, warn, columns) as (out, err):
        sys.argv = ["dtplan", *argv]
        try:
            main()
            code = 0
        except SystemExit as e:   # as the interpreter turns sys.exit(x) into an exit status
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                err.write(f"{e.code}\n")
        finally:
            planner.cli._CLI_PROCESS = False
            gc.unfreeze()
            (gc.enable if collecting else gc.disable)()
    return Run(code, _universal(out.getvalue()), _universal(err.getvalue()))


def one_input_error(r: Run, *needles: str) -> str:
    """The run's one stderr line for a bad input (exit 2, no traceback), holding each needle."""
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="session")
def dtplan():
    return run_dtplan


# ---- the order files are handed to the two workers ---------------------------------------------

# Files whose run is long for their number of tests (seconds, run alone with -n0 on a shared
# 2-core machine: `pytest -n0 --durations=0 tests/FILE`; up to 2x apart with the machine's
# load), longest first. `--dist loadfile` gives
# each worker one file at a time in collection order (--no-loadscope-reorder in addopts), so
# these start first and no worker sits idle at the end while the other finishes one of them
# (xdist's own order, most tests first, put the 4-test CLI fuzz file last but a dozen).
LONG_FILES = ("test_hostile_locale.py",     # 29-60 s: three real processes per command
              "test_fuzz_cli.py",           # 35-50 s: 2,500 generated runs
              "test_docs_outputs.py",       # 17-25 s
              "test_ux_cli.py",             # 16 s
              "test_cli_in_process.py",     # 15 s: a real process per case
              "test_hostile_evidence.py",   # 14 s
              "test_pipeline_stages.py",    # 12 s
              "test_search_reference.py",   # 11 s
              "test_report.py",             # 11 s
              "test_hostile_writers.py",    # 10 s
              "test_gate.py",               # 7-10 s
              "test_search_front.py",       # 9 s
              "test_ux_review.py")          # 8 s


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in LONG_FILES' order first, then the rest with the most tests first (xdist's
    default); each file's tests stay together and in their order (a stable sort)."""
    count: dict[str, int] = {}
    for item in items:
        count[item.path.name] = count.get(item.path.name, 0) + 1

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        name = item.path.name
        long = LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)
        return long, -count[name], str(item.path)

    items.sort(key=rank)
