"""The cost model on distinct tuples (planner/evaluation/distinct.py) gives what it gives row by row."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.evaluation.distinct import distinct_rows, gather, on_distinct
from planner.evaluation.evaluate import evaluate
from planner.search.fast import SearchSpace
from planner.search.space import candidate_blocks
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset


def _leaves(obj, pre=""):
    """Every array of an Evaluation by its path (None fields as None)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            out.update(_leaves(getattr(obj, f.name), f"{pre}.{f.name}"))
        return out
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_leaves(v, f"{pre}.{k}"))
        return out
    return {pre: obj}


columns = st.lists(st.integers(-1, 40), min_size=1, max_size=60)


@settings(max_examples=60)
@given(st.lists(columns, min_size=1, max_size=4), st.integers(0, 3))
def test_distinct_rows_number_tuples_as_np_unique(cols, wide):
    n = min(len(c) for c in cols)
    arrs = [np.array(c[:n], dtype=np.int64) for c in cols]
    arrs[0] = arrs[0] * 10 ** (5 * wide)  # wide spans take the sorting path and the renumbering
    rep, inverse = distinct_rows(arrs)
    keys = np.stack(arrs, axis=1)
    _, expect = np.unique(keys, axis=0, return_inverse=True)
    assert (inverse == expect.reshape(-1)).all()
    assert (keys[rep][inverse] == keys).all()  # each tuple's representative carries it
    assert distinct_rows(arrs, at_most=len(rep) - 1) is None  # more tuples than asked for
    assert len(distinct_rows(arrs, at_most=len(rep))[0]) == len(rep)


def test_gather_walks_nested_results_and_leaves_scalars():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Part:
        a: np.ndarray
        b: float
        c: dict

    tree = Part(a=np.array([1.0, 2.0]), b=3.0, c={"x": (np.array([True, False]), 7.0)})
    out = gather(tree, np.array([1, 1, 0]), 2)
    assert out.a.tolist() == [2.0, 2.0, 1.0] and out.b == 3.0
    assert out.c["x"][0].tolist() == [False, False, True] and out.c["x"][1] == 7.0


def test_on_distinct_runs_the_part_once_per_tuple():
    class C:
        def __init__(self, k):
            self.k = k

        def __len__(self):
            return len(self.k)

        def take(self, idx):
            return C(self.k[idx])

    seen = []
    c = C(np.array([3, 1, 3, 3, 1, 3, 3, 3]))
    out = on_distinct(c, ["k"], lambda u: seen.append(len(u)) or u.k * 2.0)
    assert seen == [2] and out.tolist() == [6.0, 2.0, 6.0, 6.0, 2.0, 6.0, 6.0, 6.0]


H100 = load_profile("h100")
PROBLEMS = {
    "70b": problem(model_from_params(70e9), H100, 256, seq_len=4096, global_batch=1024),
    "mixtral": problem(get_preset("mixtral-8x22b"), H100, 512, seq_len=4096, global_batch=512),
    "8b-fp8-megatron": dataclasses.replace(
        problem(get_preset("llama3.1-8b"), H100, 64, seq_len=8192, global_batch=256,
                precision="fp8"), framework=load_framework("megatron")),
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_block_evaluates_each_row_as_the_row_alone(name):
    """The search's block (sub-results on distinct tuples, gathered back) and `estimate`'s
    single row give the same bits for every figure."""
    p = PROBLEMS[name]
    c = next(iter(candidate_blocks(p, SearchSpace(allow_offload=True))))
    block = c.take(np.arange(len(c) // 2, len(c) // 2 + 2000))  # rows that share tuples
    together = _leaves(evaluate(p, block))
    for i in np.random.default_rng(7).choice(len(block), 10, replace=False):
        alone = _leaves(evaluate(p, block.take([i])))
        for key, v in alone.items():
            if isinstance(v, np.ndarray) and v.ndim == 1:
                assert together[key][i].tobytes() == v[0].tobytes(), (key, i)
