"""Megatron-Core's MoE parallel folding: the expert grid ETP × EP × expert-DP × PP over the same
GPUs as the attention grid TP × CP × DP × PP (megatron/core/parallel_state.py:743-751,
core_v0.15.3): EP may span TP, CP and DP ranks; the rule is world % (ETP·EP·PP) == 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.api import problem
from planner.engine import step_time as st
from planner.engine.params import mlp_params
from planner.engine.topology import fabric
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset
from conftest import run_dtplan

H100 = load_profile("h100")
MIXTRAL = ("--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--zero", "1")


def _rules(*argv: str) -> dict[str, str]:
    r = run_dtplan("estimate", *MIXTRAL, *argv, "-f", "json")
    assert r.code in (0, 1), r.err
    return {x["name"]: x["status"] for x in json.loads(r.out)["rules"]}


def test_ep_spans_tp_and_dp_ranks():
    # 16 GPUs, TP 4, DP 4, EP 8 with expert TP 1: EP does not divide DP (the rule Megatron-Core
    # does not have) but ETP·EP = 8 divides TP·CP·DP = 16: expert-DP 2
    rules = _rules("--gpus", "16", "--tp", "4", "--ep", "8", "--etp", "1")
    assert rules["expert-grid-folds"] == "pass"
    assert rules["experts-divisible-by-ep"] == "pass"


def test_expert_grid_that_does_not_fold_fails():
    # ETP defaults to TP: 4 × 8 = 32 GPUs of expert grid on a 16-GPU stage
    rules = _rules("--gpus", "16", "--tp", "4", "--ep", "8")
    assert rules["expert-grid-folds"] == "fail"
    # and with ETP = TP the folding rule is the old one: EP divides DP·CP
    assert _rules("--gpus", "32", "--tp", "4", "--ep", "8")["expert-grid-folds"] == "pass"


def _eval(gpus: int, **knobs: int):
    p = problem(get_preset("mixtral-8x7b"), H100, gpus, seq_len=4096, global_batch=256)
    lay = Layout(micro_batch=1, **knobs)
    return p, evaluate(p, Candidates.from_layouts([lay]))


def test_expert_states_shard_over_expert_dp():
    # ZeRO-1: the experts' fp32 master weights and Adam moments (12 B/param) shard over
    # expert-DP = TP·DP / (ETP·EP), the rest of the model over DP
    mod = get_preset("mixtral-8x7b")
    experts = mod.moe_layers * mod.experts * mlp_params(mod.hidden, mod.expert_width, mod.gated,
                                                         mod.linear_bias)
    _, a = _eval(16, tp=4, dp=4, ep=8, etp=1, zero=1)   # experts whole, 1/8 each; expert-DP 2
    _, b = _eval(16, tp=4, dp=4, ep=4, zero=1)          # ETP 4 × EP 4: 1/16 each; expert-DP 1
    opt_a, opt_b = float(a.memory.first.optimizer[0]), float(b.memory.first.optimizer[0])
    dense = opt_b - 12.0 * experts / 16
    assert opt_a - dense == pytest.approx(12.0 * experts / 8 / 2, rel=1e-9)


def test_hybrid_sharding_shards_the_experts_over_their_share_of_the_group():
    # 64 GPUs, TP 1, DP 64, EP 8, ZeRO-1 in shard groups of 16 (4 distributed-optimizer
    # instances): expert-DP 8 splits into 4 instances too (Megatron-Core parallel_state.py
    # :1447-1452; torchtitan's efsdp = dp_shard·cp·tp / ep = 16 / 8), so the experts' 12 B/param
    # divide by 2, not by min(16, 8) = 8 as before
    mod = get_preset("mixtral-8x7b")
    experts = mod.moe_layers * mod.experts * mlp_params(mod.hidden, mod.expert_width, mod.gated,
                                                         mod.linear_bias) / 8
    _, e = _eval(64, tp=1, dp=64, ep=8, zero=1, shard_group=16)
    dense = float(e.memory.first.params[0]) - experts   # this GPU's parameters but the experts
    assert float(e.memory.first.optimizer[0]) == pytest.approx(
        12.0 * dense / 16 + 12.0 * experts / 2, rel=1e-9)


def test_expert_gradients_reduce_over_expert_dp_only():
    # TP 1, DP 8, EP 8 on one node, ZeRO-0: expert-DP = 1, so only the dense gradients cross
    # the DP all-reduce; the experts' (1/8 of them per GPU) reduce over nobody
    p, e = _eval(8, tp=1, dp=8, ep=8, zero=0)
    mod = p.model
    experts = mod.moe_layers * mod.experts * mlp_params(mod.hidden, mod.expert_width, mod.gated,
                                                         mod.linear_bias) / 8
    dense = float(e.memory.first.params[0]) - experts
    red, _ = st.dp_reduction_times(dense * p.fw.time.reduce_bytes, 0.0, False, 8, 1,
                                   H100.scale_up.gpus_per_domain, fabric(H100, 8))
    assert float(e.time.dp_total[0]) == pytest.approx(float(np.asarray(red)), rel=1e-9)


def test_megatron_reader_and_writer_carry_expert_tp(tmp_path):
    script = tmp_path / "moe.sh"
    script.write_text(
        "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --num-layers 32 "
        "--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --num-experts 8 --moe-router-topk 2 "
        "--swiglu --position-embedding-type rope --normalization RMSNorm --disable-bias-linear "
        "--untie-embeddings-and-output-weights --seq-length 4096 --micro-batch-size 1 "
        "--global-batch-size 64 --bf16 --vocab-size 32000 --use-distributed-optimizer "
        "--sequence-parallel\n")
    r = run_dtplan("check", str(script), "--hardware", "h100-sxm", "-f", "json")
    assert r.code in (0, 1), r.err
    rules = {x["name"]: x for x in json.loads(r.out)["files"][0]["rules"]}
    assert rules["megatron-expert-grid"]["status"] == "pass"
    assert rules["expert-grid-folds"]["status"] == "pass"
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: mixtral-8x7b\nhardware: h100\ngpus: 16\nseq_len: 4096\nlayout:\n"
                    "  tp: 4\n  ep: 8\n  etp: 1\n  zero: 1\n  micro_batch: 1\n"
                    "batch:\n  global_batch: 64\n")
    out = run_dtplan("export", str(plan), "--to", "megatron", "--allow-failing")
    assert out.code == 0, out.err
    assert "--expert-tensor-parallel-size 1" in out.out
