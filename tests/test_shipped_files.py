"""What ships names nothing outside the package: no absolute path of a development machine and
no file of a reference set beside the repository (a clone or a wheel elsewhere has neither), and
every internal reference document replaced by the public source behind it."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

# The shipped tree: the package, its data and profiles, the examples and the user's documents.
SHIPPED = ["planner", "hardware_profiles", "framework_profiles", "examples", "README.md",
           "pyproject.toml", ".pre-commit-hooks.yaml"]
SUFFIXES = {".py", ".toml", ".json", ".yaml", ".yml", ".md", ".sh", ".args", ".txt", ".expect"}
# Absolute development paths, and the reference sets / documents that live beside the repository.
FORBIDDEN = re.compile(r"/work/|/home/\w|/Users/\w|/root/|shared/(reference|fixtures)|"
                       r"CALIBRATION\.md|gpu_specs\.json|hf_models\.json")


def _files() -> list[Path]:
    out = []
    for name in SHIPPED:
        p = Path(ROOT) / name
        out += [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()
                                        and f.suffix in SUFFIXES and "__pycache__" not in f.parts]
    return out


def test_the_shipped_tree_is_searched():
    names = {f.name for f in _files()}
    assert {"README.md", "h100.toml", "megatron.toml", "calibration_modern.json"} <= names


def test_no_path_outside_the_package():
    hits = [f"{path.relative_to(ROOT)}:{i}: {m.group()}" for path in _files()
            for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                     .splitlines(), 1)
            for m in [FORBIDDEN.search(line)] if m]
    assert not hits, "\n".join(hits)
