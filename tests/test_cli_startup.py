"""What a `dtplan fit` run loads: only what its answer needs (issue #15, the CLI at its
import floor). Each check runs a fresh interpreter, so earlier tests' imports do not count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planner.specs import framework

# numpy before 2.0 imports numpy.ma itself (2.x loads it on first use): only a module dtplan
# loads counts. (The engines extra pins numpy < 2 for megatron-core.)
_PROBE = ("import sys, io, numpy; own = set(sys.modules)\n"
          "from planner.cli import main; sys.argv = ['dtplan'] + {argv!r}; "
          "out, sys.stdout = sys.stdout, io.StringIO()\n"
          "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
          "text, sys.stdout = sys.stdout.getvalue(), out\n"
          "heavy = ('yaml', 'numpy.ma', 'matplotlib')\n"
          "print(code, 'FITS' in text, sorted(m for m in set(sys.modules) - own if m in heavy or "
          "m.split('.')[0] in heavy[:1]))")


def _loaded(argv: list[str], tmp_path) -> str:
    p = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_piped_fit_loads_no_yaml_or_masked_arrays(tmp_path):
    # rich renders every document; nothing reads YAML, masks arrays or draws a chart
    assert _loaded(["fit", "--params", "7e9", "--gpus", "8", "--top", "3"], tmp_path) == "0 True []"


def test_json_fit_loads_none_either(tmp_path):
    assert _loaded(["fit", "--params", "7e9", "--gpus", "8", "-f", "json"], tmp_path) == "0 False []"


_MODULES = ("import sys, io; from planner.cli import main; sys.argv = ['dtplan'] + {argv!r}; "
            "out, sys.stdout = sys.stdout, io.StringIO()\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "sys.stdout = out\nprint(code, sorted(m for m in sys.modules if m in {names!r}))")

# Modules a flag-built `fit` has no use for: the plan file's schema and its sections, the gate's
# verdicts, the calibration cases (an estimate needs only the profile's error band).
_NOT_FOR_FIT = ("planner.specs.plan", "planner.resolve.sections", "planner.specs.verdict",
                "planner.calibration.modern", "planner.calibration.report", "planner.resolve.plan_file",
                "planner.specs.hf_config")


def test_fit_from_flags_loads_no_plan_schema_verdicts_or_calibration_cases(tmp_path):
    argv = ["fit", "--params", "7e9", "--gpus", "8", "--top", "3"]
    p = subprocess.run([sys.executable, "-c", _MODULES.format(argv=argv, names=_NOT_FOR_FIT)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0 []"


# Standard-library modules a `fit` has no use for: the resource readers (importlib.readers) to
# read TOMLs that sit beside their package. (json is read for every answer since the printed
# error band comes from planner/data/error_bands.json, calibrate's derived bands; typer loads
# difflib and shutil as it starts, and pydantic importlib.metadata, with importlib.resources,
# zipfile and tempfile, for the validator of the first option typer parses.)
_STDLIB_NOT_FOR_FIT = ("importlib.readers",)


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_fit_loads_no_resource_reader(tmp_path, fmt):
    argv = ["fit", "--params", "7e9", "--gpus", "8", "--top", "3", "-f", fmt]
    names = _STDLIB_NOT_FOR_FIT
    p = subprocess.run([sys.executable, "-c", _MODULES.format(argv=argv, names=names)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0 []"


def test_bundled_profiles_are_read_from_beside_their_package():
    # the path the TOMLs are read from (a source tree's or an installed wheel's package-data)
    import framework_profiles
    import hardware_profiles

    from planner.specs.hardware_toml import bundled_dir, list_profiles
    for pkg in (hardware_profiles, framework_profiles):
        assert bundled_dir(pkg.__name__) == Path(pkg.__file__).parent
    assert {Path(p.source_file).parent for p in list_profiles()} == {
        Path(hardware_profiles.__file__).parent}


def test_a_named_framework_is_parsed_alone_and_aliases_use_the_list(monkeypatch):
    def fresh():
        monkeypatch.setattr(framework, "_BUNDLED", None)
        monkeypatch.setattr(framework, "_BY_NAME", {})
    for name in ("megatron", "TorchTitan", " fsdp "):
        fresh()
        got = framework.load_framework(name)
        assert framework._BUNDLED is None, name  # no other profile was read
        assert got == {p.name: p for p in framework.list_frameworks()}[name.strip().lower()]
    fresh()
    assert framework.load_framework("mcore").name == "megatron"  # an alias: the full list
    assert framework._BUNDLED is not None
    with pytest.raises(framework.InputError, match="unknown framework"):
        framework.load_framework("../megatron")


def test_help_builds_every_command_without_pydantic_or_the_models(tmp_path):
    # `dtplan --help` registers all commands from their option declarations (specs.knobs, the
    # budget's named defaults), not from the pydantic models they are later resolved into
    names = ("pydantic", "pydantic.main", "planner.specs.layout", "planner.specs.hardware",
             "planner.specs.budget", "planner.specs.model", "planner.cli.plan_cmds")
    p = subprocess.run([sys.executable, "-c", _MODULES.format(argv=["--help"], names=names)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0 ['planner.cli.plan_cmds']"


_COLLECTOR = ("import gc, sys, io\nfrom planner.cli import main\n"
              "from planner.cli.dispatch import run\n"
              "out, sys.stdout = sys.stdout, io.StringIO()\n"
              "code = run({argv!r})\nlibrary = (gc.isenabled(), gc.get_freeze_count())\n"
              "sys.argv = ['dtplan'] + {argv!r}\n"
              "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
              "sys.stdout = out\nprint(code, library, gc.isenabled(), gc.get_freeze_count() > 0)")


@pytest.mark.parametrize("argv", [["fit", "--params", "7e9", "--gpus", "8", "--top", "3"],
                                  ["memory", "--params", "7e9", "--gpus", "8"]])
def test_the_console_script_freezes_its_imports_and_collects_again(tmp_path, argv):
    # main() keeps the collector off while importing, then freezes what lives until exit and
    # turns it back on before the work; run() (a library caller) leaves the collector alone
    p = subprocess.run([sys.executable, "-c", _COLLECTOR.format(argv=argv)], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0 (True, 0) True True"
