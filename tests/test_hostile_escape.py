"""Must show 2 of issue 29: a user string holding ESC/OSC, C0, C1 (U+009B, U+009D) and bidi
(U+202E, U+2066) characters, a newline starting `::error::`, Markdown link and image syntax
and an HTML tag comes out inert in every output format and every message, through the real
`dtplan`: the model name of a config.json, an evidence file's name and a plan's directory."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from evidence_paths import real

EVIL = ("m\x1b]0;pwned\x07\x1b[31m\x9b1m\x9d8;;http://e\x9c\u202eevil\u2066\n"
        "::error::injected [click](javascript:alert(1)) ![x](http://e/i.png) <b>bold</b>")
RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\x9c", "\u202e", "\u2066")
SMALL = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000}
PLAN = Path(ROOT) / "examples" / "plans" / "llama3-70b-256xh100.yaml"


def _inert(text: str, kind: str) -> None:
    for ch in RAW:
        assert ch not in text, (kind, repr(ch))
    assert not any(line.startswith("::error::injected") for line in text.splitlines()), kind
    if kind == "markdown":
        assert not re.search(r"(?<!\\)\[click(?<!\\)\]\(", text), kind
        assert not re.search(r"!(?<!\\)\[x(?<!\\)\]\(", text), kind
    if kind == "html":
        assert "<b>bold" not in text and 'href="javascript' not in text, kind
    if kind == "markdown":
        assert "<b>bold" not in text.replace("\\<b>bold", ""), kind


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**SMALL, "_name_or_path": EVIL}))
    return p


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_model_name_in_estimate_and_fit(dtplan, cfg, fmt):
    for cmd in ("estimate", "fit"):
        r = dtplan(cmd, "--model-config", cfg, "--gpus", "8", "-f", fmt)
        assert r.code in (0, 1), r
        _inert(r.out, fmt)
        _inert(r.err, "stderr")
        if fmt == "json":
            # JSON escapes the control characters and keeps the name as given, as data
            assert json.loads(r.out)["model"] == EVIL


@pytest.mark.parametrize("suffix", [".md", ".html"])
def test_model_name_in_the_review(dtplan, cfg, tmp_path, suffix):
    out = tmp_path / f"r{suffix}"
    r = dtplan("report", "--model-config", cfg, "--gpus", "8", "-o", out)
    assert r.code in (0, 1), r
    _inert(r.err, "stderr")
    _inert(out.read_text(), suffix.strip(".").replace("md", "markdown"))
    r = dtplan("report", "--model-config", cfg, "--gpus", "8", "-o", "-")
    _inert(r.out, "markdown")


def test_model_name_in_export_messages(dtplan, cfg):
    r = dtplan("export", "--model-config", cfg, "--gpus", "8", "--to", "deepspeed", "-o", "-")
    assert r.code in (0, 1), r
    _inert(r.err, "stderr")


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "github"])
def test_a_plan_directory_name_in_check(dtplan, tmp_path, fmt):
    d = tmp_path / "d\x1b]0;pwned\x07\u202e\n::error::injected [click](javascript:x)"
    d.mkdir()
    good, bad = d / "plan.yaml", d / "broken.yaml"
    shutil.copy(PLAN, good)
    bad.write_text("model: [unclosed\n")
    r = dtplan("check", good, bad, "-f", fmt)
    assert r.code == 2, r
    _inert(r.out, "markdown" if fmt == "markdown" else fmt)
    _inert(r.err, "stderr")


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_an_evidence_file_name_in_calibrate_and_compare(dtplan, tmp_path, fmt):
    d = tmp_path / "runs"
    d.mkdir()
    name = "t\x1b]0;x\x07\x9b\u202e[red]x[bold] [click](javascript:x).log"
    shutil.copy(real("training/torchtitan-pr950_llama3-debugmodel_h100_EXCERPT.log"), d / name)
    r = dtplan("calibrate", "--from", d, "-f", fmt)
    assert r.code == 0, r
    _inert(r.out, fmt)
    if fmt == "table":   # rich markup is off: the name as it is, not \[red]
        assert "[red]x[bold]" in r.out and "\\[red]" not in r.out
    broken = d / (name + ".bad")
    broken.write_text("step: 1 loss: 1 tps: 2o5\n")
    r = dtplan("calibrate", "--from", broken, "-f", fmt)
    assert r.code == 2, r
    _inert(r.err, "stderr")
