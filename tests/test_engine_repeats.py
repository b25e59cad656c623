"""A Megatron-LM flag given twice (issue 18): launch scripts override by appending
(`$BASE --seq-length 8192`) and Megatron's argparse keeps the last value, so dtplan reads it
the same way and says so once, naming the flag, both values and the one used; check annotates
the line of the value used. Through the real `dtplan`, on a script of our own."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_dtplan

SCRIPT = """#!/bin/bash
# dtplan-args: --hardware h100
export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron's validate_args requires it with TP > 1 (H100)
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --vocab-size 32000 --position-embedding-type rope --seq-length 2048 \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 \\
    --tensor-model-parallel-size 8 {extra}
"""
NOTE = "--seq-length given twice (2048, then 4096): Megatron's argparse keeps the last, 4096"


def _script(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "launch.sh"
    path.write_text(SCRIPT.format(extra=extra))
    return path


def test_check_uses_the_last_value_and_says_so_once(tmp_path):
    r = run_dtplan("check", _script(tmp_path, "--seq-length 4096"), "-f", "json")
    assert r.code in (0, 1), r.err
    doc = r.json()["files"][0]
    assert doc["summary"]["seq_len"] == 4096
    assert [n for n in doc["notes"] if "given" in n] == [NOTE]


def test_check_points_at_the_line_of_the_value_used(tmp_path):
    path = _script(tmp_path, "\\\n    --seq-length 4096")
    r = run_dtplan("check", path)
    assert r.code in (0, 1), r.err
    last = next(i + 1 for i, x in enumerate(path.read_text().splitlines())
                if "--seq-length 4096" in x)
    assert f"--seq-length:{last}" in r.out.replace("\n", " ").replace(" ", ""), r.out


@pytest.mark.parametrize("command, out", [(("report",), "out.md"),
                                          (("export", "--to", "torchtitan"), "out.sh")])
def test_report_and_export_say_it_once_too(tmp_path, command, out):
    r = run_dtplan(command[0], _script(tmp_path, "--seq-length 4096"), *command[1:],
                   "-o", str(tmp_path / out))
    assert r.code == 0, r.err
    said = (r.out + r.err + (tmp_path / out).read_text()).replace("\n", " ")
    assert said.count("--seq-length given twice") == 1, said[-2000:]


def test_three_values_are_all_named_and_the_same_value_twice_is_no_note(tmp_path):
    r = run_dtplan("check", _script(tmp_path, "--seq-length 4096 --seq-length=8192"),
                   "-f", "json")
    notes = r.json()["files"][0]["notes"]
    assert "--seq-length given 3 times (2048, then 4096, then 8192): Megatron's argparse " \
           "keeps the last, 8192" in notes
    r = run_dtplan("check", _script(tmp_path, "--seq-length 2048"), "-f", "json")
    assert not [n for n in r.json()["files"][0]["notes"] if "given" in n]
