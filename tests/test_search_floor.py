"""The search's shortcuts change nothing it returns: the memory floor never exceeds the exact
peak, the rows of splits counted unbuilt are counted by rule exactly as their built rows
fail, and a search with every shortcut switched off (every row's memory and step exact, every
split built, every part on the rows' own tuples; tests/test_search_speed.py checks the bounds
one by one) gives the same rows, counts, examples and solved layouts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.search.blocks as blocks_mod
import planner.search.fast as search_mod
import planner.search.settle as settle_mod
from planner.api import problem
from planner.search.blocks import RUNS, first_failures, structural_passes, verdicts
from planner.evaluation.distinct import distinct_rows
from planner.evaluation.evaluate import evaluate_memory
from planner.search.bounds import MemoryParts, memory_parts
from planner.evaluation.rules import RULE_NAMES, RULES
from planner.search.fast import SearchSpace, search
from planner.search.space import candidate_blocks, product, split_table
from planner.evaluation.timing_terms import Groups
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100 = load_profile("h100")
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "fsdp")


def _problem(params: float, gpus: int, seq: int, batch: int, precision: str, fw: str,
             flash: bool | None):
    p = problem(model_from_params(params), H100, gpus, seq_len=seq, global_batch=batch,
                precision=precision)
    return dataclasses.replace(p, framework=load_framework(fw), flash_attention=flash)


problems = st.builds(_problem, st.sampled_from([1.3e9, 7e9, 70e9]),
                     st.sampled_from([8, 24, 64, 256]), st.sampled_from([2048, 4096, 16384]),
                     st.sampled_from([16, 96, 512]),
                     st.sampled_from(["mixed", "fp8", "fp32", "bf16-pure"]),
                     st.sampled_from(FRAMEWORKS), st.sampled_from([None, False]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans(), st.integers(0, 2**31 - 1))
def test_the_floor_is_never_above_the_exact_peak(p, offload, seed):
    """MemoryParts.floor ≤ the five-phase peak on every row, structurally valid or not."""
    c = next(iter(candidate_blocks(p, SearchSpace(allow_offload=offload))))
    rows = c.take(np.sort(np.random.default_rng(seed).choice(len(c), min(len(c), 3000),
                                                             replace=False)))
    floor = memory_parts(p, rows).floor(p)
    peak = evaluate_memory(p, rows, detail=False)[2].peak
    assert (floor <= peak).all(), float(np.max(floor - peak))
    assert (floor > 0).all()  # a floor, not a zero: the states and the context are in it


spaces = st.builds(SearchSpace, zero=st.sampled_from([None, 0, 3]),
                   micro_batch=st.sampled_from([None, 1, 3]),
                   schedule=st.sampled_from([None, "1f1b", "interleaved"]),
                   allow_offload=st.booleans(), max_chunks=st.sampled_from([2, 8]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, spaces)
def test_splits_are_counted_by_rule_as_their_rows_fail(p, space):
    """blocks.verdicts (each split's rows by first failing rule, from its knob tables alone)
    equals the first failures of every built row, split by split."""
    s = split_table(p, space)
    counts, valid = verdicts(p, s)
    c, owner = product(s, np.arange(len(s)))
    first = first_failures(p, c, tuple(i for run in RUNS for i in run.rules))
    k = len(RULE_NAMES)
    built = np.bincount(owner * k + np.maximum(first, 0), weights=first >= 0,
                        minlength=len(s) * k).reshape(len(s), k)
    assert counts.tolist() == built.astype(np.int64).tolist()
    assert valid.tolist() == np.bincount(owner, weights=first < 0, minlength=len(s)).tolist()
    assert (counts.sum(axis=1) + valid).tolist() == s.sizes().tolist()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, spaces)
def test_each_row_takes_its_tuples_verdicts(p, space):
    """blocks.structural_passes (each run's verdict on its tables' tuples, looked up by row)
    equals every structural rule evaluated on every built row, on the splits with a valid row."""
    s = split_table(p, space)
    live = np.flatnonzero(verdicts(p, s)[1] > 0)
    positions: dict = {}
    c, owner = product(s, live, positions=positions)
    rules = tuple(i for run in RUNS for i in run.rules)
    assert structural_passes(p, s, live, owner, positions).tolist() == \
        (first_failures(p, c, rules) < 0).tolist()


def test_the_rules_fall_into_runs_reading_disjoint_tables():
    """The count-by-tables shortcut is on: no two runs of rules read a knob table in common,
    and every run reads exactly the tables its rules declare."""
    assert len(RUNS) > 1
    seen = [t for run in RUNS for t in run.reads]
    assert len(seen) == len(set(seen))
    for run in RUNS:
        assert set(run.reads) == {t for i in run.rules for t in RULES[i].reads}


def test_runs_number_alike_rows_alike():
    rng = np.random.default_rng(3)
    wide = np.repeat(rng.integers(0, 10**9, 40), 50)  # a split column: few long runs
    narrow = rng.integers(0, 5, len(wide))
    rep, inverse = distinct_rows([wide, narrow], runs=True)
    keys = np.stack([wide, narrow], axis=1)
    assert (keys[rep][inverse] == keys).all()


def _no_shortcuts(monkeypatch):
    """Every row's memory and step exact (a floor of 0, no ceiling, no row surely dominated),
    every split built, the memory parts keyed on every crossed row, the axis times on their
    own columns and the compute on every row."""
    monkeypatch.setattr(MemoryParts, "floor", lambda self, p: np.zeros(len(self.c)))
    monkeypatch.setattr(blocks_mod, "built_splits", lambda valid: np.ones(len(valid), bool))
    monkeypatch.setattr(MemoryParts, "ceiling", lambda self, p, idx: np.full(len(idx), np.inf))
    monkeypatch.setattr(settle_mod, "surely_dominated",
                        lambda a, u, first, lower, inverse=None: np.zeros(len(lower), dtype=bool))
    monkeypatch.setattr(search_mod, "crossed_memory_parts",
                        lambda p, c, layouts, k, groups=None: memory_parts(p, c))
    monkeypatch.setattr(MemoryParts, "groups",
                        lambda self, idx=None: Groups(state=self.state_groups(idx)))


def _same(a, b):
    assert (a.enumerated, a.valid, a.solved) == (b.enumerated, b.valid, b.solved)
    assert a.rejected.tolist() == b.rejected.tolist()
    assert a.order.tolist() == b.order.tolist()
    assert a.first_failure.tolist() == b.first_failure.tolist()
    for f in dataclasses.fields(type(a.candidates)):
        assert getattr(a.candidates, f.name).tolist() == getattr(b.candidates, f.name).tolist()
    assert a.results.time.step.tobytes() == b.results.time.step.tobytes()
    assert a.results.memory.peak.tobytes() == b.results.memory.peak.tobytes()


CASES = {
    "70b-256": (lambda: problem(model_from_params(70e9), H100, 256, seq_len=4096,
                                global_batch=1024), {}),
    "70b-8-nothing-fits": (lambda: problem(model_from_params(70e9), H100, 8, seq_len=4096,
                                           global_batch=64), {}),
    "gpt2-8-all": (lambda: problem(get_preset("gpt2"), H100, 8, seq_len=1024,
                                   global_batch=64), {"dominated": True}),
    "mixtral-64": (lambda: problem(get_preset("mixtral-8x7b"), H100, 64, seq_len=4096,
                                   global_batch=256), {}),
    "13b-24-cost": (lambda: problem(model_from_params(13e9), H100, 24, seq_len=2048,
                                    global_batch=96), {"objective": "cost"}),
    "mixtral-64-all": (lambda: problem(get_preset("mixtral-8x7b"), H100, 64, seq_len=4096,
                                       global_batch=256), {"dominated": True}),
    "8b-64-torchtitan": (lambda: dataclasses.replace(
        problem(get_preset("llama3.1-8b"), H100, 64, seq_len=8192, global_batch=128),
        framework=load_framework("torchtitan")), {"objective": "headroom"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_search_is_the_same_without_its_shortcuts(name, monkeypatch):
    make, kw = CASES[name]
    p = make()
    fast = search(p, **kw)
    _no_shortcuts(monkeypatch)
    _same(fast, search(p, **kw))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 40))
def test_the_front_prefilter_drops_only_what_the_sort_drops(seed, levels):
    """engine.pareto's bins before the sort (large exact fronts) keep the same rows, ties (few
    distinct values) included."""
    import planner.search.pareto as pareto
    rng = np.random.default_rng(seed)
    x = rng.integers(0, levels, size=(pareto.PREFILTER_ROWS + 500, 3)).astype(float)
    x[:, 2] = 8.0
    fast = pareto.pareto_front(x)
    try:
        pareto.PREFILTER_ROWS, old = 10**9, pareto.PREFILTER_ROWS
        assert (pareto.pareto_front(x) == fast).all()
    finally:
        pareto.PREFILTER_ROWS = old


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans(), st.integers(0, 2**31 - 1))
def test_the_peak_alone_is_the_peak_of_the_rows(p, offload, seed):
    """MemoryParts.peak (each stage's device total alone) equals rows()'s peak bit for bit."""
    c = next(iter(candidate_blocks(p, SearchSpace(allow_offload=offload))))
    rows = c.take(np.sort(np.random.default_rng(seed).choice(len(c), min(len(c), 2000),
                                                             replace=False)))
    parts = memory_parts(p, rows)
    assert parts.peak(p).tobytes() == parts.rows(p)[2].peak.tobytes()
