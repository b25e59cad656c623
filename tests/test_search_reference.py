"""The fast search (planner.search.fast) equals the plain brute-force one
(planner.search.reference) on random small questions: the same ranked front, row for row
(layout, step time, peak memory), the same counts (enumerated, valid, solved, rejected by each
rule) and the same example layout for each rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.engine import fp8
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.evaluation.rules import RULE_NAMES
from planner.search import fast, reference
from planner.search.fast import OBJECTIVES, SearchSpace
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import Tuning
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

# The largest space drawn (layouts with their recompute variants): keeps the test near 20 s.
MOST_LAYOUTS = 6000
MODELS = {"1.3B": model_from_params(1.3e9), "7B": model_from_params(7e9),
          "70B": model_from_params(70e9), "gpt2": get_preset("gpt2"),
          "mixtral": get_preset("mixtral-8x7b"), "qwen2": get_preset("qwen2-7b")}
# h100 uncalibrated; a100-40g and h100-96gb-500w with error bands (a tolerance, a bucketed
# rank); l40s one GPU per NVLink domain; gb200-nvl72 72 per domain
HARDWARE = ("h100", "a100-40g", "h100-96gb-500w", "l40s", "gb200-nvl72")
# "+imbalance": the profile stating a routing imbalance (the activations then read EP)
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "fsdp", "megatron+imbalance")


def _problem(model: str, hw: str, gpus: int, seq: int, batch: int, precision: str, fw: str,
             headroom_gb: float | None = None, offload: bool = False, in_bwd: bool = False):
    """A question; `headroom_gb` an absolute headroom rule in place of the default share.
    `precision` may name a low-precision recipe; on a GPU that cannot run it (a question
    refused with exit 2, tests/test_fp8_recipes.py) the question is asked in bf16."""
    budget = MemoryBudget() if headroom_gb is None else MemoryBudget(
        min_headroom_fraction=0.0, min_headroom_bytes=headroom_gb * 1e9)
    prof = load_profile(hw)
    recipe = {"fp8": "tensorwise"}.get(precision, precision if precision in fp8.NAMES else "none")
    if recipe != "none" and recipe not in prof.gpu.fp8_recipes:
        precision, recipe = "mixed", "none"
    p = problem(MODELS[model], prof, gpus, seq_len=seq, global_batch=batch,
                precision=precision if recipe == "none" else "fp8", budget=budget,
                tuning=Tuning(fp8=recipe, activation_offload=offload,
                              optimizer_in_backward=in_bwd))
    name, _, hot = fw.partition("+")
    f = load_framework(name)
    if hot:
        f = dataclasses.replace(f, time=dataclasses.replace(f.time, ep_load_imbalance=1.3))
    return dataclasses.replace(p, framework=f)


problems = st.builds(_problem, st.sampled_from(sorted(MODELS)), st.sampled_from(HARDWARE),
                     st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]),
                     st.sampled_from([512, 2048, 8192]), st.sampled_from([1, 16, 48, 64, 96, 128]),
                     st.sampled_from(["mixed", "fp8", "bf16-pure", "rowwise-gw-hp", "nvfp4"]),
                     st.sampled_from(FRAMEWORKS),
                     st.sampled_from([None, None, 0.0, 4.0, 30.0]),
                     st.sampled_from([False, False, True]), st.sampled_from([False, False, True]))


def _fixed(*values):
    """A knob left to the search three times in four, else fixed to one of `values`."""
    return st.sampled_from([None] * (3 * len(values)) + list(values))


spaces = st.builds(SearchSpace, tp=_fixed(1, 2), pp=_fixed(1, 2), cp=_fixed(1), ep=_fixed(1),
                   zero=_fixed(0, 3), micro_batch=_fixed(1, 2),
                   recompute=_fixed("none", "full"), schedule=_fixed("1f1b", "interleaved"),
                   allow_offload=st.booleans(), max_chunks=st.sampled_from([2, 3, 4]))


def _size(p, space: SearchSpace) -> int:
    p = p.resolved()
    return sum(1 for _ in reference.base_layouts(p, space)) * len(
        reference.recompute_choices(p, space))


def _fast_rows(p, res) -> list[tuple]:
    return [(res.candidates.layout(int(i), p.precision, p.optimizer),
             float(res.results.time.step[i]), float(res.results.memory.peak[i]))
            for i in res.order]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, spaces, st.sampled_from(OBJECTIVES), st.booleans())
def test_the_fast_search_equals_the_reference(p, space, objective, dominated):
    """Front (or every valid row, `dominated`) row for row, in rank order; counts; examples."""
    assume(_size(p, space) <= MOST_LAYOUTS)
    _assert_same(p, space, objective, dominated)


def _assert_same(p, space: SearchSpace, objective: str, dominated: bool) -> dict[str, int]:
    """The fast search's front, counts and examples are the reference's; its rejections."""
    got = fast.search(p, space, objective, dominated=dominated)
    want = reference.search(p, space, objective, dominated=dominated)
    rows = _fast_rows(p, got)
    assert [r[0] for r in rows] == [w.layout for w in want.ranked]
    assert [x for r in rows for x in r[1:]] == pytest.approx(
        [x for w in want.ranked for x in (w.step_time, w.peak)], rel=1e-12)
    assert (got.enumerated, got.valid, got.solved) == (want.enumerated, want.valid, want.solved)
    assert {RULE_NAMES[k]: int(n) for k, n in enumerate(got.rejected) if n} == want.rejected
    examples = {RULE_NAMES[k]: got.candidates.layout(i, p.precision, p.optimizer)
                for i, k in enumerate(got.first_failure) if k >= 0}
    assert examples == want.examples
    return want.rejected


def _host_gib(p, gib: float):
    """p on its hardware with `gib` GiB of host memory a node."""
    hw = p.hardware
    return dataclasses.replace(p, hardware=dataclasses.replace(
        hw, host=dataclasses.replace(hw.host, host_memory_bytes=gib * 2**30)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, spaces, st.sampled_from(OBJECTIVES), st.booleans(),
       st.sampled_from([17, 20, 24, 32, 48, 64, 128]))
def test_the_fast_search_equals_the_reference_on_a_small_host(p, space, objective, dominated,
                                                              gib):
    """With activations offloaded to a small host (16 GiB of it reserved), the host rule,
    which reads the micro-batch and recompute, rejects rows after the structural rules: the
    same counts, examples and front as the reference's."""
    p = _host_gib(dataclasses.replace(p, tuning=dataclasses.replace(
        p.tuning, activation_offload=True)), gib)
    assume(_size(p, space) <= MOST_LAYOUTS)
    _assert_same(p, space, objective, dominated)


def test_the_host_rule_bites_alike_in_both_searches():
    """A 7B on 2 H100s, FSDP, activations offloaded: with 40 GiB of host memory (24 usable)
    the rows keeping more than that on the host are refused by fits-in-host-memory in both
    searches, before fits-in-memory; with 2 TiB none is."""
    p = _problem("7B", "h100", 2, 4096, 16, "mixed", "fsdp", offload=True)
    space = SearchSpace(tp=1, pp=1)
    assert "fits-in-host-memory" not in _assert_same(_host_gib(p, 2048), space, "time", True)
    rejected = _assert_same(_host_gib(p, 40), space, "time", True)
    assert rejected["fits-in-host-memory"] == 32 and rejected["fits-in-memory"] == 32


def test_the_reference_prices_each_layout_as_alone():
    """reference.price evaluates every layout in one call: each row's figures are those of the
    layout evaluated alone (evaluate reads a row's own layout only)."""
    p = _problem("mixtral", "h100", 16, 2048, 32, "mixed", "megatron").resolved()
    space = SearchSpace(allow_offload=True)
    bases = list(reference.base_layouts(p, space))
    pick = np.random.default_rng(0).choice(len(bases), 12, replace=False)
    layouts = [Layout(**bases[i], recompute=m) for i in sorted(pick)
               for m in reference.recompute_choices(p, space)]
    together = reference.price(p, layouts)
    for lay, row in zip(layouts, together):
        alone = evaluate(p, Candidates.from_layouts([lay]))
        assert (float(alone.time.step[0]), float(alone.memory.peak[0])) == \
            (row.step_time, row.peak)


def test_the_reference_refuses_a_large_space():
    p = _problem("7B", "h100", 64, 8192, 4096, "mixed", "megatron")
    with pytest.raises(ValueError, match="reference search prices at most"):
        reference.search(p, SearchSpace(allow_offload=True))


def test_partial_recompute_is_the_smallest_count_that_fits():
    """Where the optimizer step's moment takes over the peak as layers are recomputed (7B,
    FSDP, ZeRO-3 over groups of 2 of 4 ranks), memory is not linear in the count: its chord
    gave 16 layers, 11 fit before eager SwiGLU's SiLU output was counted; 15 with it, 14 once the
    allocator's rounding is taken per live tensor (not every tensor at the average's gap). The
    fast search finds the reference's smallest count."""
    p = _problem("7B", "a100-80g", 4, 4096, 8, "mixed", "fsdp")
    space = SearchSpace(tp=1, pp=1, zero=3, micro_batch=1, recompute=None)
    got = fast.search(p, space, dominated=True)
    want = reference.search(p, space, dominated=True)
    assert [r[0] for r in _fast_rows(p, got)] == [w.layout for w in want.ranked]
    hybrid = [w.layout for w in want.ranked if w.layout.shard_group == 2 and w.layout.dp == 4
              and w.layout.recompute_layers]
    assert [lay.recompute_layers for lay in hybrid] == [14]


def test_the_fast_search_prices_each_ep_apart_on_a_fine_grained_moe():
    """Rows alike but in EP share their activations, not their expert GEMMs (the GEMM's rows
    and the busiest rank's load read EP): with 128 experts and a stated imbalance the front
    equals the reference's row for row."""
    fw = load_framework("megatron")
    fw = dataclasses.replace(fw, time=dataclasses.replace(fw.time, ep_load_imbalance=1.3))
    p = problem(get_preset("qwen3-30b-a3b"), load_profile("h100"), 16, seq_len=4096,
                global_batch=64, framework=fw)
    _assert_same(p, SearchSpace(pp=1, micro_batch=1), "time", True)
