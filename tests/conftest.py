"""Shared helpers: run the installed `dtplan` entry point as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def _command() -> list[str]:
    exe = shutil.which("dtplan")
    return [exe] if exe else [sys.executable, "-m", "planner"]


@pytest.fixture(scope="session")
def dtplan():
    """Call the real `dtplan` console script: dtplan("memory", "--params", "7e9")."""
    base = _command()

    def run(*args: str, cwd: str | None = None, stdin: str | None = None) -> Run:
        p = subprocess.run(base + [str(a) for a in args], capture_output=True, text=True,
                           cwd=cwd or ROOT, input=stdin, timeout=120,
                           env={**os.environ, "COLUMNS": "200"})
        return Run(p.returncode, p.stdout, p.stderr)

    return run
