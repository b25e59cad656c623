"""The search's group-wise shortcuts give what the row-by-row passes give: the structurally
passing layouts built as a grid (grid.passing_grid) are space.product's rows that pass, with
the same mask and groups, element for element; the floor decided a group at a time
(screen.screened_floor) is MemoryParts.floor, bit for bit, on every row it leaves within the
usable memory, and a bound above it, never above the floor, on the rows it rejects."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.evaluation.candidates import COLUMN_NAMES
from planner.evaluation.evaluate import usable_bytes
from planner.search import blocks
from planner.search.blocks import GRID_RUNS, passes, structural_passes, verdicts
from planner.search.bounds import crossed_memory_parts
from planner.search.crossing import with_recomputes
from planner.search.fast import SearchSpace
from planner.search.grid import passing_grid
from planner.search.screen import screened_floor
from planner.search.space import product, recomputes, split_table
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100 = load_profile("h100")
MODELS = (model_from_params(1.3e9), model_from_params(70e9), get_preset("mixtral-8x22b"),
          get_preset("deepseek-v3"), get_preset("qwen3-235b-a22b"))


def _problem(model: int, gpus: int, seq: int, batch: int, precision: str, fw: str):
    p = problem(MODELS[model], H100, gpus, seq_len=seq, global_batch=batch, precision=precision)
    return dataclasses.replace(p, framework=load_framework(fw)).resolved()


problems = st.builds(_problem, st.integers(0, len(MODELS) - 1), st.sampled_from([8, 64, 256]),
                     st.sampled_from([2048, 8192]), st.sampled_from([16, 512, 1536]),
                     st.sampled_from(["mixed", "fp8"]),
                     st.sampled_from(["megatron", "torchtitan", "deepspeed", "fsdp"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans(), st.integers(0, 2**31 - 1))
def test_the_grid_is_the_rows_that_pass(p, offload, seed):
    """passing_grid on some splits with a valid row: product's rows where structural_passes
    holds, every column, the mask over product's rows and positions["group"] equal."""
    s = split_table(p, SearchSpace(allow_offload=offload))
    live = np.flatnonzero(verdicts(p, s)[1] > 0)
    if not len(live):
        return
    rng = np.random.default_rng(seed)
    live = np.sort(rng.choice(live, min(len(live), 12), replace=False))
    positions: dict[str, np.ndarray] = {}
    found: list[np.ndarray] = []
    want = product(s, live, positions=positions, keep=lambda owner, at: found.append(
        structural_passes(p, s, live, owner, at)) or found[0])[0]
    got = passing_grid(p, s, live, GRID_RUNS, passes)
    assert got is not None
    rows, mask, group = got
    assert np.array_equal(mask, found[0]) and mask.dtype == found[0].dtype
    assert np.array_equal(group, positions["group"])
    for name in COLUMN_NAMES:
        assert np.array_equal(getattr(rows, name), getattr(want, name)), name


def test_runs_not_on_consecutive_tables_fall_back():
    """A run reading tables that are not consecutive in FACTORS (no rule set so far) has no
    grid: None, and the blocks filter every row instead."""
    p = _problem(2, 64, 2048, 512, "mixed", "megatron")
    s = split_table(p, SearchSpace())
    live = np.flatnonzero(verdicts(p, s)[1] > 0)[:3]
    assert passing_grid(p, s, live, ((("states", "mb"), ()),), passes) is None
    assert passing_grid(p, s, live, blocks.GRID_RUNS, passes) is not None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans())
def test_the_screened_floor_is_the_floor_where_it_is_open(p, offload):
    """screened_floor on the first blocks: MemoryParts.floor bit for bit where it is within
    the usable memory; above it (and never above the floor) where it rejects a group, and
    the floor rejects those rows as well."""
    space = SearchSpace(allow_offload=offload)
    rec = recomputes(p, space)
    usable = usable_bytes(p)
    for n, (lay, _, _, _, _, group) in enumerate(blocks.passing_blocks(p, space)):
        if not len(lay):
            continue
        parts = crossed_memory_parts(p, with_recomputes(lay, rec), lay, len(rec),
                                     (group, int(group.max()) + 1))
        got, want = screened_floor(p, parts, usable), parts.floor(p)
        # the groups' least states over their layouts, not from the states' tuples: the same
        alone = screened_floor(p, dataclasses.replace(parts, state_keys=None), usable)
        assert np.array_equal(got.view(np.int64), alone.view(np.int64))
        same = got.view(np.int64) == want.view(np.int64)
        assert (same | (got > usable)).all()
        assert (got[~same] <= want[~same]).all() and (want[~same] > usable).all()
        if n == 2:
            break
