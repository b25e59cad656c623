"""The CLI's start-up work: lazy command registration, one profile parsed, no BLAS threads."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

from planner import cli
from planner.cli import dispatch
from planner.cli.root import app
from planner.specs import hardware_toml as hardware

CLI_DIR = pathlib.Path(cli.__file__).parent


def test_every_command_maps_to_the_module_that_registers_it():
    for mod in dispatch.MODULES:
        importlib.import_module(f"planner.cli.{mod}")
    registered = {c.name: c.callback.__module__.rsplit(".", 1)[1] for c in app.registered_commands}
    registered.update({g.name: g.typer_instance.registered_callback.callback.__module__.rsplit(".", 1)[1]
                       for g in app.registered_groups})
    assert registered == dispatch.COMMANDS


def test_every_module_that_registers_commands_is_listed():
    registering = {p.stem for p in CLI_DIR.glob("*.py")
                   if re.search(r"(?m)^@command\(|app\.add_typer", p.read_text())}
    assert registering == set(dispatch.MODULES)


def _child(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in cli._BLAS_THREADS}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**base, **env}, timeout=60, check=True)
    return p.stdout.strip()


# The console script with a stand-in for the run it imports: what is set and loaded by then.
_PROBE = ("import os, sys, types; run = types.ModuleType('planner.cli.dispatch'); "
          "sys.modules[run.__name__] = run; run.run = lambda argv: print("
          "os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('OMP_NUM_THREADS'), "
          "'numpy' in sys.modules, sorted(m for m in sys.modules if m.startswith('planner.cli.') "
          "and m != run.__name__)) or 0; import planner.cli as c; c.main()")


def test_entry_point_starts_one_blas_thread_and_imports_no_command_yet():
    assert _child(_PROBE) == "1 1 False []"


def test_a_users_blas_setting_wins():
    assert _child(_PROBE, OPENBLAS_NUM_THREADS="4").startswith("4 1 ")


_ONE = ("import sys, contextlib, io; from planner.cli.dispatch import run\n"
        "with contextlib.redirect_stdout(io.StringIO()): rc = run({argv!r})\n"
        "print(rc, sorted(m.rsplit('.', 1)[1] for m in sys.modules "
        "if m.startswith('planner.cli.')))")
_BASE = ["dispatch", "names", "options", "root"]   # the app, how library names map to options, the shared option set


def test_running_one_command_imports_only_its_module():
    # typer builds the click command of every registered command on each run: one here
    assert _child(_ONE.format(argv=["models", "-f", "json"])) == f"0 {sorted(_BASE + ['catalog'])}"
    assert _child(_ONE.format(argv=["bubble", "--stages", "4", "--micro-batches", "8"])) == \
        f"0 {sorted(_BASE + ['knob_options', 'quick'])}"
    assert _child(_ONE.format(argv=["memory", "--params", "7e9", "--gpus", "8"])) == \
        f"0 {sorted(_BASE + ['common', 'knob_options', 'plan_cmds'])}"


@pytest.mark.parametrize("name", ["h100", "H100", " a100-80g "])
def test_a_named_profile_is_parsed_alone(monkeypatch, name):
    monkeypatch.setattr(hardware, "_BUNDLED", None)
    prof = hardware.load_profile(name)
    assert hardware._BUNDLED is None  # the other profiles were not read
    every = {p.name: p for p in hardware.list_profiles()}
    assert prof == every[name.strip().lower()]


def test_an_alias_still_finds_its_profile(monkeypatch):
    monkeypatch.setattr(hardware, "_BUNDLED", None)
    assert hardware.load_profile("dgx-h100").name == "h100"
    with pytest.raises(hardware.InputError, match="unknown profile"):
        hardware.load_profile("../h100")


_HEAP_PROBE = """
import ctypes, sys, types
run = types.ModuleType("planner.cli.dispatch")
run.run = lambda argv: 0
sys.modules[run.__name__] = run
import planner.cli as c
try:
    c.main()
except SystemExit:
    pass
import numpy as np
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]
info = ctypes.CDLL(None).mallinfo2
info.restype = Info
before = info().hblks
x = np.ones(1 << 18)  # 2 MB: above glibc's default mmap threshold
print(info().hblks - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_the_entry_point_keeps_large_arrays_on_the_heap():
    try:
        import ctypes
        ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        pytest.skip("no glibc mallinfo2 to observe the allocator")
    assert _child(_HEAP_PROBE) == "0"                           # tuned: not mmap'ed
    assert _child(_HEAP_PROBE, MALLOC_ARENA_MAX="8") == "1"     # a user's MALLOC_* setting wins
