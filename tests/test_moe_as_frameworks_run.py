"""Mixtures of experts laid out as each framework runs them.

Sequence parallel: Megatron-Core runs an MoE under TP only with it (MoELayer.forward raises in
training where attention TP > 1 and sequence_parallel is off: NVIDIA/Megatron-LM d98e8a64
megatron/core/transformer/moe/moe_layer.py:636-640); the profile states it
(moe_needs_sequence_parallel), the search offers no other MoE layout under TP, and a layout or a
Megatron script given so fails sequence-parallel-with-moe. Expert TP: torchtitan has none
(b5bcd76c models/common/moe_sharding.py: routed experts take TP's sharding without EP and are
whole under EP, which borrows the TP ranks); the profile states it (expert_tensor_parallel), the
search offers ETP = TP without EP and 1 under it there, and expert-grid-folds fails another.
EP ranks: torchtitan borrows them from the FSDP shard group and TP alone (configs.py:282-290),
so EP divides that there (ep-ranks); DeepSpeed's two groupings (expert TP on: EP within DP;
off: within a stage's TP·DP ranks, deepspeed/utils/groups.py:568, :351) are the expert grid's
rule, ETP·EP dividing TP·DP. ZeRO-3: DeepSpeed shards an MoE so only through AutoEP, which
has no AutoTP (edaa7221 runtime/engine.py:1872-1916), so TP is 1 there (moe-zero3-tp). Dense
models and frameworks that do not state these keep every choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.api import problem
from planner.evaluation.rules import RULE_NAMES
from planner.search.fast import SearchSpace, search
from planner.search import reference
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.presets import get_preset

H100 = load_profile("h100")
SMALL = SearchSpace(pp=1, micro_batch=1, recompute="none")


def _problem(preset: str, framework: str):
    return problem(get_preset(preset), H100, 16, seq_len=4096, global_batch=64,
                   framework=load_framework(framework))


def _valid(preset: str, framework: str):
    """Every valid layout the search keeps (--all)."""
    res = search(_problem(preset, framework), SMALL, dominated=True)
    return res.candidates.take(res.order)


def _sp_under_tp(preset: str, framework: str) -> set[int]:
    """The SP values of every valid layout with TP > 1."""
    c = _valid(preset, framework)
    return set(np.unique(c.sp[c.tp > 1]).tolist())


def _expert_tp(preset: str, framework: str, ep_on: bool) -> set[str]:
    """Which expert TP the valid layouts with TP > 1 run, with EP (or without): "TP", "1"."""
    c = _valid(preset, framework)
    at = (c.tp > 1) & ((c.ep > 1) == ep_on)
    assert at.any()
    etp = np.where(c.etp[at] > 0, c.etp[at], c.tp[at])
    return {"TP" if e == t else str(e) for e, t in zip(etp, c.tp[at])}


def test_the_search_offers_the_expert_tp_the_framework_runs():
    assert _expert_tp("mixtral-8x7b", "torchtitan", ep_on=True) == {"1"}
    assert _expert_tp("mixtral-8x7b", "torchtitan", ep_on=False) == {"TP"}
    assert _expert_tp("mixtral-8x7b", "megatron", ep_on=True) == {"TP", "1"}


def test_the_profiles_state_what_they_run():
    assert load_framework("megatron").time.moe_needs_sequence_parallel
    assert not load_framework("torchtitan").time.expert_tensor_parallel
    assert load_framework("torchtitan").time.ep_ranks == "shard-group-tp"
    for name in ("torchtitan", "deepspeed", "fsdp", "torchtune"):
        assert not load_framework(name).time.moe_needs_sequence_parallel, name
    for name in ("megatron", "deepspeed", "fsdp", "torchtune"):
        assert load_framework(name).time.expert_tensor_parallel, name
    for name in ("megatron", "deepspeed", "fsdp", "torchtune"):
        assert load_framework(name).time.ep_ranks == "expert-grid", name
    assert load_framework("deepspeed").time.moe_zero3_needs_tp1
    for name in ("megatron", "torchtitan", "fsdp", "torchtune"):
        assert not load_framework(name).time.moe_zero3_needs_tp1, name


def test_the_search_offers_moe_under_tp_with_sp_only_on_megatron():
    assert _sp_under_tp("mixtral-8x7b", "megatron") == {1}
    assert _sp_under_tp("mixtral-8x7b", "torchtitan") == {0, 1}
    assert _sp_under_tp("llama3-8b", "megatron") == {0, 1}   # a dense model keeps both


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_the_fast_search_counts_what_the_reference_counts(framework):
    p = _problem("mixtral-8x7b", framework)
    fast, ref = search(p, SMALL), reference.search(p, SMALL)
    assert (fast.enumerated, fast.valid) == (ref.enumerated, ref.valid)


def _rules(dtplan, *argv: str) -> dict[str, str]:
    return {k: v[0] for k, v in _detail(dtplan, *argv).items()}


def _detail(dtplan, *argv: str) -> dict[str, tuple[str, str]]:
    """Each rule's (status, limit) in `estimate -f json`."""
    r = dtplan("estimate", "--gpus", "16", "--hardware", "h100", "--tp", "2",
               "--micro-batch", "1", "--global-batch", "64", "-f", "json", *argv)
    assert r.code in (0, 1), r.err
    return {x["name"]: (x["status"], x["limit"]) for x in json.loads(r.out)["rules"]}


def test_estimate_fails_moe_under_tp_without_sp_on_megatron(dtplan):
    rule = "sequence-parallel-with-moe"
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--no-sp")[rule] == "fail"
    assert _rules(dtplan, "--model", "mixtral-8x7b")[rule] == "pass"   # SP on by default
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--no-sp",
                  "--framework", "torchtitan")[rule] == "pass"
    assert _rules(dtplan, "--model", "llama3-8b", "--no-sp")[rule] == "pass"


def test_estimate_fails_an_expert_tp_torchtitan_does_not_run(dtplan):
    titan = ("--model", "mixtral-8x7b", "--framework", "torchtitan", "--zero", "2")
    status, limit = _detail(dtplan, *titan, "--ep", "8")["expert-grid-folds"]
    assert status == "fail" and "torchtitan has no expert TP: --etp 1" in limit
    assert _rules(dtplan, *titan, "--ep", "8", "--etp", "1")["expert-grid-folds"] == "pass"
    assert _rules(dtplan, *titan)["expert-grid-folds"] == "pass"   # no EP: ETP = TP
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--ep", "8")["expert-grid-folds"] == "pass"


MEGATRON_MOE = """--num-layers 32
--hidden-size 4096
--num-attention-heads 32
--group-query-attention
--num-query-groups 8
--ffn-hidden-size 14336
--swiglu
--num-experts 8
--moe-router-topk 2
--expert-model-parallel-size 8
--vocab-size 32000
--seq-length 4096
--max-position-embeddings 4096
--tensor-model-parallel-size 2
--micro-batch-size 1
--global-batch-size 256
--bf16
--use-distributed-optimizer
"""


def test_check_refuses_a_megatron_moe_script_under_tp_without_sp(dtplan, tmp_path: Path):
    args = tmp_path / "moe.args"
    args.write_text(MEGATRON_MOE)
    r = dtplan("check", str(args), "--gpus", "64", "--hardware", "h100")
    assert r.code == 1 and "sequence-parallel-with-moe" in r.out, r.out + r.err
    args.write_text(MEGATRON_MOE + "--sequence-parallel\n")
    r = dtplan("check", str(args), "--gpus", "64", "--hardware", "h100")
    assert "FAIL   sequence-parallel-with-moe" not in r.out, r.out


def test_torchtitan_ep_stays_in_the_shard_group_and_tp(dtplan):
    """configs.py:282-290 (b5bcd76c): efsdp = dp_shard·cp·tp / ep, dp_replicate outside."""
    titan = ("--model", "mixtral-8x7b", "--framework", "torchtitan", "--zero", "3",
             "--tp", "1", "--etp", "1")
    # 16 GPUs: DP 16 in shard groups of 4: EP 8 spans replicas, EP 4 does not
    status, limit = _detail(dtplan, *titan, "--ep", "8", "--shard-group", "4")["ep-ranks"]
    assert status == "fail" and "divides the shard group × TP = 4" in limit
    assert _rules(dtplan, *titan, "--ep", "4", "--shard-group", "4")["ep-ranks"] == "pass"
    assert _rules(dtplan, *titan, "--ep", "8")["ep-ranks"] == "pass"   # one group
    megatron = ("--model", "mixtral-8x7b", "--zero", "1", "--tp", "1", "--ep", "8",
                "--shard-group", "4")
    assert _rules(dtplan, *megatron)["ep-ranks"] == "pass"   # EP over every DP rank
    # DeepSpeed with expert TP carves EP from DP (EP 8 over TP 4 × DP 4 fails the expert grid),
    # without it from a stage's TP·DP ranks (passes)
    ds = ("--model", "mixtral-8x7b", "--framework", "deepspeed", "--zero", "1", "--ep", "8",
          "--tp", "4")
    assert _rules(dtplan, *ds)["expert-grid-folds"] == "fail"
    assert _rules(dtplan, *ds, "--etp", "1")["expert-grid-folds"] == "pass"


def test_deepspeed_shards_an_moe_under_zero3_only_without_tp(dtplan):
    ds = ("--model", "mixtral-8x7b", "--framework", "deepspeed", "--zero", "3", "--ep", "8")
    status, limit = _detail(dtplan, *ds)["moe-zero3-tp"]   # TP 2 (the helper's default)
    assert status == "fail" and "TP 1 under ZeRO-3" in limit
    assert _rules(dtplan, *ds, "--tp", "1")["moe-zero3-tp"] == "pass"
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--zero", "3", "--ep", "8")["moe-zero3-tp"] \
        == "pass"   # Megatron-FSDP shards it under TP
    at = RULE_NAMES.index("moe-zero3-tp")
    assert search(_problem("mixtral-8x7b", "deepspeed"), SMALL).rejected[at] > 0
    assert search(_problem("mixtral-8x7b", "megatron"), SMALL).rejected[at] == 0
