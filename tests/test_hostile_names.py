"""An error names what the user wrote (issue 18, audit 3): the flag or file key whose value is
the problem, never an option they did not give (--params, --heads, --gpus for a derived count)
and with their value as written. Through the real `dtplan`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ROOT, run_dtplan

EXAMPLES = Path(ROOT) / "examples"


def _one_line(r, head: str) -> str:
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1, (r.code, r.err[-400:])
    assert lines[0].startswith(f"dtplan: error: {head}"), lines[0]
    return lines[0]


def test_a_derived_parameter_count_names_the_flag_that_made_it():
    # was `--params: must be at most 1e+16, got 2323857407726617728` (no --params given)
    line = _one_line(run_dtplan("estimate", "--layers", "2", "--hidden", "64", "--heads", "1",
                                "--ffn", "9007199254740992", "--gpus", "8"), "--ffn: ")
    assert "9007199254740992 makes 2.32e+18 parameters" in line and "at most 1e+16" in line


def test_a_config_too_large_names_its_key(tmp_path):
    cfg = json.loads((EXAMPLES / "models" / "llama3-8b" / "config.json").read_text())
    cfg["vocab_size"] = 10**15
    (tmp_path / "huge.json").write_text(json.dumps(cfg))
    line = _one_line(run_dtplan("estimate", "--model-config", "huge.json", "--gpus", "8",
                                cwd=tmp_path), "--model-config: huge.json: vocab_size: ")
    assert "1000000000000000 makes" in line


def test_an_architecture_flag_beside_another_source_names_itself():
    # was `--heads: architecture flags need at least --layers, --hidden and --heads`
    line = _one_line(run_dtplan("memory", "--params", "7e9", "--vocab", "1e13", "--gpus", "8"),
                     "--vocab: ")
    assert "--params already names the model" in line


def test_a_plan_at_the_top_gpu_count_gets_its_verdict(tmp_path):
    # a "more nodes" count above 10^7 was validated as if typed: `--gpus: must be at most
    # 10000000, got 10000008`, exit 2, for a plan inside every allowed range
    text = (EXAMPLES / "plans" / "llama3-70b-256xh100.yaml").read_text()
    text = text.replace("gpus: 256\n", "gpus: 10000000\n").replace("  dp: 8\n", "  dp: 312500\n")
    (tmp_path / "top.yaml").write_text(text)
    r = run_dtplan("check", "top.yaml", cwd=tmp_path)
    assert r.code == 1, (r.code, r.err[-400:])
    assert not any(int(n) > 10_000_000 for n in re.findall(r"(\d{8,}) GPUs", r.out)), r.out


def test_a_torchtitan_flavor_is_named_by_its_key_as_written(tmp_path):
    src = (EXAMPLES / "engines" / "torchtitan-llama3-8b-64gpu.toml").read_text()
    text = re.sub(r'(?m)^flavor = .*$', 'flavor = "[bold]8B[/bold]"', src)
    assert text != src
    (tmp_path / "t.toml").write_text(text)
    line = _one_line(run_dtplan("check", "t.toml", "--gpus", "64", cwd=tmp_path),
                     "t.toml: model.flavor: ")
    assert "'[bold]8B[/bold]'" in line   # the user's case, printed literally
