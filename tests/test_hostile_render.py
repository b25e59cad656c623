"""User strings printed literally in terminal tables (issue 18): a path or name in square
brackets neither crashes rich (MarkupError, exit 3) nor silently disappears."""

from __future__ import annotations

import json
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
