"""Hybrid-sharded ZeRO-3 (HSDP: a shard group smaller than DP × CP) pays the all-reduce of each
gradient shard across the replicas (issue #26): it runs on the link between replicas, so the
step grows when the network shrinks; without hybrid sharding nothing is added."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engine import step_time as st
from planner.engine.topology import fabric, members_per_domain, topo_collective_time
from planner.specs.hardware_toml import load_profile


def _step(dtplan, *extra: str) -> float:
    r = dtplan("estimate", "--model", "llama3-8b", "--gpus", "64", "--zero", "3", *extra,
               "--format", "json")
    assert r.code == 0, r.err
    return float(r.json()["step_time_s"])


def test_the_hsdp_step_grows_when_the_network_shrinks(dtplan):
    """--shard-group 8 on 64 H100s: the 8 replicas of each shard sit in 8 nodes, so their
    all-reduce crosses the NICs. It used to cost nothing (the same step at 400 and 1 Gb/s)."""
    fast, slow = (_step(dtplan, "--shard-group", "8", "--nic-gbit", n) for n in ("400", "25"))
    assert slow > fast * 1.5
    # the same at 400 Gb/s but sharded over all 64: no replicas, no replica all-reduce; the
    # hybrid layout pays its replicas' all-reduce on top of a cheaper in-node reduce-scatter
    assert _step(dtplan, "--shard-group", "8", "--nic-gbit", "400") != \
        _step(dtplan, "--nic-gbit", "400")


def test_the_replica_all_reduce_is_the_shard_over_the_replicas():
    """hsdp_replica_time: an all-reduce of unit_params / shard × reduce bytes over n / shard
    ranks, stride × shard GPUs apart; 0 where the shard group is the whole group."""
    hw = load_profile("h100")
    fab, gpn = fabric(hw, 64), hw.scale_up.gpus_per_domain
    t = st.hsdp_replica_time(np.array([2e8, 2e8, 2e8]), 4.0, np.array([8.0, 64.0, 2.0]),
                             np.array([64.0, 64.0, 64.0]), 1.0, gpn, fab)
    want8 = topo_collective_time("all-reduce", 2e8 * 4 / 8, 8.0,
                                 members_per_domain(8.0, 8.0, gpn), fab)
    want2 = topo_collective_time("all-reduce", 2e8 * 4 / 2, 32.0,
                                 members_per_domain(32.0, 2.0, gpn), fab)
    assert t.tolist() == pytest.approx([float(want8), 0.0, float(want2)], rel=1e-12)
    assert float(want8) > 0


def test_fit_prices_hybrid_rows_by_the_network(dtplan):
    """The search ranks hybrid ZeRO-3 rows with their replica all-reduce: at 25 Gb/s a hybrid
    row's step is longer than at 400 Gb/s for the same layout."""
    def first_hybrid(nic: str) -> dict:
        r = dtplan("fit", "--model", "llama3-8b", "--gpus", "64", "--zero", "3", "--tp", "1",
                   "--pp", "1", "--nic-gbit", nic, "--all", "--top", "1000", "--format", "json")
        rows = [x for x in r.json()["layouts"] if x["layout"]["shard_group"] == 8
                and x["layout"]["micro_batch"] == 1 and x["layout"]["recompute"] == "none"]
        assert rows, r.err
        return rows[0]
    assert first_hybrid("25")["step_time_s"] > first_hybrid("400")["step_time_s"]


def test_expert_gradients_reduce_over_the_expert_data_parallel_group(dtplan):
    """An MoE's expert gradients are reduced over DP·CP / EP ranks, TP·EP GPUs apart (Megatron-
    Core's expert data-parallel group), not with the dense ones over DP·CP: Mixtral 8x7B on 64
    H100s, TP 2, EP 8, ZeRO-1: the 4 expert replicas of a rank sit in 4 nodes, so the expert
    reduction crosses the NICs whole (was priced as the dense group's, mostly inside a node).
    EP 1 keeps one reduction over DP·CP."""
    from planner.engine.topology import fabric as fab_of
    from planner.evaluation import timing_terms as tt
    from planner.evaluation.candidates import Candidates, shape
    from planner.evaluation.train import problem
    from planner.specs.layout import Layout
    from planner.specs.presets import get_preset

    hw = load_profile("h100")
    p = problem(get_preset("mixtral-8x7b"), hw, 64, seq_len=4096, global_batch=256).resolved()
    c = Candidates.from_layouts([Layout(tp=2, dp=32, ep=8, zero=1),
                                 Layout(tp=2, dp=32, ep=1, zero=1)])
    x = shape(p, c)
    stage = np.array([3e9, 3e9])
    got = tt._state_collectives(p, x, c.zero, stage)["red"]
    expert = np.minimum(tt._expert_stage_params(p, x), stage)
    assert expert[0] > 0
    gpn, fab = hw.scale_up.gpus_per_domain, fab_of(hw, 64)
    rb = p.fw.time.reduce_bytes
    dense_red = st.dp_reduction_times(rb * (stage[0] - expert[0]), 0.0, True, 64 / 2, 2.0, gpn,
                                      fab)[0]
    expert_red = st.dp_reduction_times(rb * expert[0], 0.0, True, 32 / 8, 16.0, gpn, fab)[0]
    assert float(got[0]) == pytest.approx(float(dense_red) + float(expert_red), rel=1e-12)
    whole = st.dp_reduction_times(rb * stage[1], 0.0, True, 32.0, 2.0, gpn, fab)[0]
    assert float(got[1]) == pytest.approx(float(whole), rel=1e-12)
    # the expert part crossing the network whole costs more than inside the dense group
    assert float(expert_red) > float(st.dp_reduction_times(rb * expert[0], 0.0, True, 32.0, 2.0,
                                                          gpn, fab)[0])
