"""The MoE all-to-all as the engines run it (engine.step_time.ep_time_per_layer): DeepEP-style
dispatch once per rank and remote domain, group-limited (node-limited) routing, fp8 dispatch
as a framework profile key, and full recompute re-running the dispatch and combine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as hs

from planner.engine import nccl
from planner.engine import step_time as st
from planner.engine.topology import Fabric
from planner.specs.presets import get_preset

FAB = Fabric(intra_bytes_per_s=100e9, intra_latency_s=3e-6, inter_bytes_per_s=10e9,
             inter_latency_s=5e-6)
ROOT = Path(__file__).resolve().parents[1]
DEEPSEEK_V3 = ("estimate", "--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048",
               "--pp", "16", "--ep", "64", "--zero", "1", "--first-stage-layers", "4",
               "--last-stage-layers", "1", "--seq-len", "4096", "--global-batch", "15360",
               "--precision", "fp8", "--schedule", "dualpipe", "-f", "json")


def test_reach_on_a_small_case_is_exact():
    # 8 experts, top-2, EP 4 over 2 domains of 2 ranks: 4 experts a domain, 2 a rank.
    free = st.EpRoute(experts=8, dedup=True)
    doms, ranks = st.ep_reach(2, free, 4, 2)
    assert float(doms) == pytest.approx(2 * (1 - (4 / 8) * (3 / 7)))      # 11/7
    assert float(ranks) == pytest.approx(4 * (1 - (6 / 8) * (5 / 7)))     # 13/7
    limited = st.EpRoute(experts=8, groups=2, group_topk=1, dedup=True)  # one domain allowed
    doms, ranks = st.ep_reach(2, limited, 4, 2)
    assert float(doms) == pytest.approx(1.0)
    assert float(ranks) == pytest.approx(2 * (1 - (2 / 4) * (1 / 3)))     # 5/3


def test_dedup_time_on_a_small_case_is_exact():
    t, h, b = 1000.0, 100.0, 2.0
    route = st.EpRoute(experts=8, dedup=True)
    net = t * h * b * (11 / 7) * (1 / 2)    # remote domains: D·(N−1)/N
    nvl = t * h * b * (13 / 7) * (1 / 2)    # rank copies forwarded: R·(k−1)/k
    lat = float(nccl.all_to_all_latency(4, 2, FAB.inter_latency_s, FAB.intra_latency_s, 1.0))
    assert lat == pytest.approx(nccl.BASE_LATENCY_S + nccl.NET_STEP_S + 2 * FAB.inter_latency_s)
    one = (lat
           + max(net / FAB.inter_bytes_per_s, nvl / (FAB.intra_bytes_per_s * nccl.AGRS_BUS_RATIO)))
    got = st.ep_time_per_layer(t, h, 2, 4, 1, 2, FAB, b, rounds=2.0, route=route)
    assert float(got) == pytest.approx(2 * 2 * one, rel=1e-12)
    fp8 = st.ep_time_per_layer(t, h, 2, 4, 1, 2, FAB, b, rounds=2.0,
                               route=route._replace(dispatch_bytes=1.0))
    assert float(fp8) == pytest.approx(2 * (one + lat + (one - lat) / 2), rel=1e-12)


def test_recompute_rounds_scale_the_time_and_ep_one_costs_nothing():
    route = st.EpRoute(experts=64, groups=8, group_topk=2, dedup=True)
    two = st.ep_time_per_layer(4096, 2048, 6, 32, 1, 8, FAB, 2.0, 2.0, route)
    three = st.ep_time_per_layer(4096, 2048, 6, 32, 1, 8, FAB, 2.0, 3.0, route)
    assert float(three) == pytest.approx(1.5 * float(two), rel=1e-12)
    assert float(st.ep_time_per_layer(4096, 2048, 6, 1, 1, 8, FAB, 2.0, 3.0, route)) == 0.0


@settings(max_examples=60, deadline=None)
@given(groups=hs.sampled_from([1, 2, 4, 8, 16]), per_group=hs.integers(1, 16),
       top_k=hs.integers(1, 8), ep_exp=hs.integers(0, 7), domain=hs.sampled_from([1, 2, 4, 8]),
       data=hs.data())
def test_limiting_the_groups_never_raises_the_time(groups, per_group, top_k, ep_exp, domain,
                                                   data):
    experts = groups * per_group * 2 ** ep_exp   # EP = 2**ep_exp divides the experts
    ep = 2 ** ep_exp
    top_k = min(top_k, experts)
    topk_group = data.draw(hs.integers(1, groups))
    free = st.EpRoute(experts=experts, dedup=True)
    limited = free._replace(groups=groups, group_topk=topk_group)
    d0, r0 = st.ep_reach(top_k, free, ep, domain)
    d1, r1 = st.ep_reach(top_k, limited, ep, domain)
    assert float(d1) <= float(d0) + 1e-9 and float(r1) <= float(r0) + 1e-9
    assert float(d0) <= top_k + 1e-9 and float(r0) <= top_k + 1e-9   # never above k copies
    t0 = st.ep_time_per_layer(512, 1024, top_k, ep, 1, domain, FAB, 2.0, 2.0, free)
    t1 = st.ep_time_per_layer(512, 1024, top_k, ep, 1, domain, FAB, 2.0, 2.0, limited)
    assert float(t1) <= float(t0) * (1 + 1e-12)


def test_the_reader_takes_deepseek_v3_node_limit_and_the_export_writes_it(tmp_path, dtplan):
    v3, lite = get_preset("deepseek-v3"), get_preset("deepseek-v2-lite")
    assert (v3.route_groups, v3.route_group_topk) == (8, 4)
    assert (lite.route_groups, lite.route_group_topk) == (0, 0)   # topk_method greedy
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: deepseek-v3\nhardware: h800\ngpus: 2048\nseq_len: 4096\nlayout:\n"
                    "  pp: 16\n  ep: 64\n  zero: 1\n  micro_batch: 1\n"
                    "  first_stage_layers: 4\n  last_stage_layers: 1\n"
                    "batch:\n  global_batch: 15360\n")
    out = dtplan("export", str(plan), "--to", "megatron", "--allow-failing")
    assert out.code == 0, out.err
    for flag in ("--moe-token-dispatcher-type flex", "--moe-enable-deepep",
                 "--moe-router-num-groups 8", "--moe-router-group-topk 4"):
        assert flag in out.out


def _ep(dtplan, *extra: str) -> float:
    r = dtplan(*DEEPSEEK_V3, *extra)
    assert r.code in (0, 1), r.err   # 1: selective recompute does not fit; priced all the same
    return float(json.loads(r.out)["communication_s"]["ep"])


def test_fp8_dispatch_and_the_dispatcher_are_profile_keys(dtplan, tmp_path):
    base = _ep(dtplan, "--recompute", "full")
    text = (ROOT / "framework_profiles" / "megatron.toml").read_text()
    assert "ep_fp8_dispatch = false" in text
    prof = tmp_path / "megatron-fp8-dispatch.toml"
    prof.write_text(text.replace("ep_fp8_dispatch = false", "ep_fp8_dispatch = true"))
    fp8 = _ep(dtplan, "--recompute", "full", "--framework", str(prof))
    assert 0.7 * base < fp8 < 0.8 * base   # (1.03 + 2) / 4 of the bytes, the latency kept
    alltoall = tmp_path / "megatron-alltoall.toml"
    alltoall.write_text(text.replace('ep_dispatcher = "deepep"', 'ep_dispatcher = "alltoall"'))
    assert _ep(dtplan, "--recompute", "full", "--framework", str(alltoall)) > 1.5 * base


def test_the_megatron_reader_takes_the_node_limit():
    from planner.framework_configs.megatron_args import _megatron_model, parse_megatron_args
    base = ("pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
            "--ffn-hidden-size 8192 --num-experts 64 --moe-router-topk 6 --seq-length 4096")
    plain = _megatron_model(parse_megatron_args(base, "a.sh"), "a.sh")
    limited = _megatron_model(parse_megatron_args(
        base + " --moe-router-num-groups 8 --moe-router-group-topk 2", "b.sh"), "b.sh")
    assert plain is not None and limited is not None
    assert "route_groups" not in plain
    assert (limited["route_groups"], limited["route_group_topk"]) == (8, 2)


def test_the_estimate_says_how_the_all_to_all_is_priced(dtplan):
    r = dtplan(*DEEPSEEK_V3, "--recompute", "full")
    note = next(n for n in json.loads(r.out)["notes"] if n.startswith("EP 64"))
    d = float(st.ep_reach(8, st.EpRoute(256, 8, 4, True), 64, 8)[0])
    assert f"{d * 7 / 8:.2f} NIC copies" in note and "(per-expert sending: 7.00)" in note
    assert "limited to 4 of 8 expert groups" in note and "+2 per layer" in note
