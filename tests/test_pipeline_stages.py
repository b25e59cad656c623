"""Uneven pipeline stages (issue 27): first/last stage layers as knobs with Megatron-Core's rules
(core_v0.15.3 transformer_config.py:1083-1135), the embedding, the output layer, the loss and
the MTP modules in stage balance, the Megatron flags both ways, and the published layouts of
DeepSeek-V3 and Qwen3-235B-A22B admitted through `dtplan`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.engine.stages import layers_split_valid, stage_deficit, stage_layers, uneven_splits
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.evaluation.rules import RULE_NAMES
from planner.search.fast import SearchSpace, search
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset


def megatron_accepts(layers: int, pp: int, v: int, first: int | None, last: int | None) -> bool:
    """TransformerConfig.__post_init__'s uneven-PP checks, line by line (core_v0.15.3
    transformer_config.py:1083-1135; v = 1 is its None), plus dtplan's: PP > 1 and a layer in
    every chunk of the other stages."""
    stages, n = pp, layers
    for stated in (first, last):
        if stated is not None:
            if stated <= 0 or (v > 1 and stated % v):
                return False
            n -= stated
            stages -= 1
    if stages and n % stages:
        return False
    if stages and v > 1 and (n // stages) % v:
        return False
    return pp > 1 and (n // stages >= v if stages else n == 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 130), st.integers(2, 32), st.integers(1, 6),
       st.none() | st.integers(1, 20), st.none() | st.integers(1, 20))
def test_stated_stages_follow_megatron_and_cover_every_layer(layers, pp, v, first, last):
    if first is None and last is None:
        return
    ok = bool(layers_split_valid(layers, pp, v, first or 0, last or 0))
    assert ok == megatron_accepts(layers, pp, v, first, last)
    if ok:
        f, mid, l_ = (float(x) for x in stage_layers(layers, pp, v, first or 0, last or 0))
        assert f + l_ + (pp - 2) * mid == layers or (pp == 2 and f + l_ == layers)
        assert (first is None or f == first) and (last is None or l_ == last)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 200), st.integers(2, 32), st.integers(1, 6))
def test_every_offered_split_is_valid_and_new(layers, pp, v):
    default = [float(x) for x in stage_layers(layers, pp, v)]
    default_valid = layers_split_valid(layers, pp, v)
    for f, l_ in uneven_splits(layers, pp, v):
        assert layers_split_valid(layers, pp, v, f, l_), (f, l_)
        assert not default_valid or v > 1 or \
            [float(x) for x in stage_layers(layers, pp, v, f, l_)] != default
    assert uneven_splits(layers, pp, v) == [] or layers % (pp * v)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 130), st.integers(2, 32), st.integers(1, 6),
       st.none() | st.integers(1, 20), st.none() | st.integers(1, 20))
def test_a_layout_string_frees_the_stated_stages_of_v_and_nothing_else(layers, pp, v, first,
                                                                       last):
    """With a layout string (free_chunks) a stated stage needs a layer per chunk, not a multiple
    of v: every split the flags accept stays accepted, and the rest only through the edges."""
    if first is None and last is None:
        return
    f, l_ = first or 0, last or 0
    strict = bool(layers_split_valid(layers, pp, v, f, l_))
    free = bool(layers_split_valid(layers, pp, v, f, l_, free_chunks=True))
    assert free >= strict
    if free:
        assert (f == 0 or f >= v) and (l_ == 0 or l_ >= v)
        rest = layers - f - l_
        others = pp - (f > 0) - (l_ > 0)
        assert others == 0 or (rest % others == 0 and (rest // others) % v == 0)


def test_mlperf_deepseek_v3_layout_string_is_accepted_with_it_only():
    # MLPerf v6.0 "Et*4|(t*4|)*14tmL" on PP 4 x v 4: 16 layers on the first stage, 13 on the last
    assert not layers_split_valid(61, 4, 4, 16, 13)
    assert layers_split_valid(61, 4, 4, 16, 13, free_chunks=True)
    assert layers_split_valid(61, 4, 4, 4, 9, free_chunks=True)
    assert not layers_split_valid(61, 4, 4, 2, 11, free_chunks=True)   # a chunk left empty


def test_deepseek_v3_split_as_megatron_users_run_it():
    # Megatron-MoE-ModelZoo runtime.conf: DeepSeek-V3, PP 16, PP_FIRST 4, PP_LAST 1
    assert (4, 1) in uneven_splits(61, 16)
    assert [float(x) for x in stage_layers(61, 16, 1, 4, 1)] == [4.0, 4.0, 1.0]
    assert not layers_split_valid(61, 16)            # 3 layers short: no even split
    assert not layers_split_valid(61, 16, 1, 4, 2)   # 55 layers over 14 stages


def _job(model: str, gpus: int, **layout):
    p = problem(get_preset(model), load_profile(layout.pop("hardware", "h100")), gpus,
                seq_len=4096, global_batch=layout.pop("global_batch", 1024),
                precision=layout.pop("precision", "mixed"))
    lay = Layout(**layout)
    return p.resolved(), evaluate(p.resolved(), Candidates.from_layouts([lay]))


def test_the_stage_with_the_most_work_sets_the_time():
    # Llama 3 8B: the output layer (128K vocabulary × 4096) is ~2.4 layers of work, so on PP 4
    # the even 8/8/8/8 split is paced by its last stage; 9/8/8/7 moves a layer off it.
    common = dict(tp=1, pp=4, dp=2, micro_batch=1, zero=1, recompute="full")
    _, even = _job("llama3-8b", 8, **common)
    _, light_last = _job("llama3-8b", 8, first_stage_layers=9, last_stage_layers=7, **common)
    _, heavy_last = _job("llama3-8b", 8, first_stage_layers=7, last_stage_layers=9, **common)
    assert light_last.time.step[0] < even.time.step[0] < heavy_last.time.step[0]
    # paced by the last stage: 9 layers + head against 8 layers + head, one layer apart
    m = even.micro_batches[0]
    layer = (heavy_last.time.compute[0] - even.time.compute[0]) / m
    # the light-last split is paced by its first stage: 9 layers and the embedding lookup, a
    # small memory-bound share
    embed = light_last.time.compute[0] / m - 9 * layer
    assert 0 < embed < 0.01 * layer


def test_a_heavy_first_stage_paces_by_its_embedding_too():
    # Llama 3.1 405B, 126 layers on PP 16: 8/8/.../6 is paced by the first stage, 8 layers and
    # the embedding: a hair slower than dtplan's 7/8/.../8/7, paced by a middle stage.
    common = dict(tp=8, pp=16, dp=8, micro_batch=1, zero=1, recompute="full")
    _, even = _job("llama3.1-405b", 1024, **common)
    _, first8 = _job("llama3.1-405b", 1024, first_stage_layers=8, last_stage_layers=6,
                     **common)
    assert 0 < first8.time.compute[0] - even.time.compute[0] < 1e-2 * even.time.compute[0]


def test_mtp_modules_and_their_embedding_sit_on_the_last_stage():
    ds = get_preset("deepseek-v3")
    lay = dict(tp=1, pp=16, dp=128, ep=64, zero=1, micro_batch=1, first_stage_layers=4,
               last_stage_layers=1, recompute="full", hardware="h800")
    _, ev = _job("deepseek-v3", 2048, **lay)
    assert ds.mtp_layers == 1
    first, last = ev.memory.first.params[0], ev.memory.last.params[0]
    # last: 1 layer, the MTP block (attention, shared and routed experts over EP 64, router,
    # projection h×2h, three norms), the output layer + final norm and a copy of the embedding
    h, v, routed = ds.hidden, 129280, ds.experts * ds.expert_mlp_params()
    mtp = ds.moe_layer_params() - routed + 2 * h * h + 3 * h + routed / 64
    # a stage's layers are the model's mean layer (58 of 61 MoE): dense part whole, experts / EP
    share = ds.moe_layers / ds.layers
    mean_layer = (1 - share) * ds.layer_params() + share * (ds.moe_layer_params() - routed) \
        + share * routed / 64
    assert last == pytest.approx(mean_layer + mtp + 2 * v * h + h, rel=1e-9)
    assert first > last / 2   # 4 layers (3 dense) and the embedding


# ---- Must show 2 through `dtplan` ----------------------------------------------------------
# DeepSeek-V3 (report Sec. 3.2-3.3: 2,048 H800, no TP, PP 16, EP 64 over 8 nodes, ZeRO-1, FP8,
# sequences of 4,096, batch ramped to 15,360, the DualPipe schedule of Sec. 3.2.1), its 61
# layers split 4 + 14 × 4 + 1 as Megatron runs it (Megatron-MoE-ModelZoo runtime.conf PP_FIRST 4
# / PP_LAST 1); full recompute stands in for the report's recomputed norms and MLA
# up-projections with FP8-cached activations, which dtplan does not model.
DEEPSEEK_V3 = ("--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--pp", "16",
               "--ep", "64", "--zero", "1", "--schedule", "dualpipe", "--first-stage-layers", "4",
               "--last-stage-layers", "1", "--seq-len", "4096", "--global-batch", "15360",
               "--precision", "fp8", "--recompute", "full")
# Qwen3-235B-A22B as Megatron-MoE-ModelZoo runs it on 32 H100 nodes (runtime.conf and
# model_configs/benchmarking/Qwen3-235B-A22B.yaml): TP 2, PP 8 × VPP 4, EP 32 folded over
# TP × DP with expert TP 1, the distributed optimizer, 94 layers with the embedding and the
# loss counted as layers (96 over 32 chunks), sequences of 4,096, batch 2,048, selective
# recompute.
QWEN3_235B = ("--model", "qwen3-235b-a22b", "--hardware", "h100", "--gpus", "256", "--tp", "2",
              "--pp", "8", "--schedule", "interleaved", "--chunks", "4", "--ep", "32",
              "--etp", "1", "--zero", "1", "--seq-len", "4096", "--global-batch", "2048",
              "--recompute", "selective")


@pytest.mark.parametrize("args", [DEEPSEEK_V3, QWEN3_235B], ids=["deepseek-v3", "qwen3-235b"])
def test_published_moe_layouts_are_admitted(dtplan, args):
    r = dtplan("estimate", *args, "--format", "json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["fits"] and [x["name"] for x in out["rules"] if x["status"] != "pass"] == []


def test_deepseek_v3_without_the_stated_split_names_the_layer_rule(dtplan):
    args = [a for a in DEEPSEEK_V3]
    for flag in ("--first-stage-layers", "--last-stage-layers"):
        i = args.index(flag)
        del args[i:i + 2]
    r = dtplan("estimate", *args, "--format", "json")
    assert r.code == 1
    failed = [x["name"] for x in r.json()["rules"] if x["status"] == "fail"]
    assert failed[0] == "layers-divisible-by-pp"


QWEN3_ARGS = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 32 pretrain_gpt.py \\
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 \\
  --num-layers-per-virtual-pipeline-stage 3 --expert-model-parallel-size 32 \\
  --expert-tensor-parallel-size 1 --use-distributed-optimizer --sequence-parallel \\
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split \\
  --micro-batch-size 1 --global-batch-size 2048 --seq-length 4096 --bf16 \\
  --recompute-granularity selective
"""


def test_megatron_reads_the_published_qwen3_flags(dtplan, tmp_path):
    script = tmp_path / "qwen3.sh"
    script.write_text(QWEN3_ARGS)
    r = dtplan("check", script, "--engine", "megatron", "--hardware", "h100",
               "--model", "qwen3-235b-a22b", "-f", "json")
    assert r.code == 0, r.out + r.err
    f = r.json()["files"][0]
    assert [x["name"] for x in f["rules"] if x["status"] == "fail"] == []


def test_megatron_writes_and_reads_the_stated_stages(dtplan, tmp_path):
    plan = tmp_path / "ds.yaml"
    plan.write_text("name: ds\nmodel: llama3-8b\nhardware: h100\ngpus: 8\nseq_len: 4096\n"
                    "layout: {tp: 1, pp: 4, zero: 1, micro_batch: 1, first_stage_layers: 9, "
                    "last_stage_layers: 7, recompute: full}\nbatch: {global_batch: 64}\n")
    direct = dtplan("check", plan, "-f", "json")
    assert direct.code == 0, direct.err
    out = tmp_path / "launch.sh"
    assert dtplan("export", plan, "--to", "megatron", "-o", out).code == 0
    text = out.read_text()
    assert "--decoder-first-pipeline-num-layers 9" in text
    assert "--decoder-last-pipeline-num-layers 7" in text
    back = dtplan("check", out, "--engine", "megatron", "--hardware", "h100", "-f", "json")
    assert back.code == 0, back.err
    assert back.json()["files"][0]["summary"]["step_time_s"] == pytest.approx(
        direct.json()["files"][0]["summary"]["step_time_s"], rel=1e-9)


def test_megatron_refuses_stated_stages_beside_layers_per_virtual_stage(dtplan, tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text(QWEN3_ARGS.replace("--recompute-granularity selective",
                                         "--decoder-first-pipeline-num-layers 12"))
    r = dtplan("check", script, "--engine", "megatron", "--hardware", "h100",
               "--model", "qwen3-235b-a22b", "-f", "json")
    assert r.code == 1
    failed = [x["name"] for x in r.json()["files"][0]["rules"] if x["status"] == "fail"]
    assert "megatron-uneven-vpp" in failed and "megatron-uneven-account" in failed


def _published(model: str, hardware: str, gpus: int, batch: int, precision: str, lay: Layout):
    p = problem(get_preset(model), load_profile(hardware), gpus, seq_len=4096,
                global_batch=batch, precision=precision).resolved()
    ev = evaluate(p, Candidates.from_layouts([lay]))
    assert ev.rules.valid[0]
    return p, float(ev.time.step[0])


@pytest.mark.parametrize("case", ["deepseek-v3", "qwen3-235b"])
def test_the_search_finds_layouts_at_least_as_fast_as_the_published_ones(case):
    if case == "deepseek-v3":
        p, published = _published("deepseek-v3", "h800", 2048, 15360, "fp8", Layout(
            tp=1, pp=16, dp=128, ep=64, zero=1, micro_batch=1, schedule="dualpipe",
            first_stage_layers=4, last_stage_layers=1, recompute="full", precision="fp8"))
    else:
        p, published = _published("qwen3-235b-a22b", "h100", 256, 2048, "mixed", Layout(
            tp=2, pp=8, dp=16, ep=32, etp=1, zero=1, micro_batch=1, schedule="interleaved",
            chunks=4, recompute="selective"))
    res = search(p)
    best = res.order[0]
    assert res.results.time.step[best] <= published
    # 61 and 94 layers divide by no PP > 1 the winners use: the split is a stated one
    lay = res.candidates.layout(int(best), p.precision, p.optimizer)
    if lay.pp > 1 and p.model.layers % (lay.pp * lay.chunks):
        assert lay.first_stage_layers or lay.last_stage_layers or \
            stage_deficit(p.model.layers, lay.pp, lay.chunks) <= 2


def test_the_search_folds_ep_over_tp_with_expert_tp_one():
    # Qwen3-235B-A22B's published grid: EP 32 over TP 2 × DP 16 with whole experts (ETP 1);
    # with ETP = TP the expert grid 2 × 32 does not divide TP·CP·DP = 32 (counted, rejected)
    p = problem(get_preset("qwen3-235b-a22b"), load_profile("h100"), 256, seq_len=4096,
                global_batch=2048).resolved()
    res = search(p, SearchSpace(tp=2, pp=8, ep=32, schedule="interleaved", chunks=4),
                 dominated=True)
    c = res.candidates
    shown = [int(i) for i in res.order]
    assert shown and {int(c.etp[i]) for i in shown} == {1}
    assert res.rejected[RULE_NAMES.index("expert-grid-folds")] > 0
    assert res.enumerated == 2 * (res.enumerated // 2)   # ETP TP and 1, row for row
