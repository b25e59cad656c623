"""Framework profiles: bundled files load, cite their source, and a copied file loads by path."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.specs.framework import (DEFAULT_FRAMEWORK, load_framework, list_frameworks,
                                     parse_framework)


def test_bundled_profiles_are_the_four_frameworks():
    assert [f.name for f in list_frameworks()] == ["deepspeed", "fsdp", "megatron", "torchtitan"]
    assert load_framework(None).name == DEFAULT_FRAMEWORK == "megatron"


@pytest.mark.parametrize("alias,name", [("FSDP2", "torchtitan"), ("mcore", "megatron"),
                                        ("ds", "deepspeed"), ("accelerate", "fsdp")])
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
