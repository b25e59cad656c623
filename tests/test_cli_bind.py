"""The argv binder (planner/cli/bind.py) against typer (issue #15 must-show 3): over argv drawn
from the commands' own option declarations, the binder gives exactly the keyword arguments typer
gives, or both refuse; the real `dtplan` prints the same bytes with the binder on and off; and a
fit by flags imports no typer."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from enum import Enum
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, child_env, run_dtplan
from planner.cli import TYPER_ONLY_VAR, register
from planner.cli.bind import _table, bind
from planner.cli.options import Opt
from planner.cli.registry import DEFINED
from planner.cli.typer_app import typer_form

BOUND = ("fit", "estimate", "memory", "layout", "comm", "bubble", "batch", "checkpoint", "scaling")
register(["fit"]), register(["memory"]), register(["layout"])


def _stub(fn: Any) -> tuple[Any, list[dict[str, Any]]]:
    """A function declared as `fn` (same signature, same Opt defaults) that records its keyword
    arguments instead of running the command."""
    seen: list[dict[str, Any]] = []

    def stub(**kw: Any) -> int:
        seen.append(kw)
        return 0
    stub.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    stub.__annotations__ = dict(fn.__annotations__)
    stub.__doc__ = fn.__doc__
    return stub, seen


def _typer_command(stub: Any) -> Any:
    app = typer.Typer(add_completion=False)
    app.command("x")(typer_form(stub))
    return typer.main.get_command(app)


STUBS = {name: _stub(DEFINED[name]) for name in BOUND}
CLICK = {name: _typer_command(stub) for name, (stub, _) in STUBS.items()}


def _typed(kw: dict[str, Any]) -> dict[str, Any]:
    """Values with their types: 8 and 8.0 and "8" differ, as do a list and a tuple."""
    return {k: (type(x).__name__, repr(x)) for k, x in kw.items()}


def _via_typer(name: str, argv: list[str]) -> dict[str, Any] | None:
    stub, seen = STUBS[name]
    seen.clear()
    try:
        CLICK[name].main(args=argv, prog_name="dtplan", standalone_mode=False)
    except Exception:   # usage errors, parser refusals: typer refuses
        return None
    return seen[-1]


def _options(name: str) -> list[tuple[Opt, Any]]:
    """(declaration, annotation) of each option of the command."""
    sig = inspect.signature(DEFINED[name], eval_str=True)
    return [(p.default, p.annotation) for p in sig.parameters.values()
            if isinstance(p.default, Opt)]


_NUMBERS = ["0", "1", "2", "3", "4", "8", "1.5", "-1", "7e9", "70B", "8k", "4Mi", "1e300",
            "1e-3", "0.05", "auto", "x", "", " 8", "9007199254740993", "nan", "1_000"]
_TEXTS = ["none", "full", "selective", "bf16", "fp8", "adam", "megatron", "h100", "llama3-8b",
          "swiglu", "1f1b", "interleaved", "cpu", "auto", "x y", "[b]t[/b]", ""]
_FORMATS = ["table", "json", "markdown", "yaml", "JSON", ""]
_LISTS = ["8", "8,16", "64..1024", "256", "0", "x", "8,", ""]


def _values(o: Opt, form: str) -> st.SearchStrategy[str]:
    """Half the time a value the option takes, else any of the pool (out of range, garbage)."""
    near = []
    for bound in (o.lower, o.upper):
        if bound is not None and abs(bound) < 1e18:
            near += [f"{bound:g}", f"{bound + 1:g}", f"{bound - 1:g}"]
    pools = {"number": _NUMBERS + near, "list": _LISTS, "choice": _FORMATS}
    default = [] if o.default in (None, ...) else [str(getattr(o.default, "value", o.default))]
    good = {"number": ["1", "2", "4"] + (["auto"] if o.auto else []), "list": ["8", "8,16"],
            "choice": ["json", "markdown"]}.get(form, default or ["none"])
    return st.one_of(st.sampled_from(good), st.sampled_from(pools.get(form, _TEXTS + default)))


def _form(o: Opt, annotation: Any) -> str:
    if o.kind == "flag":
        return "flag"
    if o.check() is not None:
        return "number"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "choice"
    return "list" if "List" in str(annotation) or "list" in str(annotation) else "text"


@st.composite
def _argv(draw: Any, name: str) -> list[str]:
    opts = _options(name)
    required = [o for o, _ in opts if o.default is ...]
    out: list[str] = []
    if draw(st.integers(0, 3)):   # most draws give the required options a good value first
        for o in required:
            out += [o.flag, "8" if o.check() is not None or o.flag == "--gpus" else "4"]
    for _ in range(draw(st.integers(0, 9))):
        o, annotation = draw(st.sampled_from(opts))
        names = [n for d in (*o.flags, *o.aliases) for n in d.split("/")]
        flag = draw(st.sampled_from(names))
        kind = _form(o, annotation)
        if kind == "flag":
            out += [flag] if draw(st.integers(0, 19)) else [f"{flag}=1"]
            continue
        value = draw(_values(o, kind))
        if value.startswith("-") and not flag.startswith("--"):
            continue     # a dash-led value after a short flag: the binder hands it over (below)
        if flag.startswith("--") and (value.startswith("-") or draw(st.booleans())):
            out.append(f"{flag}={value}")
        else:
            out += [flag, value]
    if draw(st.integers(0, 9)) == 0:   # first, where no option can take it as its value
        junk = draw(st.sampled_from(["--bogus", "word", "-x"] + (["--"] if out else [])))
        out.insert(0, junk)
    return out


SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("name", BOUND)
@settings(max_examples=200, **SETTINGS)
@given(data=st.data())
def test_the_binder_gives_typers_keyword_arguments_or_both_refuse(name, data):
    argv = data.draw(_argv(name), label="argv")
    fast, slow = bind(STUBS[name][0], argv), _via_typer(name, argv)
    assert (fast is None) == (slow is None), (argv, fast and _typed(fast), slow and _typed(slow))
    if fast is not None:
        assert _typed(fast) == _typed(slow), argv


def test_every_option_of_the_bound_commands_is_an_opt():
    # the binder reads them all: a typer.Option default would send the command to typer always
    for name in BOUND:
        assert _table(DEFINED[name]) is not None, name


def test_the_plain_grammar_is_bound():
    stub = STUBS["fit"][0]
    kw = bind(stub, ["--params=70e9", "--gpus", "8,16", "--gpus=64..256", "-f", "json", "--tp", "2",
                     "--tp", "4", "--dropout", "--no-dropout", "--top", "3"])
    assert kw["gpus"] == ["8,16", "64..256"] and kw["tp"] == 4 and kw["dropout"] is False
    assert kw["fmt"].value == "json" and kw["top"] == 3 and kw["params"] == "70e9"
    for argv in (["--gpus"], ["--gpus", "8", "--tp", "-2"], ["--gpus", "8", "extra"],
                 ["--gpus", "8", "--"], ["--gpus", "8", "-fjson"], ["--gpus", "8", "--wide=1"],
                 ["--gpus", "8", "--top", "1.5"], ["--gpus", "8", "-f", "yaml"], []):
        assert bind(stub, argv) is None, argv


# ---- the real entry point, with the binder on and off ---------------------------------------

SAME = [
    ["fit", "--params", "70e9", "--gpus", "256", "-f", "json"],
    ["fit", "--params", "70e9", "--gpus", "256", "--top", "3"],
    ["fit", "--model", "llama3-8b", "--gpus=64", "--seq-len", "8k", "--tp", "2", "--zero", "1",
     "--objective", "cost", "--top", "3", "-f", "markdown"],
    ["fit", "--params", "70e9", "--gpus", "256", "--tp", "1.5"],
    ["fit", "--params", "70e9", "--gpus", "256", "--top", "5000"],
    ["estimate", "--model", "llama3-70b", "--gpus", "256", "--tp", "8", "--pp", "4", "--zero", "1",
     "--train-tokens", "15e12", "-f", "json"],
    ["estimate", "--model", "llama3-8b", "--gpus", "8", "--micro-batch", "auto", "--sp",
     "--gpu-mtbf-hours", "1e4", "--job-mtbf-hours", "5"],
    ["memory", "--params", "7e9", "--gpus", "8", "--zero", "2", "-f", "json"],
    ["memory", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--recompute",
     "selective", "--train-tokens", "1T", "--gib"],
    ["memory", "--model", "llama3-8b", "--gpus", "8", "--zero", "7"],
    ["layout", "--gpus", "256", "--tp", "8", "--pp", "4", "--show-groups", "-f", "json"],
    ["checkpoint", "--model", "llama3-70b", "--gpus", "1024", "--intervals", "15,60"],
    ["bubble", "--stages", "8", "--micro-batches", "8,32", "--schedule", "interleaved",
     "--chunks", "2"],
]


def _real(argv: list[str], typer_only: bool) -> tuple[int, str, str]:
    env = child_env()
    if typer_only:
        env[TYPER_ONLY_VAR] = "1"
    p = subprocess.run([sys.executable, "-m", "planner", *argv], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("argv", SAME, ids=[" ".join(a[:4]) for a in SAME])
def test_the_real_command_prints_the_same_bytes_with_the_binder_on_and_off(argv):
    assert _real(argv, False) == _real(argv, True)


def test_the_entry_point_is_the_one_compared():
    r = run_dtplan("memory", "--params", "7e9", "--gpus", "8")
    assert r.code == 0 and (r.code, r.out, r.err) == _real(["memory", "--params", "7e9", "--gpus",
                                                            "8"], True)


_LOADED = ("import sys, io; from planner.cli import main; sys.argv = ['dtplan'] + {argv!r}; "
           "out, sys.stdout = sys.stdout, io.StringIO()\n"
           "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
           "sys.stdout = out\n"
           "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click')))")


@pytest.mark.parametrize("argv", [["fit", "--params", "70e9", "--gpus", "256", "-f", "json"],
                                  ["estimate", "--model", "llama3-8b", "--gpus", "8"],
                                  ["memory", "--params", "7e9", "--gpus", "8"]])
def test_a_command_by_flags_imports_no_typer_or_click(argv):
    p = subprocess.run([sys.executable, "-c", _LOADED.format(argv=argv)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT,
                       env={k: v for k, v in os.environ.items() if k != TYPER_ONLY_VAR})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split(" ", 1)[1].strip() == "[]", p.stdout
