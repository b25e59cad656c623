"""CPU activation offload and the optimizer step in backward (torchtune's
enable_activation_offloading and optimizer_in_bwd): what they take off the GPU, what they cost,
and where they are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine import step_time as stt
from planner.evaluation.estimate import estimate
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset

M8 = get_preset("llama3-8b")
TUNE = load_framework("torchtune")


def _est(hw: str = "h100", gpus: int = 1, batch: int = 2, framework=TUNE, **lay):
    layout = Layout(dp=gpus, **{"micro_batch": 2, **lay})
    return estimate(M8, load_profile(hw), gpus, layout, seq_len=4096, global_batch=batch,
                    framework=framework)


def _rule(e, name: str):
    return next(r for r in e.rules if r.name == name)


def test_offload_leaves_one_layer_of_activations_and_pays_pcie():
    on, off = _est(activation_offload=True), _est()
    a_on, a_off = (e.stages[0].items["activations"] for e in (on, off))
    # 32 layers' saved tensors become one layer's (the output layer's stay on the GPU)
    assert a_on < a_off / 8
    assert on.breakdown["offload"] > 0 and off.breakdown["offload"] == 0
    assert on.step_time_s == pytest.approx(off.step_time_s + on.breakdown["offload"], rel=1e-9)
    # the host holds what left the GPU: 31 of the 32 layers (one micro-batch in flight)
    note = next(n for n in on.notes if n.startswith("Activation offload:"))
    assert float(note.split()[2]) == pytest.approx((a_off - a_on) / 1e9, rel=0.1)
    assert not any(n.startswith("Activation offload:") for n in off.notes)


def test_offload_under_full_recompute_moves_only_layer_inputs_and_hides_behind_compute():
    on = _est(activation_offload=True, recompute="full")
    # 2·s·b·h bytes a layer (0.034 GB) over ~64 GB/s PCIe hide behind a layer's compute
    assert on.breakdown["offload"] == 0


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["none", "selective", "full"]), st.sampled_from([1, 2, 4]),
       st.sampled_from(["full", "lora"]), st.sampled_from(["h100", "rtx4090", "l4"]))
def test_offload_never_raises_the_gpu_peak_nor_shortens_the_step(recompute, mb, ft, hw):
    kw = dict(hw=hw, batch=mb, micro_batch=mb, recompute=recompute, finetune=ft,
              framework=load_framework("fsdp") if recompute == "selective" else TUNE)
    if recompute == "selective":
        kw["framework"] = load_framework("megatron")
    on, off = _est(activation_offload=True, **kw), _est(**kw)
    assert on.peak_memory_bytes <= off.peak_memory_bytes * (1 + 1e-12)
    assert on.step_time_s >= off.step_time_s * (1 - 1e-12)


@given(st.floats(1e6, 1e11), st.floats(1e9, 1e11), st.floats(0, 1), st.floats(0, 1))
def test_exposed_pcie_time_is_what_compute_does_not_hide(saved, pcie, fwd, bwd):
    exposed = stt.activation_offload_exposed(saved, pcie, fwd, bwd)
    move = saved / pcie
    assert 0 <= exposed <= 2 * move + 1e-15
    assert exposed == pytest.approx(max(move - fwd, 0) + max(move - bwd, 0))


def test_optimizer_in_backward_holds_one_layer_of_gradients():
    on, off = _est(optimizer_in_backward=True), _est()
    g_on, g_off = (e.stages[0].items["gradients"] for e in (on, off))
    # Llama-3-8B: 218M parameters in a layer of 8.03B (the embedding and head are their own
    # units): one layer's fp32 gradients in place of the model's
    assert g_on == pytest.approx(g_off * 218.1e6 / 8.03e9, rel=0.01)
    assert _rule(on, "optimizer-in-backward").status == "pass"
    assert on.peak_memory_bytes < off.peak_memory_bytes


def test_optimizer_in_backward_refuses_gradient_accumulation_and_other_frameworks():
    # torchtune refuses it with gradient accumulation (full_finetune_single_device.py:151-160)
    assert _rule(_est(batch=4, optimizer_in_backward=True), "optimizer-in-backward").status \
        == "fail"
    mega = _est(framework=load_framework("megatron"), optimizer_in_backward=True)
    assert _rule(mega, "optimizer-in-backward").status == "fail"
    assert "megatron has no optimizer in backward" in _rule(mega, "optimizer-in-backward").limit


def test_fit_with_optimizer_in_backward_keeps_one_micro_batch_a_step(dtplan):
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "--framework", "torchtune",
               "--global-batch", "16", "--optimizer-in-backward", "--format", "json")
    assert r.code in (0, 1), r
    d = r.json()
    assert d["layouts"], d
    for row in d["layouts"]:
        lay = row["layout"]
        assert lay["optimizer_in_backward"] and lay["micro_batch"] * lay["dp"] == 16
    counts = {x["rule"]: x["count"] for x in d["rejections"]}
    assert counts["optimizer-in-backward"] > 0
