"""Issue #17's must-shows on the time model: the ZeRO-3 scaling property, the gradient-reduction
dtype each framework profile states, and CP crossing the network beside TP8."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset
from planner.specs.framework import load_framework
from planner.evaluation.timing_terms import dp_gradient_bytes

H100 = load_profile("h100")
MODEL = get_preset("llama3-8b")


def _titan(**time):
    fw = load_framework("torchtitan")
    return dataclasses.replace(fw, time=dataclasses.replace(fw.time, **time)) if time else fw


def _fsdp_tokens_per_gpu(gpus: int, global_batch: int, fw=None) -> tuple[float, float]:
    """(tokens/s per GPU, exposed ZeRO-3 seconds) of DP-only ZeRO-3 at micro-batch B/N."""
    lay = Layout(tp=1, pp=1, dp=gpus, zero=3, micro_batch=global_batch // gpus)
    p = Problem(model=MODEL, hardware=H100, gpus=gpus, seq_len=4096, global_batch=global_batch,
                framework=fw or _titan())
    r = evaluate(p, Candidates.from_layouts([lay]))
    return float(r.throughput.tokens_per_s_per_gpu[0]), float(r.time.zero3_exposed[0])


@settings(max_examples=12, deadline=None)
@given(batch_exp=st.integers(5, 8), doublings=st.integers(1, 3))
def test_zero3_without_model_parallelism_loses_tokens_per_gpu(batch_exp, doublings):
    """At a fixed global batch, doubling the GPUs halves each one's micro-batch: the per-layer
    gathers stay the same size but have half the compute to hide behind. Tokens/s per GPU never
    rises, and once the gathers are exposed it falls."""
    batch = 2 ** batch_exp
    n = 8
    prev_tps, prev_exp = _fsdp_tokens_per_gpu(n, batch)
    for _ in range(doublings):
        n *= 2
        if batch // n < 1:
            break
        tps, exp = _fsdp_tokens_per_gpu(n, batch)
        assert tps <= prev_tps * (1 + 1e-9)
        assert exp >= prev_exp * (1 - 1e-9)
        if exp > 0.05 * (batch * 4096 / tps / n):   # gathers exposed: a real loss
            assert tps < prev_tps * 0.99
        prev_tps, prev_exp = tps, exp


def test_zero3_scaling_shape_at_fixed_batch():
    """Published ZeRO-3 runs lose throughput per GPU as the GPU count doubles twice at a fixed
    batch; dtplan reproduces the direction, with the loss coming from exposed gathers."""
    t8, e8 = _fsdp_tokens_per_gpu(32, 64)
    t32, e32 = _fsdp_tokens_per_gpu(64, 64)
    assert t32 < t8 and e32 > e8


def test_reduce_dtype_sets_dp_bytes_and_bf16_halves_them():
    p_mega = Problem(model=MODEL, hardware=H100, gpus=64, seq_len=4096, global_batch=512,
                     framework=load_framework("megatron"))
    p_titan = Problem(model=MODEL, hardware=H100, gpus=64, seq_len=4096, global_batch=512,
                      framework=_titan())
    params = np.array([1e9])
    # Megatron with bf16 → fp32 main grads reduced in fp32; FSDP2 mixed_precision_reduce fp32
    assert dp_gradient_bytes(p_mega, params)[0] == 4e9
    assert dp_gradient_bytes(p_titan, params)[0] == 4e9
    fw = load_framework("megatron")
    bf16 = dataclasses.replace(fw, time=dataclasses.replace(fw.time, reduce_dtype="bf16"))
    p_bf16 = Problem(**{**p_mega.__dict__, "framework": bf16})
    assert dp_gradient_bytes(p_bf16, params)[0] == 2e9
    # …and the DP reduction time follows: a bandwidth-bound all-reduce (ZeRO-0, 1 GB of bf16
    # gradients per GPU over 8 nodes) takes twice as long in fp32, up to its step latencies
    lay = Layout(tp=8, pp=1, dp=8, zero=0, micro_batch=1)
    t32 = evaluate(p_mega, Candidates.from_layouts([lay])).time.dp_total[0]
    t16 = evaluate(p_bf16, Candidates.from_layouts([lay])).time.dp_total[0]
    assert t32 / t16 == pytest.approx(2.0, rel=0.02)


def test_tp8_cp2_on_8_gpu_nodes_is_valid_and_cp_is_priced_on_the_network(dtplan):
    r = dtplan("estimate", "--model", "llama3-8b", "--gpus", "16", "--tp", "8", "--cp", "2",
               "--seq-len", "16384", "--global-batch", "8", "--zero", "1", "--hardware", "h100",
               "-f", "json")
    assert r.code == 0, r.err
    j = r.json()
    rules = {x["name"]: x["status"] for x in j["rules"]}
    assert rules["tp-in-nvlink-domain"] == "pass" and j["fits"]
    assert j["links"]["tp"] == "nvlink" and j["links"]["cp"] == "network"
    assert j["communication_s"]["cp"] > 0
    # the same CP ring inside one node (TP4 × CP2) is cheaper: the network is what it pays for
    k = dtplan("estimate", "--model", "llama3-8b", "--gpus", "16", "--tp", "4", "--cp", "2",
               "--seq-len", "16384", "--global-batch", "8", "--zero", "1", "--hardware", "h100",
               "-f", "json").json()
    assert k["links"]["cp"] == "nvlink"
    assert k["communication_s"]["cp"] < j["communication_s"]["cp"]


def test_every_axis_reports_the_link_it_crosses(dtplan):
    j = dtplan("estimate", "--params", "70e9", "--gpus", "256", "--tp", "2", "--zero", "3",
               "--hardware", "h100", "-f", "json").json()
    assert j["links"]["zero3"] == "network"      # a 128-rank shard group spans 32 nodes


def test_zb_h1_is_a_schedule_with_a_third_of_the_bubble_and_1f1b_memory(dtplan):
    args = ("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4",
            "--hardware", "h100", "-f", "json")
    one = dtplan(*args).json()
    zb = dtplan(*args, "--schedule", "zb-h1").json()
    assert zb["layout"]["schedule"] == "zb-h1"
    assert zb["breakdown_s"]["bubble"] < 0.5 * one["breakdown_s"]["bubble"]
    assert zb["peak_memory_bytes"] == pytest.approx(one["peak_memory_bytes"])
    assert dtplan("export", "--to", "megatron", *args[1:-2], "--schedule", "zb-h1").code == 2
