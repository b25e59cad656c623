"""The search's per-layout shortcuts count exactly what a row-by-row pass counts: the memory
floor of layouts crossed with their recompute rows (MemoryParts.floor with `crossed`: the
states' and in-flight terms once per layout, broadcast over its rows) is, bit for bit, the
floor gathered row by row, so the rows it rejects and their count are the same."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.evaluation.evaluate import usable_bytes
from planner.evaluation.candidates import COLUMN_NAMES, shape
from planner.search.blocks import layout_blocks, passing_blocks
from planner.search.partial import fullest_stage
from planner.search.bounds import columns_at, crossed_memory_parts, memory_parts
from planner.search.fast import SearchSpace
from planner.search.crossing import materialize, with_recomputes
from planner.search.space import recomputes
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100 = load_profile("h100")
MODELS = (model_from_params(1.3e9), model_from_params(70e9), get_preset("mixtral-8x22b"),
          get_preset("deepseek-v3"))


def _problem(model: int, gpus: int, seq: int, batch: int, precision: str, fw: str):
    p = problem(MODELS[model], H100, gpus, seq_len=seq, global_batch=batch, precision=precision)
    return dataclasses.replace(p, framework=load_framework(fw))


problems = st.builds(_problem, st.integers(0, len(MODELS) - 1), st.sampled_from([8, 64, 256]),
                     st.sampled_from([2048, 8192]), st.sampled_from([16, 512]),
                     st.sampled_from(["mixed", "fp8"]),
                     st.sampled_from(["megatron", "torchtitan", "deepspeed", "fsdp"]))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_the_floor_per_layout_is_the_floor_per_row(p, offload, sample, seed):
    """On a block's layouts (all of them, or a random few: then most are distinct and the parts
    hold the rows' own tuples) crossed with the recompute rows, the crossed floor equals the
    row-by-row floor of the same parts and of parts built on the plain rows, bit for bit, and
    so does the count of rows it leaves within usable memory."""
    space = SearchSpace(allow_offload=offload)
    p = p.resolved()
    lay = next(iter(layout_blocks(p, space)))[0]
    if sample:
        rng = np.random.default_rng(seed)
        lay = lay.take(np.sort(rng.choice(len(lay), min(len(lay), 40), replace=False)))
    rec = recomputes(p, space)
    rows = with_recomputes(lay, rec)
    parts = crossed_memory_parts(p, rows, lay, len(rec))
    assert parts.crossed == len(rec) > 1
    grouped = parts.floor(p)
    by_row = dataclasses.replace(parts, crossed=1).floor(p)
    plain = memory_parts(p, materialize(rows, np.arange(len(rows)))).floor(p)
    assert len(grouped) == len(rows)
    assert np.array_equal(_bits(grouped), _bits(by_row))
    assert np.array_equal(_bits(grouped), _bits(plain))
    usable = usable_bytes(p)
    assert int((grouped <= usable).sum()) == int((plain <= usable).sum())


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.integers(0, 2**31 - 1))
def test_a_crossings_columns_are_read_from_its_layouts(p, seed):
    """columns_at on a crossing (its columns not built, or some built) gives the built
    columns' values at the rows asked, in their order."""
    space = SearchSpace()
    p = p.resolved()
    lay = next(iter(layout_blocks(p, space)))[0]
    rows = with_recomputes(lay, recomputes(p, space))
    plain = materialize(rows, np.arange(len(rows)))
    idx = np.random.default_rng(seed).permutation(len(rows))[: max(1, len(rows) // 3)]
    names = ("pp", "chunks", "first", "last", "dp", "ep", "schedule")
    for built in (False, True):
        if built:
            _ = rows.pp, rows.dp  # two columns built on every row: read from there
        for name, got in zip(names, columns_at(rows, names, idx)):
            assert np.array_equal(got, getattr(plain, name).take(idx)), name


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans())
def test_the_passing_layouts_are_the_blocks_rows_that_pass(p, offload):
    """blocks.passing_blocks builds only the layouts that pass every structural rule: block by
    block they are layout_blocks' layouts where its mask passes, column for column, with the
    same counts and mask, and its block on demand (every split, or those up to the first
    where each of some rules fails) is layout_blocks' block, or the first rows of it; two of
    its layouts share a group exactly where they are alike in every column but the states'."""
    space = SearchSpace(allow_offload=offload)
    p = p.resolved()
    n = 0
    for (lay, left, counts, ok), (kept, left2, counts2, ok2, whole, group) in zip(
            layout_blocks(p, space), passing_blocks(p, space), strict=True):
        assert np.array_equal(ok, ok2) and np.array_equal(counts, counts2)
        assert len(group) == len(kept)
        if len(kept):
            states = ("zero", "shard", "offload_opt", "offload_par")
            alike = np.unique(np.stack([getattr(kept, c) for c in COLUMN_NAMES
                                        if c not in states], axis=1), axis=0,
                              return_inverse=True)[1].reshape(-1)
            pairs = len(np.unique(np.stack([group, alike], axis=1), axis=0))
            assert pairs == len(np.unique(group)) == len(np.unique(alike))
        assert [(r, x) for r, x, _ in left] == [(r, x) for r, x, _ in left2]
        at = np.flatnonzero(ok)
        failing = [int(r) for r in np.flatnonzero(counts)]
        first = whole(failing[-1:])  # up to the split where the last failing rule first fails
        assert not failing or 0 < len(first) <= len(lay)
        for name in COLUMN_NAMES:
            assert np.array_equal(getattr(kept, name), getattr(lay, name).take(at)), name
            assert np.array_equal(getattr(whole(()), name), getattr(lay, name)), name
            assert np.array_equal(getattr(first, name), getattr(lay, name)[:len(first)]), name
        n += 1
        if n == 3:
            break


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.integers(0, 2**31 - 1))
def test_the_fullest_stage_is_the_shapes(p, seed):
    """partial.fullest_stage (once per layer split, grouped by the activation tuples or
    looked for) is the largest of shape().layers on every row, bit for bit."""
    p = p.resolved()
    lay = next(iter(layout_blocks(p, SearchSpace())))[0]
    lay = lay.take(np.sort(np.random.default_rng(seed).choice(len(lay), min(len(lay), 3000),
                                                              replace=False)))
    want = np.stack(shape(p, lay).layers).max(axis=0)
    parts = memory_parts(p, lay)
    for got in (fullest_stage(p, lay), fullest_stage(p, lay, parts.acts)):
        assert np.array_equal(_bits(got), _bits(want))
