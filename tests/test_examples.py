"""The example design reviews in examples/reviews/ are what the current `dtplan report` writes
(regenerate them with `python scripts/reviews.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import run_dtplan

ROOT = Path(__file__).resolve().parent.parent


def _examples() -> list[tuple[str, str]]:
    spec = importlib.util.spec_from_file_location("reviews", ROOT / "scripts" / "reviews.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [(plan, out, mod.report_argv) for plan, out in mod.EXAMPLES]


# ids from the file names only (a function's repr differs between xdist workers)
@pytest.mark.parametrize("plan,out,argv", _examples(),
                         ids=[Path(plan).name for plan, _, _ in _examples()])
def test_example_review_is_current(plan, out, argv, tmp_path):
    pytest.importorskip("matplotlib")
    # Written beside a copy of the example's name, so the chart links read the same.
    fresh = tmp_path / Path(out).name
    r = run_dtplan(*argv(plan, str(fresh)), cwd=ROOT)
    assert r.code == 0, r.stderr
    committed = ROOT / out
    assert fresh.read_text() == committed.read_text(), (
        f"{out} is stale: run `python scripts/reviews.py` and commit the result")
    # The charts: the same files. Their bytes follow matplotlib's version and fonts, so only
    # the names are compared; every figure the charts draw is also in the Markdown's tables.
    charts = sorted(p.name for p in fresh.with_name(fresh.stem + "_files").iterdir())
    kept = sorted(p.name for p in committed.with_name(committed.stem + "_files").iterdir())
    assert charts == kept, f"{out}: charts {charts}, committed {kept}"
