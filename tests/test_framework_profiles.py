"""Framework profiles: bundled files load, cite their source, and a copied file loads by path."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from planner.errors import InputError
from conftest import ROOT
from planner.specs.framework import (DEFAULT_FRAMEWORK, load_framework, list_frameworks,
                                     parse_framework)


def test_bundled_profiles_are_the_five_frameworks():
    # torchtune (issue 28): the fine-tuning recipes' FSDP2 stack with their chunked output loss
    assert [f.name for f in list_frameworks()] == ["deepspeed", "fsdp", "megatron", "torchtitan",
                                                   "torchtune"]
    assert load_framework(None).name == DEFAULT_FRAMEWORK == "megatron"


@pytest.mark.parametrize("alias,name", [("FSDP2", "torchtitan"), ("mcore", "megatron"),
                                        ("ds", "deepspeed"), ("accelerate", "fsdp"),
                                        ("tune", "torchtune")])
def test_aliases(alias, name):
    assert load_framework(alias).name == name


def test_reduce_dtypes_as_the_sources_state():
    # Megatron bf16 -> fp32 all-reduce (arguments.py); torchtitan mixed_precision_reduce fp32;
    # DeepSpeed communication_data_type falls back to bf16.
    assert load_framework("megatron").time.reduce_bytes == 4.0
    assert load_framework("torchtitan").time.reduce_bytes == 4.0
    assert load_framework("deepspeed").time.reduce_bytes == 2.0
    assert load_framework("torchtitan").time.regathers_in_backward(pp=1)
    assert not load_framework("torchtitan").time.regathers_in_backward(pp=4)
    assert load_framework("deepspeed").time.overlaps_grad_reduce(3)
    assert not load_framework("deepspeed").time.overlaps_grad_reduce(1)


def test_every_time_value_has_a_comment_above_or_beside_it():
    """Each key in [time] is preceded by a comment block or carries an inline comment."""
    for entry in files("framework_profiles").iterdir():
        if not entry.name.endswith(".toml"):
            continue
        lines = entry.read_text().splitlines()
        section, commented = None, False
        for line in lines:
            s = line.strip()
            if s.startswith("["):
                section, commented = s, False
            elif s.startswith("#"):
                commented = True
            elif "=" in s and section == "[time]":
                assert commented or "#" in s, f"{entry.name}: {s} has no cited source"
            elif not s:
                pass


def test_copy_and_edit_loads_by_path(tmp_path: Path):
    text = (files("framework_profiles") / "torchtitan.toml").read_text()
    edited = text.replace('reduce_dtype = "fp32"', 'reduce_dtype = "bf16"').replace(
        'name = "torchtitan"', 'name = "my-titan"')
    p = tmp_path / "mine.toml"
    p.write_text(edited)
    prof = load_framework(str(p))
    assert prof.name == "my-titan" and prof.time.reduce_bytes == 2.0


def test_bad_value_names_the_field(tmp_path: Path):
    text = (files("framework_profiles") / "fsdp.toml").read_text()
    with pytest.raises(InputError, match=r"time.kernel_class"):
        parse_framework(text.replace('kernel_class = "eager"', 'kernel_class = "magic"').encode(),
                        "x.toml")
    with pytest.raises(InputError, match=r"unknown framework 'megatorn'.*did you mean 'megatron'"):
        load_framework("megatorn")
    with pytest.raises(InputError, match="file not found"):
        load_framework(str(tmp_path / "nope.toml"))


def test_selection_through_cli_plan_and_engine_kind(dtplan, tmp_path):
    bad = dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatorn")
    assert bad.code == 2 and "--framework" in bad.err and "megatron" in bad.err
    eng = dtplan("check", "examples/engines/torchtitan-llama3-8b-64gpu.toml", "--gpus", "64",
                 "-f", "json", cwd=ROOT)
    assert eng.json()["files"][0]["summary"]["framework"] == "torchtitan"
    plan = (Path(ROOT) / "examples/plans/llama3-70b-256xh100.yaml").read_text()
    p = tmp_path / "plan.yaml"
    p.write_text(plan + "\nframework: deepspeed\n")
    j = dtplan("check", str(p), "-f", "json").json()
    assert j["files"][0]["summary"]["framework"] == "deepspeed"
    p.write_text(plan + "\nframework: nope\n")
    r = dtplan("check", str(p), "-f", "json").json()
    assert "framework" in r["files"][0]["error"]
