"""Property-based fuzz of the whole CLI (issue 18): invocations generated from the click tree's
own option metadata, and files mutated from examples/, keep the exit-code contract — exit in
{0, 1, 2}, never a traceback, an exit 2 is one line naming the option or file key:line, and a
valid invocation prints the same bytes when repeated. Runs in-process through
planner.cli.dispatch.run (the console script's code path); a sample is checked against the real
process.

Seeded (derandomize) so CI is reproducible. DTPLAN_FUZZ=large runs the bigger profile
(10,000 invocations, 2,000 files, 100 real-process calls, and GPU counts up to 10^7).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_dtplan
from fuzz_support import (LARGE, ROOT, Command, commands, contract_violation, example_files,
                          invocation, plan_line_violation, run_inprocess)

N_INVOCATIONS = 10_000 if LARGE else 2_000
N_FILES = 2_000 if LARGE else 500
N_REAL = 100 if LARGE else 10
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))

CMDS = commands()
SOURCES = (example_files("plans/*.yaml") + example_files("engines/*")
           + example_files("models/*/config.json")
           + sorted(str(p) for p in (ROOT / "hardware_profiles").glob("*.toml"))
           + sorted(str(p) for p in (ROOT / "framework_profiles").glob("*.toml")))


@pytest.fixture
def tmp(tmp_path_factory, request) -> Path:
    """Each fuzz test's own directory, and its working directory one level down: a drawn `..`
    (`check ..`) then reaches only what this test wrote, never the other tests' directories,
    whose contents depend on which tests ran first on the worker. (One directory per test
    function, not per example: hypothesis draws every example into the same one.)"""
    root = tmp_path_factory.mktemp(f"fuzz-{request.node.name[:40]}")
    (root / "cwd").mkdir()
    return root / "cwd"


def _names(cmd: Command) -> set[str]:
    return cmd.option_names


def test_the_tree_is_walked():
    """The metadata walk sees every command and the options the strategies rely on."""
    paths = {" ".join(c.path) for c in CMDS}
    assert {"fit", "estimate", "memory", "check", "report", "export", "layout"} <= paths
    fit = next(c for c in CMDS if c.path == ["fit"])
    assert {"--gpus", "--model-config", "--hardware-file", "--from-plan"} <= fit.option_names
    recompute = next(p for p in next(c for c in CMDS if c.path == ["estimate"]).params
                     if p.name == "recompute")
    assert recompute.choices == ["none", "selective", "full"]


@settings(max_examples=N_INVOCATIONS, **SETTINGS)
@given(data=st.data())
def test_generated_invocations_keep_the_contract(tmp, data):
    cmd, argv = data.draw(invocation(CMDS, tmp), label="argv")
    code, out, err = run_inprocess(argv, cwd=tmp)
    why = contract_violation(argv, code, out, err, _names(cmd))
    assert why is None, (argv, why)
    if code in (0, 1) and data.draw(st.integers(0, 7), label="repeat") == 0:
        again = run_inprocess(argv, cwd=tmp)
        assert again == (code, out, err), ("not identical on repeat", argv)


# ---- mutated example files ---------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")
HOSTILE_NUMBERS = ["0", "-1", "9223372036854775808", "9" * 400, "1e400", "-1e400", "0.5",
                   "4294967297", "9007199254740993", "1e300", "1e-300", "4294967296"]
HOSTILE_VALUES = ["true", "[]", "{}", '"x"', '"[x]"', ".nan", "~", "null", '"', "[[[[", "'"]


@st.composite
def mutated(draw) -> tuple[str, str, str]:
    """(kind, file name, text): an example file with one to three mutations."""
    src = Path(draw(st.sampled_from(SOURCES), label="source"))
    text = src.read_text()
    for _ in range(draw(st.integers(1, 3))):
        lines = text.splitlines(keepends=True) or ["\n"]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["number", "value", "delete", "duplicate", "truncate",
                                   "rename", "nest", "bytes"]))
        line = lines[i]
        if op == "number" and _NUMBER.search(line):
            line = _NUMBER.sub(draw(st.sampled_from(HOSTILE_NUMBERS)), line, count=1)
        elif op == "value":
            line = re.sub(r"([:=]\s*)\S.*?(,?\s*)$", lambda m: m.group(1)
                          + draw(st.sampled_from(HOSTILE_VALUES)) + m.group(2), line, count=1)
        elif op == "delete":
            line = ""
        elif op == "duplicate":
            line = line * 2
        elif op == "truncate":
            line = line[:draw(st.integers(0, len(line)))]
        elif op == "rename":
            line = re.sub(r"^(\s*[\"']?)([A-Za-z_-]+)", r"\1\2x", line, count=1)
        elif op == "nest":
            depth = draw(st.sampled_from([5, 40, 3000]))
            line = line + "deep: " + "[" * depth + "]" * depth + "\n"
        else:
            line = line + draw(st.sampled_from(["\x00", "\ufeff", "\u00e9", "\t"])) + "\n"
        lines[i] = line
        text = "".join(lines)
    if src.name == "config.json":
        return "model", f"{src.parent.name}.json", text
    kind = {"plans": "plan", "hardware_profiles": "hardware",
            "framework_profiles": "framework"}.get(src.parent.name, "engine")
    return kind, src.name, text


def _commands_for(kind: str, f: str) -> list[list[str]]:
    if kind == "model":
        return [["memory", "--model-config", f],
                ["estimate", "--model-config", f, "--gpus", "8", "-f", "json"]]
    if kind == "framework":
        return [["estimate", "--model", "llama3-8b", "--gpus", "64", "--tp", "8",
                 "--framework", f, "-f", "json"], ["memory", "--params", "7e9", "--framework", f]]
    if kind == "hardware":
        return [["memory", "--params", "7e9", "--hardware-file", f],
                ["estimate", "--model", "llama3-8b", "--gpus", "64", "--tp", "8",
                 "--hardware-file", f, "-f", "json"],
                ["fit", "--model", "llama3-8b", "--gpus", "64", "--hardware-file", f, "-f", "json"]]
    if kind == "plan":
        return [["check", f, "-f", "json"], ["export", f, "--to", "megatron"],
                ["fit", "--from-plan", f, "--gpus", "128", "-f", "json"]]
    return [["check", f, "--gpus", "256", "--model", "llama3-70b", "--seq-len", "4096",
             "-f", "json"]]


@settings(max_examples=N_FILES, **SETTINGS)
@given(case=mutated(), pick=st.integers(0, 2))
def test_mutated_example_files_keep_the_contract(tmp, case, pick):
    kind, name, text = case
    path = tmp / "mutated" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    runs = _commands_for(kind, str(path))
    argv = runs[pick % len(runs)]
    code, out, err = run_inprocess(argv, cwd=tmp)
    names = next(c for c in CMDS if c.path == argv[:1]).option_names
    why = contract_violation(argv, code, out, err, names)
    if why is None and kind == "plan" and code == 2:
        why = plan_line_violation(str(path), err)
    assert why is None, (argv, why, text[:2000])


@settings(max_examples=N_REAL, **SETTINGS)
@given(data=st.data())
def test_in_process_and_real_process_agree(tmp, data):
    cmd, argv = data.draw(invocation(CMDS, tmp), label="argv")
    code, _out, _err = run_inprocess(argv, cwd=tmp)
    real = run_dtplan(*argv, cwd=tmp)
    assert real.code == code, (argv, code, real.code, real.err[-300:])
