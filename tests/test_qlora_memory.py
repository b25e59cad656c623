"""QLoRA memory mechanisms (issue 28): what a 4-bit base keeps for backward by bitsandbytes
version, exact against the saved-tensor formulas."""

from __future__ import annotations

import dataclasses

import pytest

import planner
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.knobs import Layout


def old_bitsandbytes(fw: FrameworkProfile) -> FrameworkProfile:
    """The same trainer with bitsandbytes < 0.43.2 (litgpt pinned 0.41.1, then 0.42.0)."""
    return dataclasses.replace(fw, memory=dataclasses.replace(
        fw.memory, quantised_linear_saves_input=True))


def _activations(fw: FrameworkProfile, finetune: str, targets: str = "q,v",
                 recompute: str = "none") -> float:
    lay = Layout(finetune=finetune, lora_targets=targets, lora_rank=8, precision="bf16-pure",
                 optimizer="adamw", micro_batch=1, recompute=recompute)
    e = planner.estimate(planner.get_preset("llama2-7b"), planner.load_profile("a100-80g"), 1,
                         lay, seq_len=1304, global_batch=1, framework=fw)
    return float(e.stages[0].items["activations"])


def test_bitsandbytes_before_0_43_2_keeps_every_4bit_linear_input():
    # q and v adapted: the QKV input is kept anyway and flash attention keeps the output
    # projection's input; the MLP's input (h) and the down projection's input (f) were kept
    # only by the old MatMul4Bit, 2 bytes each, per token and layer
    fw = load_framework("fsdp")
    m = planner.get_preset("llama2-7b")
    extra = _activations(old_bitsandbytes(fw), "qlora") - _activations(fw, "qlora")
    assert extra == pytest.approx(m.layers * 1304 * (m.hidden + m.ffn) * 2.0, rel=1e-9)
    # every linear adapted: LoRA's trained path needs those inputs anyway, nothing changes
    assert _activations(old_bitsandbytes(fw), "qlora", "all-linear") == \
        pytest.approx(_activations(fw, "qlora", "all-linear"))


def test_old_bitsandbytes_changes_nothing_without_a_quantised_base_or_under_full_recompute():
    fw = load_framework("fsdp")
    assert _activations(old_bitsandbytes(fw), "lora") == _activations(fw, "lora")
    assert _activations(old_bitsandbytes(fw), "qlora", recompute="full") == \
        pytest.approx(_activations(fw, "qlora", recompute="full"))


def test_bundled_profiles_run_a_current_bitsandbytes():
    for name in ("fsdp", "torchtune", "deepspeed", "megatron", "torchtitan"):
        assert load_framework(name).memory.quantised_linear_saves_input is False


def test_an_eager_swiglu_keeps_silu_of_the_gate_for_memory_not_for_time():
    """F.silu(gate) * up (HF LlamaMLP, lit-gpt LLaMAMLP, torchtitan FeedForward without
    torch.compile): the product's backward needs SiLU(gate) for up's gradient, f more bytes a
    token than a fused SwiGLU; the time model's memory-pass factor was fitted without it."""
    import numpy as np

    from planner.engine import activations as act
    args = (4096, 1, 4096, 32, 8, 128, 14336)
    fused = act.layer_activation_terms(*args, mlp="swiglu", flash=True)
    eager = act.layer_activation_terms(*args, mlp="swiglu", flash=True, fused_swiglu=False)
    assert set(eager) - set(fused) == {"swiglu_silu_out"}
    assert float(np.asarray(eager["swiglu_silu_out"])) == 4096 * 14336 * 2
    assert "swiglu_silu_out" in act.MEMORY_ONLY_TERMS
    full = act.layer_activation_terms(*args, mlp="swiglu", flash=True, fused_swiglu=False,
                                      recompute=act.RECOMPUTE_FULL)
    assert float(np.asarray(full["swiglu_silu_out"])) == 0.0


def _frozen(fw: FrameworkProfile, finetune: str) -> float:
    lay = Layout(finetune=finetune, lora_targets="q,v", lora_rank=8, optimizer="adamw")
    e = planner.estimate(planner.get_preset("llama3-8b"), planner.load_profile("h100"), 1, lay,
                         seq_len=1024, global_batch=1, framework=fw)
    return float(e.stages[0].items["frozen_weights"])


def test_peft_kbit_preparation_keeps_the_unquantised_parameters_in_fp32():
    """prepare_model_for_kbit_training casts the embeddings, the untied head and the final norm
    (2 × 128,256 × 4,096 + 4,096 for Llama-3-8B) from bf16 to fp32: 2 bytes a parameter more,
    under a quantised base only; torchtune (torchao NF4, no such cast) keeps them in bf16."""
    fsdp, tune = load_framework("fsdp"), load_framework("torchtune")
    assert fsdp.memory.quantised_base_rest_fp32 and load_framework("deepspeed").memory.\
        quantised_base_rest_fp32 and not tune.memory.quantised_base_rest_fp32
    plain = dataclasses.replace(fsdp, memory=dataclasses.replace(
        fsdp.memory, quantised_base_rest_fp32=False))
    assert _frozen(fsdp, "qlora") - _frozen(plain, "qlora") == \
        pytest.approx((2 * 128_256 * 4096 + 4096) * 2.0, rel=1e-9)
    assert _frozen(fsdp, "lora") == _frozen(plain, "lora")   # a bf16 base is not prepared


def test_the_deepspeed_export_names_the_kbit_preparation(dtplan):
    r = dtplan("export", "examples/plans/pass-qlora-llama3-8b-rtx4090.yaml", "--to", "deepspeed")
    assert r.code == 0 and "prepare_model_for_kbit_training" in r.err
