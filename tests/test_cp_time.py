"""Context parallel's traffic by how the framework runs the ring (engine/step_time.py
cp_time_per_layer): Transformer Engine's p2p ring of the KV heads (Megatron) and torch's ring
attention (torchtitan), which exchanges all heads' K/V and rings fp32 dK/dV home (pytorch
torch/distributed/tensor/experimental/_attention.py `_templated_ring_attention_backward`:
`dkv_rotater` is ALL_TO_ALL whatever the method)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine.step_time import cp_time_per_layer
from planner.engine.topology import Fabric

FAB = Fabric(intra_bytes_per_s=1e11, intra_latency_s=1e-5, inter_bytes_per_s=1e10,
             inter_latency_s=2e-5)
T, KV_DIM, Q_DIM = 4096.0, 1024.0, 4096.0   # tokens on the rank, KV heads·d, heads·d


def hop(nbytes: float) -> float:
    """One NVLink send: α + M/β."""
    return 1e-5 + nbytes / 1e11


def test_transformer_engine_ring_sends_the_kv_heads_three_times_cp_minus_one_hops():
    chunk = 2 * T * KV_DIM * 2 / 2                # K|V, bf16, ÷ TP 2
    got = cp_time_per_layer(T, KV_DIM, 4, 2, 8, FAB, 2.0)
    assert float(got) == pytest.approx(9 * hop(chunk), rel=1e-12)


def test_torch_alltoall_ring_sends_all_heads_and_fp32_gradients_home():
    kv, grads = 2 * T * Q_DIM * 2 / 2, 2 * T * Q_DIM * 4 / 2
    got = cp_time_per_layer(T, KV_DIM, 4, 2, 8, FAB, 2.0, rotate="alltoall", q_dim=Q_DIM)
    assert float(got) == pytest.approx(2 * 3 * hop(kv) + 4 * hop(grads), rel=1e-12)


@pytest.mark.parametrize("rotate", ["none", "allgather", "alltoall"])
def test_no_context_parallel_no_traffic(rotate):
    assert float(cp_time_per_layer(T, KV_DIM, 1, 2, 8, FAB, 2.0, rotate=rotate,
                                   q_dim=Q_DIM)) == 0.0


@settings(max_examples=60, deadline=None)
@given(cp=st.sampled_from([2, 4, 8]), tokens=st.integers(256, 131072),
       group=st.sampled_from([2, 4, 8]))
def test_torch_ring_moves_at_least_its_bytes_and_more_than_the_kv_head_ring(cp, tokens, group):
    """Inside one NVLink domain, each rank receives every other rank's all-head K|V twice
    (forward, backward) and sends its fp32 dK|dV partial cp times: the all-gather cannot beat
    that volume at the link rate; with heads > KV heads torch's ring costs more than Transformer
    Engine's (across domains NCCL's ring all-gather crosses the NIC less often than cp − 1 p2p
    hops, so there the order is not fixed)."""
    kv_dim = Q_DIM / group
    kv, grads = 2 * tokens * Q_DIM * 2.0, 2 * tokens * Q_DIM * 4.0
    floor = (2 * (cp - 1) * kv + cp * grads) / 1e11
    for rotate in ("allgather", "alltoall"):
        t = float(cp_time_per_layer(tokens, kv_dim, cp, 1, 8, FAB, 2.0, rotate=rotate,
                                    q_dim=Q_DIM))
        assert t >= floor * (1 - 1e-12)
        assert t > float(cp_time_per_layer(tokens, kv_dim, cp, 1, 8, FAB, 2.0))


def test_the_framework_profiles_choose_the_ring(dtplan):
    """Through `dtplan estimate`: the same CP8 layout costs torchtitan (all heads, fp32 dK|dV)
    more CP traffic than Megatron (KV heads); Llama-3.1-8B has 4 query heads a KV head."""
    args = ("estimate", "--model", "llama3.1-8b", "--hardware", "h100", "--gpus", "64",
            "--cp", "8", "--zero", "3", "--seq-len", "65536", "--global-batch", "8",
            "--format", "json")
    cp = {fw: dtplan(*args, "--framework", fw).json()["communication_s"]["cp"]
          for fw in ("megatron", "torchtitan")}
    # all-gathered bf16 K|V both ways ×4 heads plus fp32 dK|dV (×8): well over 4× the KV ring
    assert cp["torchtitan"] > 4 * cp["megatron"] > 0
