"""Numbers and keys in files follow one rule with the command line (issue 18, audit 3): YAML 1.2
/ JSON floats (5e4) are numbers; base-60, hex and octal integers (4:16, 0x8) and non-ASCII
digits are refused with the line, on the command line too; a key given twice is refused
(`file:line: key: given twice`, or `file: key` in JSON). Through the real `dtplan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan

EXAMPLES = Path(ROOT) / "examples"
PLAN = (EXAMPLES / "plans" / "llama3-70b-256xh100.yaml").read_text()


def _plan(tmp_path: Path, old: str, new: str) -> Path:
    assert old in PLAN
    (tmp_path / "p.yaml").write_text(PLAN.replace(old, new, 1))
    return tmp_path / "p.yaml"


def _error(r) -> str:
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1, (r.code, r.err[-400:])
    return lines[0]


def test_an_exponent_float_reads_as_the_number(tmp_path):
    # YAML 1.1 read 5e4 as the string "5e4": `must be a number, got "5e4"`
    same = run_dtplan("check", _plan(tmp_path, "gpu_mtbf_hours: 50000", "gpu_mtbf_hours: 5e4"),
                      "-f", "json")
    base = run_dtplan("check", EXAMPLES / "plans" / "llama3-70b-256xh100.yaml", "-f", "json")
    assert same.code == base.code == 0, same.err
    assert same.json()["files"][0]["summary"] == base.json()["files"][0]["summary"]


@pytest.mark.parametrize("old, new, where", [
    ("gpus: 256\n", "gpus: 4:16\n", "p.yaml:9: gpus: must be a decimal number"),
    ("  tp: 8\n", "  tp: 0x8\n", "p.yaml:12: layout.tp: must be a decimal number"),
    ("gpus: 256\n", "gpus: 256\ngpus: 128\n", "p.yaml:10: gpus: given twice"),
    ("  tp: 8\n", "  tp: 8\n  tp: 4\n", "p.yaml:13: tp: given twice"),
])
def test_a_plan_number_or_key_yaml_1_1_would_guess_at_is_refused_with_its_line(
        tmp_path, old, new, where):
    line = _error(run_dtplan("check", _plan(tmp_path, old, new).name, cwd=tmp_path))
    assert line.startswith(f"dtplan: error: {where}"), line


def test_a_json_key_given_twice_is_refused(tmp_path):
    text = (EXAMPLES / "models" / "llama3-8b" / "config.json").read_text()
    text = text.replace('"num_hidden_layers"', '"num_hidden_layers": 2, "num_hidden_layers"', 1)
    json.loads(text)   # valid JSON: the last one wins, silently, on main
    (tmp_path / "dup.json").write_text(text)
    line = _error(run_dtplan("memory", "--model-config", "dup.json", "--gpus", "8", cwd=tmp_path))
    assert line == "dtplan: error: --model-config: dup.json: num_hidden_layers: given twice"


def test_non_ascii_digits_are_refused_everywhere(tmp_path):
    line = _error(run_dtplan("memory", "--params", "7e9", "--gpus", "\uff12\uff15\uff16"))
    assert line.startswith("dtplan: error: --gpus: must be written in ASCII digits")
    src = (EXAMPLES / "engines" / "megatron-llama3-70b-256gpu.sh").read_text()
    assert "--num-layers 80" in src
    (tmp_path / "m.sh").write_text(src.replace("--num-layers 80", "--num-layers \uff18\uff10"))
    line = _error(run_dtplan("check", "m.sh", cwd=tmp_path))
    assert line.startswith("dtplan: error: m.sh: --num-layers: must be an integer")


@pytest.mark.parametrize("old, new, error", [
    ("  tp: ", "  tp: true  # was ", "layout.tp: must be an integer, got true"),
    ("  tp: ", "  tpp: ", "layout.tpp: unknown key; did you mean 'layout.tp'?"),
    ("gpus: ", "gpus: 0  # was ", "gpus: must be >= 1, got 0"),
    ("gpus: ", "gpus: \"many\"  # was ", "gpus: must be an integer, got \"many\""),
], ids=["bool-for-int", "unknown-key", "range", "string-for-int"])
def test_plan_file_errors_name_the_line_of_the_key(tmp_path, old, new, error):
    """Every plan-file error on a key found in the file says file:line: key: (what a CI
    annotation or an editor jumps to), not only file: key:."""
    src = (EXAMPLES / "plans" / "llama3-70b-256xh100.yaml").read_text().splitlines()
    i = next(n for n, line in enumerate(src) if line.startswith(old))
    src[i] = new + src[i][len(old):]
    path = tmp_path / "plan.yaml"
    path.write_text("\n".join(src) + "\n")
    r = run_dtplan("check", path)
    assert r.code == 2 and r.err.strip() == f"dtplan: error: {path}:{i + 1}: {error}"


@pytest.mark.parametrize("drop, line, error", [
    ("seq_len: ", 1, "seq_len: missing; required"),
    ("  interval_min: ", "checkpoint:", "checkpoint.interval_min: missing; required"),
], ids=["top-level", "nested"])
@pytest.mark.parametrize("command", [("check",), ("report",), ("export", "--to", "megatron")])
def test_a_missing_key_names_the_line_of_the_mapping_that_lacks_it(tmp_path, drop, line, error,
                                                                     command):
    """A key that is not there has no line of its own: the error names the line of the
    mapping that should hold it (line 1 for a top-level key), so every plan-file error on a
    key is file:line: key:, in every command that reads a plan."""
    src = PLAN.splitlines()
    src = [x for x in src if not x.startswith(drop)]
    want = line if isinstance(line, int) else src.index(line) + 1
    path = tmp_path / "plan.yaml"
    path.write_text("\n".join(src) + "\n")
    r = run_dtplan(command[0], path, *command[1:])
    assert r.code == 2 and r.err.strip() == f"dtplan: error: {path}:{want}: {error}", r.err


@pytest.mark.parametrize("command", [("check",), ("report",), ("export", "--to", "megatron"),
                                     ("fit", "--gpus", "128", "--from-plan")])
def test_a_section_value_that_does_not_resolve_names_its_line(tmp_path, command):
    """An unknown preset or hardware profile is found when the section is resolved, after the
    file is read: the error still names the line of its key (inputs.lines.with_lines), and
    both at once when both are wrong."""
    src = PLAN.splitlines()
    model, hw = src.index("model: llama3-70b"), src.index("hardware: h100")
    src[model], src[hw] = "model: no-such-model", "hardware: no-such-gpu"
    path = tmp_path / "plan.yaml"
    path.write_text("\n".join(src) + "\n")
    r = run_dtplan(command[0], *command[1:], path)
    head = "--from-plan: " if command[0] == "fit" else ""
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 2, r.err
    assert lines[0].startswith(f"dtplan: error: {head}{path}:{model + 1}: model: unknown model "
                               "'no-such-model'"), lines
    assert lines[1].startswith(f"dtplan: error: {head}{path}:{hw + 1}: hardware"), lines


def test_a_degree_an_engine_config_implies_is_within_its_knob_range(tmp_path):
    """DeepSpeed's micro-batch is derived (train_batch_size ÷ DP), not read through a bounded
    key: past the knob's range it is one line naming the file and the knob, exit 2."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 20_000_000}))
    r = run_dtplan("check", path, "--engine", "deepspeed", "--gpus", "1", "--model", "llama3-8b",
                   "--seq-len", "1024")
    assert r.code == 2 and r.err.strip() == (
        f"dtplan: error: {path}: micro_batch: must be between 1 and 10,000,000, got 20,000,000 "
        "(what the config implies)"), r.err
