"""The space prices and offers only what each framework does (issue #15): pipeline schedules
from the profile's list, ZeRO beside PP where the framework allows it, torchtitan's ZeRO-3
under PP gathered and reduced once per step, selective recompute where it is a knob."""

from __future__ import annotations

import numpy as np
import pytest

from planner.api import problem
from planner.evaluation.candidates import RECOMPUTE_CODES, SCHEDULE_CODES, Candidates
from planner.evaluation.evaluate import evaluate
from planner.evaluation.rules import config_keys
from planner.search.fast import SearchSpace, search
from planner.search.space import recomputes
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from dataclasses import replace
from planner.specs.presets import get_preset

H100 = load_profile("h100")
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "fsdp")
CODE_NAME = {code: name for name, code in SCHEDULE_CODES.items()}


def _problem(framework: str, model: str = "llama3-70b", gpus: int = 256, seq: int = 4096,
             batch: int = 1024):
    p = problem(get_preset(model), H100, gpus, seq_len=seq, global_batch=batch)
    return replace(p, framework=load_framework(framework))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def every(request):
    return request.param, search(_problem(request.param, gpus=64), dominated=True)


def test_the_space_offers_only_the_schedules_the_framework_runs(every):
    name, res = every
    c = res.candidates.take(res.order)
    runs = set(load_framework(name).time.pipeline_schedules)
    piped = {CODE_NAME[int(s)] for s in np.unique(c.schedule[c.pp > 1])}
    assert piped <= runs, f"{name} offered {piped - runs}"
    if not runs:   # fsdp: no pipeline parallel at all
        assert (c.pp == 1).all()
    else:
        assert (c.pp > 1).any()


def test_zero_beside_pipeline_parallel_only_where_the_framework_runs_it(every):
    name, res = every
    c = res.candidates.take(res.order)
    cap = load_framework(name).time.max_zero_under_pp
    assert not np.any((c.pp > 1) & (c.zero > cap))
    if name == "deepspeed":
        assert cap == 1 and np.any(c.pp > 1) and np.any(c.zero >= 2)


def test_deepspeed_zero3_with_pp_fails_a_rule_keyed_to_its_config(dtplan):
    r = dtplan("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
               "--zero", "3", "--framework", "deepspeed", "-f", "json")
    rules = {x["name"]: x["status"] for x in r.json()["rules"]}
    assert rules["zero-with-pp"] == "fail"
    ok = dtplan("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
                "--zero", "3", "--framework", "torchtitan", "-f", "json")
    assert {x["name"]: x["status"] for x in ok.json()["rules"]}["zero-with-pp"] == "pass"
    assert config_keys("deepspeed", Layout(pp=2, zero=3))["zero-with-pp"] == \
        "zero_optimization.stage"


# The default winner of `fit` exports to its framework's engine (fsdp writes Accelerate).
ENGINE = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed",
          "fsdp": "accelerate"}
FITS = {"megatron": [("llama3-70b", 256), ("mixtral-8x7b", 64), ("llama3.1-405b", 1024)],
        "torchtitan": [("llama3-70b", 256), ("llama3-8b", 8), ("llama3.1-405b", 1024)],
        "deepspeed": [("llama3-70b", 64), ("llama3-70b", 256), ("mixtral-8x7b", 64)],
        "fsdp": [("llama3-70b", 256), ("llama3-8b", 8), ("mixtral-8x7b", 64)]}


@pytest.mark.parametrize("framework,model,gpus",
                         [(fw, m, g) for fw, cases in FITS.items() for m, g in cases])
def test_the_default_winner_exports_to_its_framework(dtplan, tmp_path, framework, model, gpus):
    out = tmp_path / "job.out"
    r = dtplan("export", "--model", model, "--gpus", gpus, "--framework", framework,
               "--to", ENGINE[framework], "-o", out)
    assert r.code == 0, r.err
    assert out.stat().st_size > 0


def _zero3(framework: str, mb: int) -> dict:
    p = _problem(framework)
    lay = Layout(tp=2, pp=4, dp=32, zero=3, micro_batch=mb, recompute="full")
    ev = evaluate(p, Candidates.from_layouts([lay]))
    return {"total": float(ev.time.zero3_total[0]), "exposed": float(ev.time.zero3_exposed[0]),
            "m": 1024 / (mb * 32)}


def test_torchtitan_gathers_and_reduces_a_pipelined_zero3_stage_once_per_step():
    # torchtitan fsdp.py: reshard_after_forward = not pp_enabled; torch pipelining's
    # backward_maybe_with_nosync: no reshard, no gradient sync until the last micro-batch.
    titan = [_zero3("torchtitan", mb) for mb in (1, 2, 4)]
    assert titan[0]["total"] > 0
    assert titan[0]["total"] == pytest.approx(titan[1]["total"], rel=1e-9)
    assert titan[0]["total"] == pytest.approx(titan[2]["total"], rel=1e-9)
    assert all(0 < t["exposed"] <= t["total"] for t in titan)
    # Megatron-FSDP reduces every backward (grad_reduce_every_bprop): per micro-batch
    mega = [_zero3("megatron", mb) for mb in (1, 2, 4)]
    assert mega[0]["total"] == pytest.approx(2 * mega[1]["total"], rel=1e-9)
    assert mega[0]["total"] == pytest.approx(4 * mega[2]["total"], rel=1e-9)
    assert load_framework("torchtitan").shards_once_per_step_under_pp()
    assert not any(load_framework(f).shards_once_per_step_under_pp()
                   for f in ("megatron", "deepspeed", "fsdp"))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_selective_recompute_is_searched_exactly_where_it_changes_the_cost(framework):
    # Flash attention on (Llama). Megatron's selective checkpoints the core attention
    # (attention.py checkpoint_core_attention → _checkpointed_attention_forward): the flash
    # forward runs again in backward and its fp32 log-sum-exp is not kept; torchtitan's op list
    # re-runs half the matmuls. DeepSpeed and FSDP trainers have no selective mode.
    p = _problem(framework)
    assert p.flash
    offered = RECOMPUTE_CODES["selective"] in recomputes(p, SearchSpace())[:, 0]
    lays = [Layout(tp=2, pp=4, dp=32, zero=1, micro_batch=1, recompute=r)
            for r in ("none", "selective")]
    ev = evaluate(p, Candidates.from_layouts(lays))
    step, peak = ev.time.step, ev.memory.peak
    if load_framework(framework).time.selective_recompute == "none":
        assert not offered
    else:
        assert offered
        assert step[1] > step[0] and peak[1] < peak[0]


def test_cp_and_ep_only_where_the_framework_runs_them():
    # DeepSpeed's sequence parallelism is Ulysses, not ring CP; FSDP trainers have no EP axis.
    ds = search(_problem("deepspeed", "llama3-8b", 64, 131072, 16), dominated=True)
    assert ds.valid and (ds.candidates.cp[ds.order] == 1).all()
    titan = search(_problem("torchtitan", "llama3-8b", 64, 131072, 16), dominated=True)
    assert (titan.candidates.cp[titan.order] > 1).any()
    moe = search(_problem("fsdp", "mixtral-8x7b", 64, 4096, 512), dominated=True)
    assert moe.valid and (moe.candidates.ep[moe.order] == 1).all()
    assert (moe.candidates.pp[moe.order] == 1).all()


def test_deepspeed_at_128k_exports_its_winner(dtplan, tmp_path):
    r = dtplan("export", "--model", "llama3-8b", "--gpus", "64", "--seq-len", "128k",
               "--global-batch", "16", "--framework", "deepspeed", "--to", "deepspeed",
               "-o", tmp_path / "ds.json")
    assert r.code == 0, r.err


def test_megatron_runs_hybrid_sharding_and_check_reads_it_back(dtplan, tmp_path):
    # core/parallel_state.py: --num-distributed-optimizer-instances N shards over DP·CP / N
    # ranks (Megatron-FSDP's HSDP on the same flag, mcore_fsdp_adapter.py enable_hsdp).
    # A plan fixes the hybrid layout: fit's 512-GPU winner is no longer hybrid-sharded since
    # the replicas' all-reduce is priced and the #1 must leave the headroom rule free (#26).
    plan = tmp_path / "hybrid.yaml"
    plan.write_text("name: hybrid\nmodel: llama3-70b\nhardware: h100\ngpus: 512\n"
                    "seq_len: 8192\nlayout: {tp: 8, pp: 4, cp: 1, dp: 16, zero: 1, "
                    "shard_group: 8, micro_batch: 1, recompute: none}\n"
                    "batch: {global_batch: 512}\n")
    direct = dtplan("check", plan, "-f", "json")
    assert direct.code == 0, direct.err
    out = tmp_path / "launch.sh"
    assert dtplan("export", plan, "--to", "megatron", "-o", out).code == 0
    assert f"--num-distributed-optimizer-instances {16 // 8}" in out.read_text()
    back = dtplan("check", out, "--engine", "megatron", "--hardware", "h100", "-f", "json")
    assert back.code == 0, back.err
    assert back.json()["files"][0]["summary"]["step_time_s"] == pytest.approx(
        direct.json()["files"][0]["summary"]["step_time_s"], rel=1e-9)
