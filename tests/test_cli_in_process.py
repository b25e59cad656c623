"""The suite runs `dtplan` in-process (conftest.run_in_process: the console script's own
function on the argv, in the child's environment); these command lines hold that equal to a
real `dtplan` process byte for byte -- exit code, stdout and stderr -- across every kind of
outcome: an answer, JSON, a failing verdict, bad input, help, stdin, a written file; at the
default 200 columns and in narrower pipes."""

from __future__ import annotations

import pytest

from conftest import ROOT, run_in_process, run_subprocess

CASES = {
    "fit": ["fit", "--params", "70e9", "--gpus", "256"],
    "fit-json": ["fit", "--model", "llama3-8b", "--gpus", "64", "--format", "json"],
    "estimate": ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2"],
    "does-not-fit": ["fit", "--model", "llama3-70b", "--gpus", "1"],
    "check-fails": ["check", "examples/plans/fail-max-bubble.yaml"],
    "check-github": ["check", "--format", "github", "examples/plans/fail-min-mfu.yaml"],
    "bad-number": ["fit", "--params", "seven", "--gpus", "8"],
    "unknown-option": ["estimate", "--tp", "2", "--bogus"],
    "help": ["fit", "--help"],
    "top-help": ["--help"],
    "models": ["models"],
    "export": ["export", "--model", "llama3-8b", "--gpus", "8", "--to", "deepspeed"],
    "report-md": ["report", "--model", "llama3-8b", "--gpus", "16", "--format", "markdown"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_in_process_equals_the_real_process(name):
    argv = CASES[name]
    _same(run_in_process(argv), run_subprocess(argv))


# Narrower pipes, as the layout tests run them (COLUMNS 80 and 120): tables and help folded
# alike in both ways.
NARROW = {
    "fit-80": (["fit", "--model", "mixtral-8x7b", "--gpus", "64"], "80"),
    "check-engine-80": (["check", "examples/engines/megatron-llama3-70b-256gpu.sh"], "80"),
    "help-120": (["fit", "--help"], "120"),
}


@pytest.mark.parametrize("name", sorted(NARROW))
def test_in_process_equals_the_real_process_in_a_narrow_pipe(name):
    argv, columns = NARROW[name]
    _same(run_in_process(argv, columns=columns), run_subprocess(argv, columns=columns))


def _same(a, b):
    """Equal runs; else the first place they part, readably."""
    assert a.code == b.code, (a, b)
    for stream, x, y in (("stdout", a.out, b.out), ("stderr", a.err, b.err)):
        at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        assert x == y, (stream, at, x[max(0, at - 80):at + 80], y[max(0, at - 80):at + 80])


def test_stdin_and_a_written_file_alike(tmp_path):
    with open(f"{ROOT}/examples/plans/fail-max-bubble.yaml", encoding="utf-8") as f:
        plan = f.read()
    _same(run_in_process(["check", "-"], stdin=plan), run_subprocess(["check", "-"], stdin=plan))
    for way, runner in (("in", run_in_process), ("sub", run_subprocess)):
        (tmp_path / way).mkdir()
        r = runner(["report", "--model", "llama3-8b", "--gpus", "8", "-o", "review.md"],
                   cwd=tmp_path / way)
        assert r.code == 0, r
    assert (tmp_path / "in" / "review.md").read_bytes() == \
        (tmp_path / "sub" / "review.md").read_bytes()
