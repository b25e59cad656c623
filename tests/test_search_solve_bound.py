"""The partial-recompute solve's shortcut (partial.screen's `beaten`, settle.beaten_by): a layout
the anchors put off the front whatever count of layers it recomputes is only counted, on two
premises checked here: the step floor at one recomputed layer is below the exact step at any
count, and the peak at any count is at least the full-recompute row's; and its count (does one
layer fewer than the fullest stage's fit) equals the count of the layouts solved in full."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.search.fast as search_mod
from planner.api import problem
from planner.evaluation.candidates import (ACTIVATION_COLUMNS, RECOMPUTE_CODES,
                                          STEP_FLOOR_COLUMNS, shape)
from planner.evaluation.evaluate import evaluate
from planner.evaluation.timing import STEP_FLOOR_MARGIN, step_floor
from planner.search.blocks import passes
from planner.search.bounds import memory_parts
from planner.search.fast import SearchSpace, search
from planner.search.partial import with_cols
from planner.search.space import candidate_blocks
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100 = load_profile("h100")
MODELS = {"70b": lambda: model_from_params(70e9), "mixtral": lambda: get_preset("mixtral-8x7b"),
          "qwen3-30b": lambda: get_preset("qwen3-30b-a3b")}


def _problem(model: str, gpus: int, seq: int, batch: int, precision: str, fw: str):
    p = problem(MODELS[model](), H100, gpus, seq_len=seq, global_batch=batch, precision=precision)
    return dataclasses.replace(p, framework=load_framework(fw))


problems = st.builds(_problem, st.sampled_from(sorted(MODELS)), st.sampled_from([16, 64, 256]),
                     st.sampled_from([2048, 8192]), st.sampled_from([64, 512]),
                     st.sampled_from(["mixed", "fp8"]),
                     st.sampled_from(["megatron", "torchtitan", "deepspeed"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.sampled_from([None, "interleaved", "zb-h1", "dualpipe", "dualpipev"]),
       st.integers(0, 2**31 - 1))
def test_the_one_layer_floors_bound_every_count(p, schedule, seed):
    """On structurally valid full-recompute rows (what the search solves) with k recomputed
    layers (1 ≤ k ≤ the fullest stage's), each pipeline schedule: the step floor at k = 1 (less the margin beaten_by takes) ≤ the exact step at k, and the exact peak
    at k ≥ the full row's."""
    c = next(iter(candidate_blocks(p, SearchSpace(recompute="full", schedule=schedule))), None)
    if c is None:   # no split runs the schedule (an odd PP for DualPipe, say)
        return
    c = c.take(np.flatnonzero(passes(p, c, search_mod.STRUCTURAL_RULES)))
    rng = np.random.default_rng(seed)
    c = c.take(np.sort(rng.choice(len(c), min(len(c), 1000), replace=False)))
    assert (c.recompute == RECOMPUTE_CODES["full"]).all()
    most = np.stack(shape(p, c).layers).max(axis=0)
    k = np.floor(1 + rng.random(len(c)) * most).astype(np.int64)
    one = with_cols(c, recompute_layers=1)
    parts = memory_parts(p, one)
    per_mode = parts.acts.rows(pick=lambda t: t["per_mode"])
    least = step_floor(p, one, shape(p, one), per_mode, parts.groups()) * (1.0 - STEP_FLOOR_MARGIN)
    at_k, full = evaluate(p, with_cols(c, recompute_layers=k)), evaluate(p, c)
    assert (least <= at_k.time.step).all(), float(np.max(least - at_k.time.step))
    assert (at_k.memory.peak >= full.memory.peak).all()


def _everything(parts, least):
    return np.ones(len(parts.c), dtype=bool)


def test_counted_layouts_are_those_solved(monkeypatch):
    """Every layout only counted (beaten_by putting every one off) gives the solved count the
    full solve of every layout (no beaten_by) gives, and it is not 0."""
    p = problem(get_preset("mixtral-8x7b"), H100, 64, seq_len=4096, global_batch=256)
    monkeypatch.setattr(search_mod, "beaten_by", lambda p, anchors: None)
    full = search(p)
    monkeypatch.setattr(search_mod, "beaten_by", lambda p, anchors: _everything)
    counted = search(p)
    assert full.solved > 0
    assert counted.solved == full.solved
    assert (counted.enumerated, counted.valid) == (full.enumerated, full.valid)



def _alike_within(c, number: np.ndarray, columns: tuple[str, ...]) -> bool:
    """Whether the rows of c that share a number are alike in `columns`."""
    key = np.stack([getattr(c, k) for k in columns], axis=1)
    first = np.full(int(number.max()) + 1, -1)
    first[number[::-1]] = np.arange(len(number))[::-1]
    return bool((key == key[first[number]]).all())


def test_the_scans_numbering_changes_no_solve(monkeypatch):
    """partial.screen and partial.solve given each layout's activation tuple and group from
    its scan (`alike`, `group`, numbered over the search's scans) give the search they give
    when they find them on their rows, bit for bit; the rows sharing a number are alike in
    what it names (the activation columns; the step floor's columns), across several scans."""
    p = problem(get_preset("mixtral-8x7b"), H100, 256, seq_len=4096, global_batch=1024)
    given_both = search(p)
    screen, solve, seen = search_mod.screen, search_mod.solve, []

    def screen_without(*args):   # fast calls screen(p, rows, …, least, alike, group)
        seen.append((args[1], args[8], args[9]))
        return screen(*args[:8])

    def solve_without(*args):    # and solve(p, rows, mn, usable, states, flight, alike)
        return solve(*args[:6])
    monkeypatch.setattr(search_mod, "screen", screen_without)
    monkeypatch.setattr(search_mod, "solve", solve_without)
    found = search(p)
    assert seen and all(alike is not None and group is not None for _, alike, group in seen)
    assert max(int(alike[0].max()) for _, alike, _ in seen) > 0
    for rows, alike, group in seen:
        assert _alike_within(rows, alike[0], ACTIVATION_COLUMNS)
        assert _alike_within(rows, group, STEP_FLOOR_COLUMNS)
    assert (given_both.enumerated, given_both.valid, given_both.solved) == \
        (found.enumerated, found.valid, found.solved)
    assert given_both.rejected.tolist() == found.rejected.tolist()
    for name in ("tp", "pp", "dp", "ep", "zero", "recompute", "recompute_layers"):
        assert getattr(given_both.candidates, name).tolist() == \
            getattr(found.candidates, name).tolist()
    assert given_both.results.time.step.tobytes() == found.results.time.step.tobytes()
    assert given_both.results.memory.peak.tobytes() == found.results.memory.peak.tobytes()
