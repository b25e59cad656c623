"""dtplan report: every section, self-contained HTML, charts, the pipeline timeline, atomic
writes, --force and -o -."""

from __future__ import annotations

import os
import re

import pytest
from conftest import run_dtplan

from planner.io import write as files
from planner.engine.pipeline import bubble_fraction
from planner.errors import InputError
from planner.render import charts
from planner.review.render import render_review_html, render_review_markdown
from planner.review.build import build_review, inputs_from_fit, inputs_from_plan
from planner.review.doc import SECTIONS
from planner.review.timeline import pipeline_timeline, timeline_bubble

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAN = os.path.join(ROOT, "examples", "plans", "llama3-70b-256xh100.yaml")


def run(*args, cwd=None):
    return run_dtplan(*args, cwd=cwd)


@pytest.mark.parametrize("p,m,v,schedule", [(4, 8, 1, "1f1b"), (4, 8, 1, "gpipe"),
                                            (4, 8, 2, "interleaved"), (4, 16, 3, "interleaved"),
                                            (8, 16, 2, "interleaved"), (2, 4, 2, "interleaved"),
                                            (4, 2, 1, "1f1b"), (1, 4, 1, "1f1b")])
def test_timeline_bubble_matches_formula(p, m, v, schedule):
    blocks = pipeline_timeline(p, m, v, schedule)
    assert len(blocks) == 2 * p * m * (v if schedule == "interleaved" else 1)
    want = float(bubble_fraction(p, m, v if schedule == "interleaved" else 1))
    assert timeline_bubble(blocks) == pytest.approx(want, abs=1e-12)


def test_timeline_respects_dependencies():
    blocks = pipeline_timeline(4, 8, 2, "interleaved")
    by = {(b.kind, b.chunk * 4 + b.stage, b.micro_batch): b for b in blocks}
    for (kind, vs, mb), b in by.items():
        if kind == "F" and vs > 0:
            assert b.start >= by[("F", vs - 1, mb)].end
        if kind == "B":
            assert b.start >= by[("B", vs + 1, mb)].end if vs < 7 else by[("F", vs, mb)].end
    with pytest.raises(InputError):
        pipeline_timeline(4, 6, 2, "interleaved")  # m not a multiple of p


@pytest.fixture(scope="module")
def plan_inputs():
    return inputs_from_plan(PLAN)


def test_markdown_has_every_section_without_matplotlib(plan_inputs, monkeypatch):
    monkeypatch.setattr(charts, "available", lambda: False)
    r = build_review(plan_inputs, source="plan file x", train_tokens=15e12, gpu_hour_cost=2.0,
                     scaling=False)
    md = render_review_markdown(r, "review_files")
    for title in SECTIONS:
        assert f". {title}" in md
    assert "pip install 'dtplan[report]'" in md and "![" not in md
    assert "(p−1)/(m + p−1)" in md and "B = b × a × DP = 1 × 128 × 8 = 1024" in md
    html = render_review_html(r)
    assert "<svg" not in html and "http://" not in html and "https://" not in html


def test_inferred_model_warning():
    from planner.specs.hardware_toml import load_profile
    from planner.specs.model import model_from_params
    inp, res = inputs_from_fit(model_from_params(1e9), load_profile("h100"), 8, seq_len=1024,
                               global_batch=16)
    r = build_review(inp, source="fit", fit_result=res, charts=False, scaling=False)
    assert "MODEL SHAPE INFERRED" in render_review_markdown(r)


def test_html_inline_svg_no_network(plan_inputs):
    pytest.importorskip("matplotlib")
    r = build_review(plan_inputs, source="plan file x", scaling=False)
    html = render_review_html(r)
    assert html.count("<svg") == len(r.charts) >= 4
    assert not re.search(r"https?://", html)
    assert not re.search(r"""(src|href)\s*=\s*["']?(?!["'#])""", html)  # only in-page anchors


def test_atomic_write_and_force(tmp_path):
    target = tmp_path / "a.txt"
    files.write_text(target, "one")
    with pytest.raises(InputError, match="--force"):
        files.write_text(target, "two")
    assert target.read_text() == "one"
    files.write_text(target, "three", force=True)
    assert target.read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temp files left
    with pytest.raises(InputError, match="directory"):
        files.write_text(tmp_path / "missing" / "x.md", "x")


def test_cli_markdown_stdout():
    p = run("report", PLAN, "-o", "-", "--no-charts")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# Design review") and "## 11. Rules" in p.stdout


def test_cli_files_force_and_charts(tmp_path):
    out = tmp_path / "review.md"
    p = run("report", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "1024",
            "--global-batch", "32", "--train-tokens", "1e9", "-o", out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert "## 8. Time, energy and cost to train" in text
    p2 = run("report", PLAN, "-o", out)
    assert p2.returncode == 2 and "--force" in p2.stderr and len(p2.stderr.strip().splitlines()) == 1
    if charts.available():
        svgs = sorted(x.name for x in (tmp_path / "review_files").iterdir())
        assert "pipeline.svg" in svgs or "memory.svg" in svgs
        assert "](review_files/memory.svg)" in text
    html = tmp_path / "review.html"
    p3 = run("report", PLAN, "-o", html, "--no-charts")
    assert p3.returncode == 0 and html.read_text().startswith("<!DOCTYPE html>")
    assert run("report", PLAN, "-o", html, "--force", "--no-charts").returncode == 0


def test_cli_bad_input():
    p = run("report", PLAN, "--gpus", "8")
    assert p.returncode == 2 and "not both" in p.stderr
    p = run("report", "--model", "llama3-8b")
    assert p.returncode == 2 and "--gpus" in p.stderr
    assert run("report", PLAN, "--train-tokens", "-5", "-o", "-").returncode == 2
