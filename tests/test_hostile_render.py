"""User strings printed literally in terminal tables (issue 18): a path or name in square
brackets neither crashes rich (MarkupError, exit 3) nor silently disappears."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

SMALL_LLAMA = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
               "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000}


def _config(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / "config.json"
    p.write_text(json.dumps(SMALL_LLAMA))  # no _name_or_path: the directory names the model
    return p


def test_absolute_config_path_without_a_name_prints_its_tables(dtplan, tmp_path):
    p = _config(tmp_path / "m")
    r = dtplan("memory", "--model-config", p)
    assert r.code == 0, r
    assert "internal error" not in r.err and str(p) in r.out.replace("\n", "")


def test_bracketed_relative_path_is_printed_literally(dtplan, tmp_path):
    _config(tmp_path / "[x]")
    r = dtplan("memory", "--model-config", "[x]/config.json", cwd=tmp_path)
    assert r.code == 0, r
    assert "[x]/config.json" in r.out.replace("\n", "")


def test_bracketed_missing_file_among_good_ones_in_the_table(dtplan, tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text("model: llama3-8b\ngpus: 8\nseq_len: 2048\n")
    r = dtplan("check", "[/x]/a.sh", "p.yaml", cwd=tmp_path)
    assert r.code == 2 and "internal error" not in r.err, r
    assert "[/x]/a.sh" in r.out + r.err


# ---- control characters, Markdown and shell (audit 3) -----------------------------------------

def _named(tmp_path: Path, name: str) -> str:
    (tmp_path / "c.json").write_text(json.dumps({**SMALL_LLAMA, "_name_or_path": name}))
    return "c.json"


def test_control_characters_from_a_file_are_shown_escaped_in_every_rendering(dtplan, tmp_path):
    cfg = _named(tmp_path, "line1\nline2\x1b[31mred")
    for fmt in ("table", "markdown"):
        r = dtplan("estimate", "--model-config", cfg, "--gpus", "8", "-f", fmt, cwd=tmp_path)
        assert r.code in (0, 1), r
        assert "\x1b" not in r.out and "line1\nline2" not in r.out, fmt
        # Markdown also escapes the bracket (link syntax): the rendered text reads the same
        shown = "line1\\nline2\\x1b" + ("\\[" if fmt == "markdown" else "[") + "31mred"
        assert shown in r.out, fmt
    r = dtplan("estimate", "--model-config", cfg, "--gpus", "8", "-f", "json", cwd=tmp_path)
    assert "\x1b" not in r.out and json.loads(r.out)   # JSON escapes by itself


def test_markdown_outputs_carry_no_html_tag_from_a_user_string(dtplan, tmp_path):
    cfg = _named(tmp_path, "<img src=x onerror=alert(1)><script>alert(2)</script>")
    for argv in (("report", "-o", "-"), ("fit", "-f", "markdown")):
        r = dtplan(*argv, "--model-config", cfg, "--gpus", "8", cwd=tmp_path)
        assert r.code in (0, 1), r
        assert not re.search(r"(?<!\\)<(img|script|/script)", r.out), argv
        assert "\\<img src=x" in r.out.splitlines()[0], argv


def test_the_check_line_export_suggests_is_quoted_and_runs(dtplan, tmp_path):
    cfg = _named(tmp_path, "x; touch PWNED #")
    r = dtplan("export", "--model-config", cfg, "--gpus", "8", "--to", "deepspeed", "-o",
               "ds.json", cwd=tmp_path)
    assert r.code == 0, r
    line = next(x for x in r.err.splitlines() if "check it with: " in x)
    argv = shlex.split(line.split("check it with: dtplan ", 1)[1])
    assert "PWNED" not in line and argv[-2:] == ["--model-config", "c.json"], line
    again = dtplan(*argv, cwd=tmp_path)   # the suggested command, as pasted
    assert again.code == 0 and not (tmp_path / "PWNED").exists(), again
