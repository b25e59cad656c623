"""The search's group-wise shortcuts give what the row-by-row passes give: the structurally
passing layouts built as a grid (grid.passing_grid) are space.product's rows that pass, with
the same mask and groups, element for element; the floor and the ceiling, split into a
states and a pair term and the floor summed a group at a time (search.bound_terms), are
engine.peak's bounds on each row within their margins."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.evaluation.candidates import COLUMN_NAMES
from planner.search import blocks
from planner.search.blocks import GRID_RUNS, passes, structural_passes, verdicts
from planner.engine import peak as pk
from planner.evaluation.evaluate import STAGES
from planner.search.bound_terms import transient_ceiling
from planner.search.bounds import columns_at, crossed_memory_parts
from planner.search.crossing import with_recomputes
from planner.search.fast import SearchSpace
from planner.search.grid import passing_grid
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


def _per_row(p, parts, ceiling: bool) -> np.ndarray:
    """On each row of parts, each stage's terms gathered to the row: device_ceiling (with
    `ceiling`), else engine.peak.device_floor at the first backward (the states and what that
    moment holds besides, gathered parameters, gradient buffers and working set, as its
    allocation): the bounds before they were split into a states and a pair term."""
    b, fw = p.budget, p.fw
    mem = dict(share=b.fragmentation_fraction, expandable=fw.memory.expandable_segments,
               context=b.context_bytes, nccl=b.comm_buffer_bytes)
    states, acts, flight = (part.rows() for part in (parts.states, parts.acts, parts.flight))
    n = len(parts.c)
    per = {}
    for s in STAGES:
        a, st_ = acts["stages"][s], states[s]
        if ceiling:
            rounding = 0.0 if fw.memory.expandable_segments else \
                a["rounding"] * flight[s] + a["rounding_transient"]
            v = pk.device_ceiling(st_["persistent"], a["per_mb"], flight[s],
                                  transient_ceiling(st_, None) + transient_ceiling(None, a),
                                  rounding, **mem)
        else:
            v = pk.device_floor(st_["persistent"], a["per_mb"], flight[s],
                                a["backward_working"] + st_["gathered"] + st_["grads_first"],
                                **mem)
        per[s] = np.broadcast_to(v, (n,))
    pp = columns_at(parts.c, ("pp",), np.arange(n))[0]
    return np.maximum(np.maximum(per["first"], per["last"]), np.where(pp > 2, per["middle"], 0.0))


def _items(parts) -> np.ndarray:
    """Each row's largest over its stages of the first backward's states items."""
    states = parts.states.rows()
    return np.max([np.broadcast_to(states[s]["gathered"] + states[s]["grads_first"],
                                   (len(parts.c),)) for s in STAGES], axis=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.booleans())
def test_the_split_bounds_are_the_bounds_per_row_within_their_margin(p, offload):
    """On the first blocks' rows, MemoryParts.floor and .ceiling (a states term plus a pair
    term per stage, search.bound_terms; the floor by groups): the floor never above
    device_floor on the row at the first backward, nor below it by more than the churn of
    the states' items it holds (which the split leaves out) and its margin; the ceiling
    never below device_ceiling's less its margin, nor above it by more; floor ≤ the exact
    peak ≤ ceiling."""
    space = SearchSpace(allow_offload=offload)
    rec = recomputes(p, space)
    for n, (lay, _, _, _, _, group) in enumerate(blocks.passing_blocks(p, space)):
        if not len(lay):
            continue
        parts = crossed_memory_parts(p, with_recomputes(lay, rec), lay, len(rec),
                                     (group, int(group.max()) + 1))
        floor, ceiling = parts.floor(p), parts.ceiling(p, np.arange(len(parts.c)))
        want_floor, want_ceiling = _per_row(p, parts, False), _per_row(p, parts, True)
        assert (floor <= want_floor).all()
        left_out = p.budget.fragmentation_fraction * _items(parts)
        assert (floor >= want_floor - left_out - 1e-10 * np.abs(want_floor)).all()
        assert (ceiling >= want_ceiling * (1.0 - 1e-10)).all()
        assert (ceiling <= want_ceiling * (1.0 + 1e-10)).all()
        peak = parts.peak(p)
        assert (floor <= peak).all() and (peak <= ceiling).all()
        if n == 2:
            break
