"""Megatron-Core runs a mixture of experts under TP only with sequence parallel: MoELayer.forward
raises in training where attention TP > 1 and sequence_parallel is off (NVIDIA/Megatron-LM
d98e8a64 megatron/core/transformer/moe/moe_layer.py:636-640). The Megatron profile states it
(moe_needs_sequence_parallel); the search offers no other MoE layout under TP, and a layout or
a Megatron script given so fails sequence-parallel-with-moe. Dense models and frameworks that
do not state it keep both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.api import problem
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


def _sp_under_tp(preset: str, framework: str) -> set[int]:
    """The SP values of every valid layout with TP > 1 the search keeps (--all)."""
    res = search(_problem(preset, framework), SMALL, dominated=True)
    c = res.candidates.take(res.order)
    return set(np.unique(c.sp[c.tp > 1]).tolist())


def test_megatron_profile_states_it_and_the_others_do_not():
    assert load_framework("megatron").time.moe_needs_sequence_parallel
    for name in ("torchtitan", "deepspeed", "fsdp", "torchtune"):
        assert not load_framework(name).time.moe_needs_sequence_parallel, name


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
    r = dtplan("estimate", "--gpus", "16", "--hardware", "h100", "--tp", "2", "--zero", "1",
               "--micro-batch", "1", "--global-batch", "64", "-f", "json", *argv)
    assert r.code in (0, 1), r.err
    return {x["name"]: x["status"] for x in json.loads(r.out)["rules"]}


def test_estimate_fails_moe_under_tp_without_sp_on_megatron(dtplan):
    rule = "sequence-parallel-with-moe"
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--no-sp")[rule] == "fail"
    assert _rules(dtplan, "--model", "mixtral-8x7b")[rule] == "pass"   # SP on by default
    assert _rules(dtplan, "--model", "mixtral-8x7b", "--no-sp",
                  "--framework", "torchtitan")[rule] == "pass"
    assert _rules(dtplan, "--model", "llama3-8b", "--no-sp")[rule] == "pass"


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
