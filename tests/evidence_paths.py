"""Where the real cluster artifacts live: `<repo>/../shared/fixtures/real` (CI), else
/work/shared/fixtures/real (worktrees). Tests skip with the reason when neither exists."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "evidence"


def shared_dir() -> Path | None:
    """`<repo>/../shared` (CI), else /work/shared (worktrees), else None."""
    for base in (ROOT.parent / "shared", Path("/work/shared")):
        if base.is_dir():
            return base
    return None


def real_dir() -> Path | None:
    base = shared_dir()
    d = base / "fixtures" / "real" if base is not None else None
    return d if d is not None and d.is_dir() else None


def real(rel: str) -> Path:
    """A fixture file by its path under fixtures/real, or skip the test."""
    d = real_dir()
    if d is None or not (d / rel).is_file():
        pytest.skip(f"real fixture {rel} not present (needs shared/fixtures/real beside the repo)")
    return d / rel
