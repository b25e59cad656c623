"""Hostile input through the real `dtplan` (issue 18): each class the fuzz found is exit 2 with
one line naming the option or the key and line — never exit 3, a hang or a traceback."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT

PLAN = Path(ROOT) / "examples" / "plans" / "llama3-70b-256xh100.yaml"
MEGATRON = Path(ROOT) / "examples" / "engines" / "megatron-llama3-70b-256gpu.sh"
TORCHTITAN = Path(ROOT) / "examples" / "engines" / "torchtitan-llama3-8b-64gpu.toml"
SMALL_LLAMA = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
               "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000}
LONG = "a" * 300  # over the 255-byte name limit of Linux and macOS file systems


def _exit2(r, *needles: str) -> str:
    """The one-line exit-2 contract; returns the message."""
    assert r.code == 2, (r.code, r.out[-300:], r.err[-500:])
    assert "Traceback" not in r.err and "internal error" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtplan: error: "), r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- --model-config: nesting, number length, path length, special files ----------------------

@pytest.mark.parametrize("command", [("memory",), ("estimate", "--gpus", "8"), ("fit", "--gpus", "8")])
def test_deeply_nested_config_json(dtplan, tmp_path, command):
    p = _write(tmp_path, "deep.json", '{"a":' * 5000 + "1" + "}" * 5000)
    _exit2(dtplan(*command, "--model-config", p), "--model-config: ", "nested deeper than 32")


def test_5000_digit_number_in_config_json_names_the_key(dtplan, tmp_path):
    p = _write(tmp_path, "big.json", json.dumps({**SMALL_LLAMA, "hidden_size": 1})
               .replace('"hidden_size": 1', '"hidden_size": ' + "9" * 5000))
    msg = _exit2(dtplan("memory", "--model-config", p), "--model-config: ", "hidden_size",
                 "5000 digits")
    assert re.search(r"big\.json:1: hidden_size", msg)


def test_overflowing_float_in_config_json(dtplan, tmp_path):
    p = _write(tmp_path, "f.json", json.dumps({**SMALL_LLAMA, "rope_theta": 1}).replace(
        '"rope_theta": 1', '"rope_theta": 1e400'))
    _exit2(dtplan("memory", "--model-config", p), "rope_theta: must be a finite number")


@pytest.mark.parametrize("args,option", [
    (("memory", "--model-config", LONG), "--model-config: "),
    (("check", str(PLAN), "--model", LONG), "--model: "),
])
def test_path_over_the_os_limit(dtplan, args, option):
    _exit2(dtplan(*args), option, "path too long", "(300 characters)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_as_model_config_is_refused_not_read(dtplan, tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # reading it would block forever: no writer
    _exit2(dtplan("memory", "--model-config", fifo), "--model-config: ", "FIFO",
           "not a regular file")


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_device_as_hardware_file_is_refused(dtplan):
    _exit2(dtplan("memory", "--params", "7e9", "--hardware-file", "/dev/null"),
           "--hardware-file: /dev/null: is a character device")


# ---- errors name the option first, then the value ---------------------------------------------

@pytest.mark.parametrize("args,expected", [
    (("memory", "--model-config", "16"),
     "--model-config: 16: file not found; expected a Hugging Face config.json"),
    (("memory", "--model-config", ""), "--model-config: empty path"),
    (("memory", "--params", "7e9", "--hardware-file", "16"),
     "--hardware-file: 16: file not found; expected a hardware profile .toml"),
    (("memory", "--params", "7e9", "--hardware-file", ""), "--hardware-file: empty path"),
    (("fit", "--from-plan", "16", "--gpus", "8"), "--from-plan: 16: file not found"),
])
def test_errors_name_the_option_then_the_value(dtplan, args, expected):
    _exit2(dtplan(*args), expected)


def test_check_model_directory_without_config_json(dtplan, tmp_path):
    _exit2(dtplan("check", PLAN, "--model", tmp_path),
           f"--model: {tmp_path / 'config.json'}: file not found")


def test_hardware_directory_is_named(dtplan, tmp_path):
    _exit2(dtplan("memory", "--params", "7e9", "--hardware-file", tmp_path),
           "--hardware-file: ", "is a directory")


# ---- integers that overflow C long / float in plan and engine files ---------------------------

def _plan_with(tmp_path: Path, old: str, new: str) -> Path:
    text = PLAN.read_text()
    assert old in text
    return _write(tmp_path, "plan.yaml", text.replace(old, new, 1))


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("command", [("check",), ("report",), ("export", "--to", "megatron")])
def test_400_digit_gpus_in_a_plan(dtplan, tmp_path, command):
    p = _plan_with(tmp_path, "gpus: 256", "gpus: " + "9" * 400)
    _exit2(dtplan(*command, p), f"plan.yaml:{_line_of(p, 'gpus:')}: gpus: ", "400 digits")


@pytest.mark.parametrize("command", [("check",), ("report",), ("export", "--to", "deepspeed")])
def test_tp_beyond_c_long_in_a_plan(dtplan, tmp_path, command):
    p = _plan_with(tmp_path, "tp: 8", "tp: 9223372036854775808")
    _exit2(dtplan(*command, p), f"plan.yaml:{_line_of(p, 'tp:')}: layout.tp: ",
           "9223372036854775808 is out of range")


@pytest.mark.parametrize("value,needle", [("9223372036854775808", "out of range"),
                                          ("9" * 5000, "5000 digits")])
def test_huge_integer_in_megatron_arguments(dtplan, tmp_path, value, needle):
    text = MEGATRON.read_text()
    assert "--num-layers" in text
    p = _write(tmp_path, "run.sh", re.sub(r"--num-layers\s+\S+", f"--num-layers {value}", text))
    _exit2(dtplan("check", p, "--gpus", "256"), "run.sh: --num-layers: ", needle)


def test_huge_integer_in_torchtitan_toml_names_the_line(dtplan, tmp_path):
    text = TORCHTITAN.read_text()
    m = re.search(r"^(tensor_parallel_degree\s*=\s*)\d+", text, re.M)
    assert m, "example has tensor_parallel_degree"
    p = _write(tmp_path, "tt.toml", text[:m.start()] + m.group(1) + "9" * 5000 + text[m.end():])
    line = text[:m.start()].count("\n") + 1
    _exit2(dtplan("check", p, "--gpus", "64"), f"tt.toml:{line}: ", "5000 digits")


def test_non_finite_float_in_a_plan(dtplan, tmp_path):
    p = _plan_with(tmp_path, "interval_min: 60", "interval_min: .inf")
    _exit2(dtplan("check", p), "checkpoint.interval_min: must be a finite number")


# ---- outputs and commands that used to raise ---------------------------------------------------

@pytest.mark.parametrize("output", ["", ".", "sub/"])
def test_report_output_that_is_not_a_file_name(dtplan, tmp_path, output):
    (tmp_path / "sub").mkdir()
    msg = _exit2(dtplan("report", PLAN, "-o", output, cwd=tmp_path))
    assert msg.startswith(("dtplan: error: -o: ", "dtplan: error: --output: ")), msg


def test_calibrate_on_hardware_without_the_published_nvlink_domain(dtplan):
    r = dtplan("calibrate", "--hardware", "l40s", "--format", "json")
    assert r.code == 0 and "internal error" not in r.err, r
    assert r.json()["hardware"] == "l40s"


def test_calibration_skips_a_case_whose_layout_cannot_run_there():
    from planner.calibration.published import calibrate

    rep = calibrate("l40s")
    assert rep.rows  # the cases that fit its NVLink domain still compare
    assert "tp-in-nvlink-domain on l40s" in rep.skipped["narayanan-table1-1008B"]


def test_bracketed_missing_path_is_printed_literally(dtplan, tmp_path):
    _exit2(dtplan("check", "[/x]/a.sh", cwd=tmp_path), "[/x]/a.sh: file not found")


@pytest.mark.parametrize("args,option", [(("memory", "--model", "a\nb\x1b[2J"), "--model: "),
                                         (("memory", "--model-config", "a\nb"), "--model-config: "),
                                         (("memory", "--params", "7e9", "--hardware", "x\ny"),
                                          "--hardware: ")])
def test_control_characters_in_a_value_keep_the_error_on_one_line(dtplan, args, option):
    msg = _exit2(dtplan(*args), option)
    assert "\x1b" not in msg and ("\\n" in msg)


def test_a_gpu_list_is_bounded_work(dtplan):
    counts = ",".join(str(8 * i) for i in range(1, 66))
    _exit2(dtplan("fit", "--model", "gpt2", "--gpus", counts), "--gpus: at most 64 values, got 65")


# ---- evidence and framework readers go through the same reader -----------------------------------

@pytest.mark.parametrize("args,expected", [
    (("calibrate", "--from", LONG), "--from: "),
    (("calibrate", "--from", ""), "--from: empty path"),
    (("calibrate", "--from", "/dev/null"), "--from: /dev/null: is a character device"),
    (("compare", "missing.log", "--plan", str(PLAN)), "RUNS: missing.log: file not found"),
    (("estimate", "--model", "gpt2", "--gpus", "8", "--framework", LONG + ".toml"),
     "--framework: "),
])
def test_evidence_and_framework_paths(dtplan, tmp_path, args, expected):
    _exit2(dtplan(*args, cwd=tmp_path), expected)


def test_huge_integer_in_a_framework_profile(dtplan, tmp_path):
    p = _write(tmp_path, "fw.toml", "name = 'x'\nbucket = " + "9" * 5000 + "\n")
    _exit2(dtplan("estimate", "--model", "gpt2", "--gpus", "8", "--framework", p),
           "--framework: ", "fw.toml:2: bucket: integer of 5000 digits")


# ---- a 300-character profile name or path on every command that takes one (issue 29) --------

EVIDENCE = Path(ROOT) / "tests" / "data" / "evidence" / "nccl_wrapped_tagged.txt"
WITH_PROFILES = {
    "fit": ("fit", "--model", "gpt2", "--gpus", "8"),
    "estimate": ("estimate", "--model", "gpt2", "--gpus", "8"),
    "check": ("check", str(PLAN)),
    "report": ("report", "--model", "gpt2", "--gpus", "8", "-o", "-"),
    "comm": ("comm", "--gpus", "8", "--message-gb", "1"),
    "calibrate": ("calibrate", "--from", str(EVIDENCE)),
    "compare": ("compare", str(EVIDENCE), "--plan", str(PLAN)),
}
# the options each command takes (check and comm take no --framework / --hardware-file)
TAKES = {"--hardware": list(WITH_PROFILES), "--framework": ["fit", "estimate", "report",
                                                            "calibrate"],
         "--hardware-file": ["fit", "estimate", "report", "calibrate", "compare"]}


@pytest.mark.parametrize("option,command", [(o, c) for o, cs in TAKES.items() for c in cs])
@pytest.mark.parametrize("value", [LONG, LONG + ".toml", "x/" + LONG])
def test_a_name_or_path_over_the_os_limit_is_one_line_naming_its_option(dtplan, tmp_path,
                                                                         option, command, value):
    # a name is a name first (never stat-ed as a path); a path too long for the OS is refused
    # naming the option it was given to -- with --from, --hardware-file was named --hardware,
    # and calibrate --from ignored an unknown --framework (exit 0)
    _exit2(dtplan(*WITH_PROFILES[command], option, value, cwd=tmp_path), f"{option}: ")
