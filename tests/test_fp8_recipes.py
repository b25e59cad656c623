"""Low-precision recipes by name (--fp8): each refused on the GPU classes that cannot run it,
priced by the GEMMs it covers, its rate, its casts and its stored bytes (engine/fp8.py)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.engine import fp8
from planner.evaluation.estimate import estimate
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import list_profiles, load_profile
from planner.specs.knobs import Fp8Recipe, Layout
from planner.specs.presets import get_preset

from conftest import one_input_error

M8 = get_preset("llama3-8b")


def _est(hw: str, recipe: str, *, framework: str = "megatron", gpus: int = 1, **lay):
    layout = Layout(dp=gpus, micro_batch=1, fp8=recipe, **lay)  # type: ignore[arg-type]
    fw = load_framework(framework)
    return estimate(M8, load_profile(hw) if isinstance(hw, str) else hw, gpus, layout,
                    seq_len=4096, global_batch=8 * gpus, framework=fw)


def test_the_knob_lists_the_engine_recipes():
    assert typing.get_args(Fp8Recipe) == ("none",) + fp8.NAMES


def test_every_bundled_profile_lists_only_recipes_it_has_a_rate_for():
    for prof in list_profiles():
        for name in prof.gpu.fp8_recipes:
            assert fp8.recipe_peak(prof.gpu.peak_flops, fp8.RECIPES[name]), (prof.name, name)


# One GPU of each class and a recipe its tensor cores lack (research fp8.md §3).
REFUSED = [
    ("a100-80g", "tensorwise", "no fp8"),       # Ampere: no fp8 tensor cores
    ("rtx3090", "rowwise", "no fp8"),
    ("rtx4090", "blockwise", "rowwise-gw-hp"),  # Ada: fp8, no block scaling
    ("l40s", "mxfp8", "tensorwise"),
    ("h100", "mxfp8", "blockwise"),             # Hopper: no MX / NVFP4 tensor cores
    ("h200", "nvfp4", "blockwise"),
    ("mi300x", "mxfp8", "tensorwise"),          # CDNA3: fp8, not MX
    ("mi355x", "nvfp4", "mxfp8"),               # CDNA4: MXFP8, not NVIDIA's NVFP4
    ("rtx5090", "blockwise", "nvfp4"),          # SM120: no blockwise path
]


@pytest.mark.parametrize("hw,recipe,runs", REFUSED)
def test_a_recipe_the_gpu_cannot_run_is_refused_naming_the_option(dtplan, hw, recipe, runs):
    r = dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "--hardware", hw,
               "--fp8", recipe)
    one_input_error(r, "--fp8", recipe, hw, runs)


def test_precision_fp8_is_tensorwise_and_refused_where_tensorwise_is(dtplan):
    one_input_error(dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "--hardware",
                           "a100-80g", "--precision", "fp8"), "--fp8", "--precision fp8")
    a = _est("h100", "none", precision="fp8")
    b = _est("h100", "tensorwise")
    assert a.step_time_s == b.step_time_s and a.peak_memory_bytes == b.peak_memory_bytes
    assert a.layout.precision == "fp8" and any("Low precision tensorwise" in n for n in a.notes)


PLAN = "model: llama3-8b\ngpus: 8\nseq_len: 4096\nhardware: {hw}\n{tail}"
MEGATRON = ("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n  --num-layers 32 --hidden-size 4096"
            " --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 \\\n"
            "  --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 128256 \\\n"
            "  --fp8-format hybrid \\\n  --fp8-recipe {recipe}\n")


@pytest.mark.parametrize("name,text,args,where", [
    ("plan.yaml", PLAN.format(hw="h100", tail="layout:\n  tp: 1\n  fp8: mxfp8\n"), [],
     "plan.yaml:7: layout.fp8: mxfp8 is not allowed on h100"),
    ("plan.yaml", PLAN.format(hw="a100-80g", tail="precision: fp8\n"), [],
     "plan.yaml:5: precision: tensorwise"),
    ("plan.yaml", PLAN.format(hw="a100-80g", tail=""), ["--precision", "fp8"],
     "--precision: tensorwise"),
    ("train.sh", MEGATRON.format(recipe="mxfp8"), ["--hardware", "h100"],
     "train.sh:5: --fp8-recipe: mxfp8 is not allowed on h100"),
    ("train.sh", MEGATRON.format(recipe="blockwise"), ["--hardware", "a100-80g"],
     "train.sh:5: --fp8-recipe: blockwise is not allowed on a100-80g"),
])
def test_a_file_whose_recipe_the_gpu_cannot_run_is_refused_at_its_line(dtplan, tmp_path, name,
                                                                        text, args, where):
    """The refusal names the file's line and key (or the flag that set it), as every other bad
    input in a file does; it used to name the library's parameter, `fp8`."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    one_input_error(dtplan("check", name, *args, cwd=tmp_path), where)
    # `check DIR` reports the same line among the directory's files
    r = dtplan("check", ".", *args, cwd=tmp_path)
    assert r.code == 2 and where in r.err, r


def test_a_recipe_needs_mixed_precision_around_it(dtplan):
    one_input_error(dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "--fp8",
                           "rowwise", "--precision", "fp32"), "--fp8", "fp32")


def test_blackwell_runs_every_recipe_and_each_is_priced():
    steps = {r: _est("b200", r).step_time_s for r in ("none",) + fp8.NAMES}
    # fp4 tensor cores at twice the fp8 rate: NVFP4 is the fastest; bf16 the slowest
    assert min(steps, key=steps.get) == "nvfp4" and max(steps, key=steps.get) == "none"
    # a weight gradient kept in bf16 costs time; rowwise's extra casts cost time
    assert steps["rowwise-gw-hp"] > steps["rowwise"] > steps["tensorwise"]
    # delayed scaling takes the amax inside the cast (no extra read)
    assert steps["delayed"] < steps["tensorwise"]


def test_stored_bytes_follow_the_format_under_transformer_engine():
    t, mx, nv = (_est("b200", r).stages[0].items for r in ("tensorwise", "mxfp8", "nvfp4"))
    # Megatron / TE caches two quantised weight copies of the block-scaled formats, 1 + 1/32
    # and 0.5 + 1/16 B each; a per-tensor fp8 weight serves both layouts on Blackwell: one 1 B
    assert mx["fp8_weight_cache"] == pytest.approx(t["fp8_weight_cache"] * 2 * 33 / 32, rel=1e-9)
    assert nv["fp8_weight_cache"] == pytest.approx(t["fp8_weight_cache"] * 2 * 0.5625, rel=1e-9)
    # and saves the GEMM inputs quantised: NVFP4's are the smallest, MX's scales add a little
    assert nv["activations"] < t["activations"] < mx["activations"]


def test_torchao_keeps_bf16_inputs_and_caches_no_weight():
    t = _est("b200", "tensorwise", framework="torchtitan").stages[0].items
    nv = _est("b200", "nvfp4", framework="torchtitan").stages[0].items
    assert t["fp8_weight_cache"] == nv["fp8_weight_cache"] == 0
    assert t["activations"] == nv["activations"]


def test_rtx_blackwell_runs_mxfp8_at_twice_its_plain_fp8_rate():
    # SM120: plain fp8 with fp32 accumulation at half rate, block-scaled at full (mmapeak)
    t, mx = (_est("rtx5090", r, finetune="lora") for r in ("tensorwise", "mxfp8"))
    assert mx.step_time_s < 0.8 * t.step_time_s


def test_hopper_blockwise_runs_at_the_deepgemm_ceiling():
    h = load_profile("h100")
    assert h.efficiency.recipe_ceiling_fractions["blockwise"] == pytest.approx(1520 / 1978.9,
                                                                                abs=1e-3)
    assert _est("h100", "blockwise").step_time_s < _est("h100", "tensorwise").step_time_s


def test_fsdp_fp8_all_gather_only_for_tensorwise():
    titan = load_framework("torchtitan")
    on = dataclasses.replace(titan, time=dataclasses.replace(titan.time, fp8_all_gather=True))

    def gathered(recipe: str, fw):
        e = estimate(M8, load_profile("h100"), 8, Layout(dp=8, zero=3, micro_batch=1,
                                                         fp8=recipe),  # type: ignore[arg-type]
                     seq_len=4096, global_batch=64, framework=fw)
        return e.stages[0].items["gathered_params"], e.breakdown
    assert gathered("tensorwise", on)[0] == pytest.approx(gathered("tensorwise", titan)[0] / 2)
    assert gathered("rowwise", on)[0] == gathered("rowwise", titan)[0]


@given(st.sampled_from(fp8.NAMES), st.floats(1e3, 1e9), st.floats(1e3, 1e9))
def test_casts_grow_with_the_tensors_and_tensorwise_is_the_old_formula(name, a, w):
    r = fp8.RECIPES[name]
    f, b = fp8.cast_time(a, w, 1e12, r)
    f2, b2 = fp8.cast_time(2 * a, 2 * w, 1e12, r)
    assert f2 == pytest.approx(2 * f) and b2 == pytest.approx(2 * b) and f > 0
    if name == "tensorwise":
        assert (f, b) == pytest.approx((5 * (a + w) / 1e12, 5 * a / 1e12))


@given(st.sampled_from(fp8.NAMES), st.floats(1e9, 1e15), st.floats(1e13, 1e15),
       st.floats(1.0, 4.0))
def test_low_precision_gemms_never_slower_than_bf16_at_a_faster_rate(name, flops, bf16, speedup):
    r = fp8.RECIPES[name]
    f_lo, b_lo = fp8.linear_time(flops, bf16, bf16 * speedup, r)
    f_hi, b_hi = fp8.linear_time(flops, bf16, bf16 * speedup, None)
    assert f_lo <= f_hi * (1 + 1e-12) and b_lo <= b_hi * (1 + 1e-12)
    # a recipe that keeps wgrad in bf16 spends exactly one bf16 GEMM in backward
    if not r.wgrad_low:
        assert b_lo == pytest.approx(flops / (bf16 * speedup) + flops / bf16)
