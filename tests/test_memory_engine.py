"""Engine pieces of the memory model: allocator rounding, framework recompute, pipeline in-flight
counts, the peak's moment, FSDP2 under PP."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.engine import allocator as alc
from planner.engine import framework_memory as fwm
from planner.engine import peak as pk
from planner.engine.budget import padded_vocab
from planner.engine.pipeline import micro_batches_in_flight
from planner.engine.recompute import every_nth_checkpointed, op_sac_saved_mms, op_sac_terms
from planner.evaluation.estimate import estimate
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

MiB = 2.0**20


def test_allocator_block_and_segment_sizes_are_pytorchs():
    assert alc.block_bytes(1) == 512 and alc.block_bytes(513) == 1024
    assert alc.segment_bytes(1 * MiB) == 2 * MiB          # small pool
    assert alc.segment_bytes(1 * MiB + 1) == 20 * MiB     # 1-10 MiB share 20 MiB segments
    assert alc.segment_bytes(10 * MiB) == 10 * MiB        # large: own segment, 2 MiB rounding
    assert alc.segment_bytes(11 * MiB) == 12 * MiB
    assert alc.segment_rounding(11 * MiB, 3) == 3 * MiB


def test_reserved_adds_fragmentation_of_churn_only_and_is_never_capped():
    r = alc.reserved_bytes(100.0, 60.0, 1.0, share=0.2)
    assert r == pytest.approx(100 + 1 + 0.2 * 40)
    assert alc.reserved_bytes(100.0, 60.0, share=0.2, expandable=1) == 100.0
    # the demand is the figure, however far past a device it goes (the verdict rejects it)
    assert alc.reserved_bytes(100.0, 0.0, share=0.5) == 150.0
    assert alc.reserved_bytes(1e12, 0.0, share=0.5) == 1.5e12
    assert alc.device_total_bytes(100.0, 5.0, 2.0) == 107.0


@given(states=st.floats(0, 1e11), per_mb=st.floats(0, 1e10), working=st.floats(0, 1e10),
       n=st.integers(1, 64), share=st.floats(0, 0.5))
def test_fragmentation_does_not_grow_with_the_micro_batches_in_flight(states, per_mb, working,
                                                                      n, share):
    # a stage holding n micro-batches' activations fragments what one micro-batch's cycle
    # allocates and frees (its activations and the working set), whatever n
    allocated = states + n * per_mb + working
    steady = alc.steady_bytes(states, per_mb, n)
    frag = alc.reserved_bytes(allocated, steady, share=share) - allocated
    assert frag == pytest.approx(share * (per_mb + working), rel=1e-9, abs=1e-3)
    assert alc.steady_bytes(states, per_mb, 1) == states


def test_deep_pipeline_fragmentation_is_one_micro_batchs_not_all_in_flight():
    # Llama 3.1 405B, TP 8 PP 16 interleaved v 8 at 8K: ~17.6 forwards in flight on stage 1
    m = get_preset("llama3.1-405b")
    lay = Layout(tp=8, pp=16, dp=64, zero=1, micro_batch=1, schedule="interleaved", chunks=8)
    e = estimate(m, load_profile("h100"), 8192, lay, seq_len=8192, global_batch=2048)
    for s in e.stages:
        it = s.items
        assert it["fragmentation"] < 0.1 * it["activations"]


def test_torchtitan_op_sac_saves_every_odd_matmul_and_sdpa():
    assert op_sac_saved_mms("swiglu") == ["wq", "wv", "w1", "w2"]
    assert op_sac_saved_mms("gelu") == ["wq", "wv", "fc1"]
    # Llama 3 8B, one token: input 2h + wq 2h + wv 2·kd + w1 2f + w2 2h + sdpa 2h + lse 4a
    t = op_sac_terms(1, 1, 4096, 32, 8, 128, 14336, mlp="swiglu")
    assert sum(t.values()) == 2 * 4096 * 4 + 2 * 1024 + 2 * 14336 + 4 * 32
    # fp8 through torchao: GEMMs are _scaled_mm, not in the save list
    t8 = op_sac_terms(1, 1, 4096, 32, 8, 128, 14336, mlp="swiglu", mm_is_saved=False)
    assert set(t8) == {"block_input", "sdpa_out", "sdpa_lse"}
    # a row-parallel output is the partial sum over the whole local sequence: not ÷t
    t_tp = op_sac_terms(1, 1, 4096, 32, 8, 128, 14336, mlp="swiglu", tp=8, sp=1)
    assert t_tp["w2_out"] == 2 * 4096 and t_tp["wq_out"] == 2 * 4096 / 8


def test_every_nth_layer_checkpointing_counts_from_one():
    assert every_nth_checkpointed(32, 2) == 16 and every_nth_checkpointed(32, 3) == 10
    assert every_nth_checkpointed(32, 1) == 32


def test_interleaved_in_flight_on_first_and_last_stage_follow_megatrons_warmup():
    # p = 4, v = 8 (Mixtral CI): first stage 2·3 + 7·4 + 1 = 35 chunks, last 7·4 + 1 = 29
    assert micro_batches_in_flight("interleaved", 4, 64, 0, 8) == pytest.approx(35 / 8)
    assert micro_batches_in_flight("interleaved", 4, 64, 3, 8) == pytest.approx(29 / 8)
    # Korthikanti Eq. 6 on the first stage: p(1 + (p−1)/(p·v))
    assert micro_batches_in_flight("interleaved", 8, 64, 0, 3) == pytest.approx(8 * (1 + 7 / 24))
    # when m ≤ p every micro-batch is in flight
    assert micro_batches_in_flight("interleaved", 16, 16, 1, 2) == pytest.approx(16)


def test_peak_moment_and_items():
    ph = pk.phase_items(10.0, 2.0, 4, 8, backward_working=1.0, loss=5.0, grads_first=0.5,
                        grads_accumulated=3.0, optimizer_temp=4.0, has_loss=1.0)
    total, moment, items = pk.peak_of(ph)
    # loss: 10 + 8 + 5 + 3 = 26; first backward 10 + 8 + 1 + 0.5; later 10 + 8 + 1 + 3.5
    assert total == 26.0 and pk.PHASES[int(moment)] == "loss" and items["grads"] == 3.0
    ph = pk.phase_items(10.0, 2.0, 4, 1, loss=5.0, grads_accumulated=3.0, has_loss=0.0)
    assert pk.PHASES[int(pk.peak_of(ph)[1])] == "forward"


def test_fsdp_gathered_and_accumulated_gradients():
    assert fwm.fsdp_gathered_params(100, 10, 5, keep_gathered=1) == 200
    assert fwm.fsdp_gathered_params(100, 10, 5, keep_gathered=0, prefetch=1) == 50
    per_layer, acc = fwm.fsdp_unsharded_grads(100, 10, 5, accumulate=1)
    assert (per_layer, acc) == (20, 400)
    per_layer, acc = fwm.fsdp_unsharded_grads(100, 10, 5, accumulate=0)
    assert (per_layer, acc) == (10 * (2 + 4) + 5 * 2, 0)
    bucket, live = fwm.deepspeed_buffers(3, 1e10, 1e8)
    assert bucket == 5e8 * 2 and live == (1e8 + 5e7) * 2


def test_torchtitan_under_pp_keeps_the_stage_gathered_with_fp32_gradients():
    m = get_preset("llama3-8b")
    lay = Layout(pp=2, dp=4, zero=3, micro_batch=1)
    e = estimate(m, load_profile("h100"), 8, lay, seq_len=2048, global_batch=16,
                 framework=load_framework("torchtitan"))
    first = e.stages[0]
    stage_params = first.items["weights"] * 4 / 4       # weights = 4 bytes · ψ / N, N = 4
    assert first.items["gathered_params"] == pytest.approx(2 * stage_params, rel=1e-9)
    assert "gradients accumulated" in first.moment
    assert first.items["grad_buffers"] >= 4 * stage_params


def test_gelu_model_with_and_without_dropout_through_the_cli(dtplan):
    gpt = ["memory", "--layers", "24", "--hidden", "2048", "--heads", "16", "--mlp", "gelu",
           "--gpus", "8", "--format", "json"]
    with_masks = dtplan(*gpt).json()["stages"][0]["items_bytes"]["activations"]
    plain = dtplan(*gpt, "--no-dropout").json()["stages"][0]["items_bytes"]["activations"]
    assert dtplan(*gpt, "--dropout").json()["stages"][0]["items_bytes"]["activations"] == with_masks
    assert plain < with_masks


def test_megatron_fp8_caches_two_weight_copies_and_saves_gemm_inputs_in_fp8():
    m = get_preset("llama3-8b")
    mega = load_framework("megatron")
    bf16 = estimate(m, load_profile("h100"), 8, Layout(tp=8, dp=1, micro_batch=1),
                    seq_len=4096, global_batch=8, framework=mega).stages[0]
    fp8 = estimate(m, load_profile("h100"), 8, Layout(tp=8, dp=1, micro_batch=1, precision="fp8"),
                   seq_len=4096, global_batch=8, framework=mega).stages[0]
    # TE keeps the fp8 weight and its transpose of each linear: 2 bytes per parameter on the
    # GPU, outside the embedding and output layer (bf16 in Megatron)
    linear = fp8.items["weights"] / 2 - _edges(m)
    assert fp8.items["fp8_weight_cache"] == pytest.approx(2 * linear, rel=1e-9)
    assert bf16.items["fp8_weight_cache"] == 0
    assert fp8.items["activations"] < bf16.items["activations"]


def _edges(m) -> float:
    """Embedding, output layer (padded vocabulary, over TP 8) and final norm on one GPU."""
    return padded_vocab(m.vocab, 8) * m.hidden * 2 / 8 + m.hidden


def _megatron_fp8(hw: str, recipe: str = "delayed", **memory: object):
    mega = load_framework("megatron")
    fw = replace(mega, memory=replace(mega.memory, **memory))
    lay = Layout(tp=8, dp=1, micro_batch=1, precision="fp8", fp8=recipe)
    return estimate(get_preset("llama3-8b"), load_profile(hw), 8, lay, seq_len=4096,
                    global_batch=8, framework=fw).stages[0]


def test_fp8_parameters_keep_the_linears_in_fp8_alone():
    """Megatron-Core fp8_param_gather: the linears' weights are 1 byte, the embedding and output
    layer stay bf16, the cached row-wise copy is the parameter (only the transpose is cached),
    and with grad_reduce_in_fp32 off the gradients are bf16."""
    m = get_preset("llama3-8b")
    plain = _megatron_fp8("h100")
    fp8p = _megatron_fp8("h100", fp8_params=True, grad_bytes=2.0)
    edges = _edges(m)
    linear = plain.items["weights"] / 2 - edges
    assert fp8p.items["weights"] == pytest.approx(linear * 1 + edges * 2, rel=1e-9)
    assert fp8p.items["fp8_weight_cache"] == pytest.approx(linear, rel=1e-9)
    assert fp8p.items["gradients"] == pytest.approx(plain.items["gradients"] / 2, rel=1e-9)
    assert fp8p.items["optimizer"] == pytest.approx(plain.items["optimizer"], rel=1e-12)


def test_blackwell_keeps_no_fp8_transpose_for_per_tensor_recipes():
    """On compute capability >= 10 a per-tensor fp8 weight serves both GEMM layouts (TE 2.x):
    one cached copy, none where the weight is an fp8 parameter; block-scaled MXFP8 still
    quantises each direction."""
    h100, b200 = _megatron_fp8("h100"), _megatron_fp8("b200")
    assert b200.items["fp8_weight_cache"] == pytest.approx(h100.items["fp8_weight_cache"] / 2)
    assert _megatron_fp8("b200", fp8_params=True).items["fp8_weight_cache"] == 0
    mx = _megatron_fp8("b200", "mxfp8").items["fp8_weight_cache"]
    assert mx == pytest.approx(h100.items["fp8_weight_cache"] * (1 + 1 / 32), rel=1e-9)


def test_fp8_cached_copies():
    assert fwm.fp8_cached_copies(2.0, transpose_needed=True, weight_is_fp8=False) == 2.0
    assert fwm.fp8_cached_copies(2.0, transpose_needed=False, weight_is_fp8=True) == 0.0
    assert fwm.fp8_cached_copies(0.0, transpose_needed=False, weight_is_fp8=True) == 0.0


def test_deepspeed_zero3_buckets_and_live_parameters():
    m = get_preset("llama3-8b")
    # the first of two stages has no loss: its peak is a layer's backward, buckets live
    e = estimate(m, load_profile("h100"), 8, Layout(pp=2, dp=4, zero=3), seq_len=2048,
                 global_batch=8, framework=load_framework("deepspeed"))
    first = e.stages[0]
    assert "backward" in first.moment
    it = first.items
    layer = m.layer_params()
    assert it["gathered_params"] == pytest.approx(2 * (layer + 5e7))   # block + prefetch bucket
    assert it["grad_buffers"] == pytest.approx(2 * 5e8)                 # reduce_bucket_size


def test_each_live_tensor_is_rounded_on_its_own():
    MiB = 2.0**20
    # whole 2 MiB pages strand nothing; an 11 MiB tensor its segment's last 1 MiB; a small one
    # its 512 B block rounding
    assert alc.tensors_gap([64 * MiB, 64 * MiB]) == 0.0
    assert alc.tensors_gap([64 * MiB, 11 * MiB, 1000.0]) == 1 * MiB + 24.0
    # the average of 64 and 11 MiB (37.5 MiB) would have charged both 0.5 MiB
    assert alc.segment_gap((64 * MiB + 11 * MiB) / 2) == 0.5 * MiB


@given(st.lists(st.floats(min_value=0.0, max_value=2.0**34), max_size=8))
def test_tensors_gap_is_the_sum_of_the_segment_gaps(sizes):
    assert alc.tensors_gap(sizes) == pytest.approx(sum(float(alc.segment_gap(s)) for s in sizes))


def test_fp8_parameters_are_all_gathered_in_fp8():
    """Megatron-Core fp8_param_gather: the distributed optimizer's parameter all-gather moves the
    uint8 parameter buffer; without it, bf16."""
    from planner.evaluation.candidates import Problem
    mega = load_framework("megatron")
    fp8p = replace(mega, memory=replace(mega.memory, fp8_params=True))

    def gather(fw, precision):
        return Problem(model=get_preset("llama3-8b"), hardware=load_profile("h100"), gpus=8,
                       seq_len=4096, global_batch=8, precision=precision, optimizer="adamw",
                       framework=fw).gather_bytes
    assert gather(fp8p, "fp8") == 1.0
    assert gather(mega, "fp8") == gather(fp8p, "mixed") == 2.0
