"""The fp8 recipe in Megatron exports: written as Megatron-LM core_v0.15.3 takes it
(--fp8-format hybrid --fp8-recipe R, arguments.py:1313-1321), read back to the same recipe, so
an export → check round trip prices what the plan priced; a recipe Megatron has no flag for is
refused by name. Before, a plan stating --fp8 with precision mixed exported no fp8 flag, and the
reader ignored --fp8-format: both sides priced bf16 and the round trip hid it."""

from __future__ import annotations

import pytest

from conftest import one_input_error

PLAN = """model: llama3-8b
hardware: b200
gpus: 8
seq_len: 4096
layout: {{tp: 8, dp: 1, micro_batch: 1, precision: mixed, fp8: {recipe}}}
batch: {{global_batch: 64}}
"""


def _summary(dtplan, path) -> dict:
    r = dtplan("check", path, "--hardware", "b200", "-f", "json")
    assert r.code == 0, r
    return r.json()["files"][0]["summary"]


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", "mxfp8", "blockwise"])
def test_each_megatron_recipe_round_trips(dtplan, tmp_path, recipe):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(recipe=recipe))
    script = tmp_path / "megatron.sh"
    assert dtplan("export", plan, "--to", "megatron", "-o", script).code == 0
    text = script.read_text()
    assert "--fp8-format hybrid" in text and f"--fp8-recipe {recipe}" in text
    planned, read = _summary(dtplan, plan), _summary(dtplan, script)
    assert read["step_time_s"] == planned["step_time_s"]
    assert read["peak_memory_bytes"] == planned["peak_memory_bytes"]
    bf16 = tmp_path / "bf16.yaml"
    bf16.write_text(PLAN.format(recipe="none"))
    assert read["step_time_s"] < _summary(dtplan, bf16)["step_time_s"]   # fp8 is priced


@pytest.mark.parametrize("recipe", ["rowwise", "rowwise-gw-hp", "nvfp4"])
def test_a_recipe_megatron_has_no_flag_for_is_refused(dtplan, tmp_path, recipe):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(recipe=recipe))
    one_input_error(dtplan("export", plan, "--to", "megatron", "-o", tmp_path / "m.sh"),
                    "--to", f"the {recipe} fp8 recipe", "tensorwise, delayed, mxfp8, blockwise")
    assert not (tmp_path / "m.sh").exists()


def test_megatrons_default_recipe_is_delayed_and_an_unknown_one_fails(dtplan, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(recipe="delayed"))
    script = tmp_path / "megatron.sh"
    assert dtplan("export", plan, "--to", "megatron", "-o", script).code == 0
    default = tmp_path / "default.sh"   # --fp8-format alone: Megatron runs delayed scaling
    default.write_text(script.read_text().replace(" \\\n  --fp8-recipe delayed", ""))
    assert "--fp8-recipe" not in default.read_text()
    assert _summary(dtplan, default)["step_time_s"] == _summary(dtplan, script)["step_time_s"]
    bad = tmp_path / "bad.sh"
    bad.write_text(script.read_text().replace("--fp8-recipe delayed", "--fp8-recipe fp4"))
    r = dtplan("check", bad, "--hardware", "b200", "-f", "json")
    assert r.code == 1
    failed = [x["name"] for x in r.json()["files"][0]["rules"] if x["status"] == "fail"]
    assert failed == ["megatron-fp8-recipe"]
