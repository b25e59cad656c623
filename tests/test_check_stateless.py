"""`check` holds no state between files: each file's verdict is the one it gets alone, whatever
files come before it on the command line (issue 26: a plan's `framework: deepspeed` used to
carry into every later file, so the repository's passing plan failed the README's glob)."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, tree_built_once
from planner.cli.dispatch import run
from planner.gate import check as gate

PLANS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(f"{ROOT}/examples/plans/*.yaml"))
ENGINES = sorted(os.path.relpath(p, ROOT) for p in glob.glob(f"{ROOT}/examples/engines/*")
                 if not p.endswith(".expect"))
# Engine configs that state no GPU count are bad input without --gpus: they stay in the draw,
# since a file that errors must not change the next one's verdict either.
FILES = PLANS + ENGINES
PASSING = "examples/plans/llama3-70b-256xh100.yaml"
DEEPSPEED_PLAN = "examples/plans/fail-zero-with-pp.yaml"   # states `framework: deepspeed`

# What a verdict says about its file. The fix and its note are left out: a run computes fixes
# for its first few failing files only (gate.MAX_FIXES), so they depend on the order by design.
FIELDS = ("file", "kind", "ok", "error", "errors", "counts", "summary", "rules")


def _cli_json(paths: list[str]) -> dict[str, dict[str, Any]]:
    """`dtplan check PATHS -f json` run in this process (the console script's own function), so
    that any state one file leaves in the package is there when the next file is checked."""
    out = io.StringIO()
    # typer's click tree built once, as in a process (conftest.tree_built_once)
    with tree_built_once(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(io.StringIO()):
        run(["check", *paths, "-f", "json"])
    return {f["file"]: {k: f.get(k) for k in FIELDS} for f in json.loads(out.getvalue())["files"]}


@pytest.fixture(scope="module")
def no_fixes():
    """No fixes in the property's runs: they do not enter the comparison and cost seconds."""
    mp = pytest.MonkeyPatch()
    mp.setattr(gate, "MAX_FIXES", 0)
    mp.chdir(ROOT)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def alone(no_fixes: None) -> dict[str, dict[str, Any]]:
    """Each shipped file's verdict when it is the only file checked."""
    return {f: _cli_json([f])[f] for f in FILES}


def test_the_examples_name_two_frameworks(alone):
    """The property below is only worth something if the examples disagree on the framework."""
    names = {alone[f]["summary"]["framework"]
             for f in (PASSING, DEEPSPEED_PLAN, "examples/engines/megatron-llama3-70b-256gpu.sh")}
    assert names == {"megatron", "deepspeed"}


@settings(max_examples=12, deadline=None)
@given(order=st.permutations(FILES).map(lambda xs: xs[:6]))
def test_each_file_gets_its_own_verdict_in_any_order(order, alone):
    """check A B ≡ check B A per file: the verdicts of any files in any order are the ones
    each gets alone."""
    got = _cli_json(list(order))
    assert list(got) == list(order)
    for f, v in got.items():
        assert v == alone[f], f


def _by_file(run) -> dict[str, dict[str, Any]]:
    return {f["file"]: {k: f.get(k) for k in FIELDS} for f in run.json()["files"]}


def test_cli_check_a_b_equals_b_a(dtplan):
    """Through the real entry point: a DeepSpeed plan first or second, the passing plan passes."""
    ab = _by_file(dtplan("check", DEEPSPEED_PLAN, PASSING, "-f", "json", cwd=ROOT))
    ba = _by_file(dtplan("check", PASSING, DEEPSPEED_PLAN, "-f", "json", cwd=ROOT))
    assert ab == ba
    assert ab[PASSING]["ok"] and ab[PASSING]["summary"]["framework"] == "megatron"
    assert ab[DEEPSPEED_PLAN]["summary"]["framework"] == "deepspeed"


def test_readme_glob_passes_the_passing_plan(dtplan):
    """The README's `dtplan check --format github examples/plans/*.yaml`: annotations for the
    failing plans only; the passing plan and the warning plan get no error."""
    line = next(x for x in (Path(ROOT) / "README.md").read_text().splitlines()
                if "check --format github examples/plans/*.yaml" in x)
    words = shlex.split(line.lstrip("$ ").split("#")[0])
    assert words[:2] == ["dtplan", "check"]
    args = [w for w in words[1:] if "*" not in w] + PLANS   # the shell's sorted expansion
    r = dtplan(*args, cwd=ROOT)
    assert r.code == 1
    errors = {x.split("file=")[1].split(",")[0] for x in r.out.splitlines()
              if x.startswith("::error")}
    assert PASSING not in errors and "examples/plans/warn-checkpoint-interval.yaml" not in errors
    assert errors == {p for p in PLANS if Path(p).name.startswith("fail-")}


def test_check_directory_judges_the_megatron_script_by_megatron(dtplan):
    j = dtplan("check", "examples/", "-f", "json", cwd=ROOT).json()
    by = {f["file"]: f for f in j["files"]}
    script = by["examples/engines/megatron-llama3-70b-256gpu.sh"]
    assert script["kind"] == "megatron" and script["summary"]["framework"] == "megatron"
    assert by[PASSING]["ok"] and by[PASSING]["summary"]["framework"] == "megatron"
    # every plan without a `framework:` key is judged by the default, wherever it comes
    for f, v in by.items():
        if f in PLANS and "framework:" not in (Path(ROOT) / f).read_text():
            assert v["summary"]["framework"] == "megatron", f


def test_pre_commit_hook_gives_each_file_its_verdict(dtplan):
    """The shipped hook's entry with several files (pre-commit passes them in one call)."""
    hooks = yaml.safe_load((Path(ROOT) / ".pre-commit-hooks.yaml").read_text())
    entry = shlex.split(next(h["entry"] for h in hooks if h["id"] == "dtplan-check"))
    assert entry[:2] == ["dtplan", "check"]
    files = [DEEPSPEED_PLAN, PASSING, "examples/plans/fail-fits-in-memory.yaml"]
    r = dtplan(*entry[1:], *files, "-f", "json", cwd=ROOT)
    by = _by_file(r)
    assert r.code == 1 and by[PASSING]["ok"]
    assert not by[DEEPSPEED_PLAN]["ok"] and not by[files[2]]["ok"]
    for f in files:
        alone = _by_file(dtplan(*entry[1:], f, "-f", "json", cwd=ROOT))[f]
        assert by[f] == alone, f
