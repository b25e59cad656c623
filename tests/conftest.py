"""Shared helpers: run the installed `dtplan` entry point as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

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

    def __init__(self, p: subprocess.CompletedProcess):
        self.code, self.out, self.err = p.returncode, p.stdout, p.stderr

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


# The child's environment: a wide terminal, and bytecode caching on as for an installed wheel
# (PYTHONDONTWRITEBYTECODE=1 in the caller's environment would make every `dtplan` run
# recompile the planner's modules, ~60 ms each of the suite's ~600 runs).
def child_env() -> dict[str, str]:
    drop = ("PYTHONDONTWRITEBYTECODE", *TERMINAL_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "COLUMNS": "200"}


def run_dtplan(*args, cwd=None, stdin: str | None = None) -> Run:
    """Call the real `dtplan` console script: run_dtplan("memory", "--params", "7e9")."""
    p = subprocess.run(_command() + [str(a) for a in args], capture_output=True, text=True,
                       cwd=str(cwd or ROOT), input=stdin, timeout=120, env=child_env())
    return Run(p)


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
