"""The complete search: what is enumerated, what is shown (Pareto-clean), partial recompute
solved, counts that add up, bounded blocks, Meta's published layouts among the valid ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.api import fit, problem
from planner.evaluation.candidates import RECOMPUTE_CODES
from planner.search.pareto import dominated_by_any
from planner.evaluation.evaluate import evaluate
from planner.evaluation.rules import RULE_NAMES
from planner.search.fast import SearchSpace, search
from planner.search.space import (BLOCK_ROWS, block_ends, candidate_blocks, split_rows,
                                  recomputes, splits)
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100 = load_profile("h100")
FULL = RECOMPUTE_CODES["full"]


@pytest.fixture(scope="module")
def p70():
    return problem(model_from_params(70e9), H100, 256, seq_len=4096, global_batch=1024)


@pytest.fixture(scope="module")
def shown(p70):
    return search(p70)


@pytest.fixture(scope="module")
def every(p70):
    return search(p70, dominated=True)


def _objectives(res, idx):
    r = res.results
    return np.stack([r.time.step[idx], r.memory.peak[idx], np.full(len(idx), res.problem.gpus)], 1)


# Must-show 4 over several questions: dense, MoE, 128K, small GPU counts, other frameworks.
SCENARIOS = {
    "dense-70b-256": (lambda: model_from_params(70e9), 256, 4096, 1024, None),
    "moe-mixtral-64": (lambda: get_preset("mixtral-8x7b"), 64, 4096, 512, None),
    "128k-8b-64": (lambda: get_preset("llama3-8b"), 64, 131072, 16, None),
    "small-8b-8": (lambda: get_preset("llama3-8b"), 8, 4096, 64, None),
    "small-gpt2-4": (lambda: get_preset("gpt2"), 4, 1024, 64, None),
    "torchtitan-70b-64": (lambda: get_preset("llama3-70b"), 64, 4096, 256, "torchtitan"),
    "deepspeed-70b-64": (lambda: get_preset("llama3-70b"), 64, 4096, 256, "deepspeed"),
    # the complete space with offload (#15 "complete space"): ZeRO-Offload crossed too
    "offload-70b-32": (lambda: get_preset("llama3-70b"), 32, 4096, 256, None, True),
}


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request):
    from planner.specs.framework import load_framework
    from dataclasses import replace
    model, gpus, seq, batch, fw, *offload = SCENARIOS[request.param]
    p = problem(model(), H100, gpus, seq_len=seq, global_batch=batch)
    if fw:
        p = replace(p, framework=load_framework(fw))
    space = SearchSpace(allow_offload=bool(offload))
    return p, space, search(p, space, dominated=True)


def single_knob_ties(res) -> dict[str, int]:
    """Knob → how many valid rows have a twin differing in that knob alone with bit-equal
    (step, peak): a knob the space enumerates where it changes nothing. Rows are compared by a
    64-bit hash of their columns (fixed odd multipliers, wrapping: a linear hash, so a row's hash
    without knob k is the whole hash minus k's term) -- one 1-D unique per knob instead of a
    row-wise unique over every column."""
    from planner.search.space import COLUMNS
    c, r = res.candidates.take(res.order), res.results
    cost = [np.ascontiguousarray(a[res.order], dtype=float).view(np.uint64)
            for a in (r.time.step, r.memory.peak)]
    cols = {n: np.asarray(getattr(c, n), dtype=np.int64).view(np.uint64) for n in COLUMNS}
    odd = np.random.default_rng(0).integers(1, 2**62, size=len(COLUMNS) + 2,
                                            dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    terms = {n: cols[n] * odd[i] for i, n in enumerate(COLUMNS)}
    whole = sum(terms.values(), cost[0] * odd[-2] + cost[1] * odd[-1])
    ties = {}
    for k in COLUMNS:
        rest = whole - terms[k]
        pairs = np.unique(np.stack([rest, cols[k]], 1).view(np.dtype((np.void, 16))))
        twins = len(pairs) - len(np.unique(rest))
        if twins:
            ties[k] = twins
    return ties


def test_no_two_valid_rows_differ_only_in_a_knob_that_changes_nothing(scenario):
    _, space, every = scenario
    assert len(every.order) == every.valid + every.solved > 0
    if space.allow_offload:
        c = every.candidates.take(every.order)
        assert np.any(c.offload_opt > 0) and np.any(c.offload_par > 0)
    assert single_knob_ties(every) == {}


@pytest.mark.parametrize("objective", ["time", "cost", "headroom"])
def test_no_default_row_is_dominated_by_any_valid_layout(scenario, objective):
    p, space, every = scenario
    shown = search(p, space, objective=objective)
    top = shown.order[:10]
    assert len(top) >= 1
    assert not dominated_by_any(_objectives(shown, top), _objectives(every, every.order)).any()
    # --all ranks every valid row (solved partial-recompute rows included); the default fewer
    assert every.valid == shown.valid
    assert len(every.order) >= len(shown.order)


def test_the_shown_rows_are_pareto_clean_and_not_all_rows(shown, every):
    assert len(shown.order[:10]) == 10 and len(every.order) > len(shown.order)
    c = shown.candidates.take(shown.order)
    assert not np.any((c.tp == 1) & (c.sp == 1))             # SP without TP
    assert not np.any((c.dp * c.cp == 1) & (c.zero > 0))     # ZeRO with nothing to shard
    assert not np.any((c.zero == 0) & (c.shard > 0))          # a shard group without ZeRO
    assert not np.any((c.pp == 1) & (c.chunks > 1))           # interleaving without PP


def test_rejections_add_up_over_the_whole_space(shown):
    assert int(shown.rejected.sum()) == shown.enumerated - shown.valid
    r = fit(shown.problem.model, H100, 256, seq_len=4096, global_batch=1024)
    assert sum(j.count for j in r.rejections) == r.enumerated - r.valid
    assert {j.rule for j in r.rejections} <= set(RULE_NAMES)


def test_partial_recompute_is_the_smallest_count_that_fits(p70, every):
    c = every.candidates
    part = [int(i) for i in every.order if c.recompute[i] == FULL and c.recompute_layers[i] > 1]
    assert part, "some layout needs recompute on part of its layers"
    rows = c.take(part[:50])
    fewer = dataclasses.replace(rows, recompute_layers=rows.recompute_layers - 1)
    ok = evaluate(p70, rows).memory
    short = evaluate(p70, fewer).memory
    assert (ok.peak <= ok.usable).all() and (short.peak > short.usable).all()


def test_context_parallel_crosses_nodes_and_tp_does_not(shown):
    c = shown.candidates.take(shown.order)
    assert (c.tp <= H100.scale_up.gpus_per_domain).all()
    assert np.any(c.tp * c.cp > H100.scale_up.gpus_per_domain)


def test_the_space_fills_every_candidates_column():
    from planner.evaluation.candidates import Candidates
    from planner.search.space import COLUMNS
    assert sorted(COLUMNS) == sorted(f.name for f in dataclasses.fields(Candidates))


def test_blocks_are_bounded_and_cover_every_split(p70):
    space = SearchSpace()
    rec = recomputes(p70, space)
    sizes = [len(split_rows(p70, space, s, rec)) for s in splits(p70, space)]
    blocks = [len(b) for b in candidate_blocks(p70, space, rows=4096)]
    assert sum(blocks) == sum(sizes)
    assert max(blocks) < 4096 + max(sizes)
    assert BLOCK_ROWS >= 4096


def test_growing_blocks_double_up_to_their_cap_and_cover_every_split():
    """block_ends with growth: block i closes on the first split that brings it to
    rows × min(growth, 2^i); the blocks are consecutive and cover every split."""
    sizes = np.random.default_rng(0).integers(1, 700, 400)
    for growth in (1, 4):
        ends = list(block_ends(sizes, 1000, growth))
        assert ends[0][0] == 0 and ends[-1][1] == len(sizes)
        assert all(b == c for (_, b), (c, _) in zip(ends, ends[1:]))
        for i, (a, b) in enumerate(ends[:-1]):
            target = 1000 * min(growth, 2 ** i)
            assert sizes[a:b].sum() >= target > sizes[a:b - 1].sum()


@pytest.mark.parametrize("growth", [1, 4])
def test_the_shown_rows_do_not_depend_on_the_block_size(p70, shown, monkeypatch, growth):
    import planner.search.blocks
    import planner.search.fast
    import planner.search.space
    for module in (planner.search.space, planner.search.blocks, planner.search.fast):
        monkeypatch.setattr(module, "BLOCK_ROWS", 5000)  # each module reads its own name
    monkeypatch.setattr(planner.search.blocks, "BLOCK_GROWTH", growth)
    small = search(p70)

    def rows(res):
        c = res.candidates
        return [tuple(int(getattr(c, f)[i]) for f in planner.search.space.COLUMNS) for i in res.order]
    assert rows(small) == rows(shown)
    assert (small.enumerated, small.valid, small.solved) == (shown.enumerated, shown.valid,
                                                              shown.solved)
    assert small.rejected.tolist() == shown.rejected.tolist()


@pytest.mark.parametrize("seq,batch,tp,pp,cp", [(8192, 2048, 8, 16, 1), (131072, 128, 8, 16, 16)])
def test_metas_llama3_405b_layouts_are_valid_candidates(seq, batch, tp, pp, cp):
    # Dubey et al. 2024 (Table 4): TP8 × PP16 × DP128 at 8K; TP8 × CP16 × PP16 × DP8 at 128K.
    p = problem(get_preset("llama3.1-405b"), H100, 16384, seq_len=seq, global_batch=batch)
    res = search(p, SearchSpace(tp=tp, pp=pp, cp=cp), dominated=True)
    assert res.valid > 0
    c = res.candidates
    i = int(res.order[0])
    assert (c.tp[i], c.pp[i], c.cp[i], c.dp[i]) == (tp, pp, cp, 16384 // (tp * pp * cp))


def _costs(p, rows, **knobs):
    moved = dataclasses.replace(rows, **{k: np.full(len(rows), v, dtype=np.int64)
                                         for k, v in knobs.items()})
    a, b = evaluate(p, rows), evaluate(p, moved)
    return a.time.step, a.memory.peak, b.time.step, b.memory.peak


def _same_cost(p, rows, **knobs):
    step, peak, step2, peak2 = _costs(p, rows, **knobs)
    return np.array_equal(step, step2) and np.array_equal(peak, peak2)


def test_the_knobs_left_out_are_the_ones_the_model_prices_at_nothing(p70, every):
    # The space leaves out SP at TP 1 and ZeRO without a data-parallel group: evaluating both
    # settings gives bit-equal step and peak (ZeRO-3 the same step and its gather buffers on
    # top: never better), so the prune follows from the model.
    c = every.candidates.take(every.order)
    tp1 = c.take(np.flatnonzero(c.tp == 1)[:200])
    assert len(tp1) and _same_cost(p70, tp1, sp=1)
    p8 = problem(get_preset("llama3-8b"), H100, 8, seq_len=4096, global_batch=64)
    res = search(p8, dominated=True)
    c8 = res.candidates.take(res.order)
    alone = c8.take(np.flatnonzero(c8.dp * c8.cp == 1)[:200])
    assert len(alone)
    assert all(_same_cost(p8, alone, zero=z) for z in (1, 2))
    step, peak, step3, peak3 = _costs(p8, alone, zero=3)
    assert np.array_equal(step, step3) and (peak3 >= peak).all()


def test_a_lazy_crossing_reads_as_the_plain_one():
    """crossing.with_recomputes builds its columns on first read (crossing.Crossed): every column, of
    the crossing and of row subsets of it (an index, a mask, a subset of a subset), is what
    repeating the layouts and tiling the recompute rows gives."""
    from planner.evaluation.candidates import COLUMN_NAMES
    from planner.search.crossing import Crossed, with_recomputes
    p = problem(model_from_params(7e9), H100, 64, seq_len=4096, global_batch=256)
    lay = next(iter(candidate_blocks(p, SearchSpace())))
    lay = lay.take(np.arange(0, len(lay), 3))
    rec = np.array([[0, -1], [1, -1], [2, 5]])
    lazy = with_recomputes(lay, rec)
    assert isinstance(lazy, Crossed) and len(lazy) == 3 * len(lay)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(lazy), 200, replace=False))
    mask = rng.random(len(lazy)) < 0.3
    for sub, rows in ((lazy, np.arange(len(lazy))), (lazy.take(idx), idx),
                      (lazy.take(mask), np.flatnonzero(mask)),
                      (lazy.take(idx).take(np.arange(0, 200, 7)), idx[::7])):
        assert len(sub) == len(rows)
        for name in COLUMN_NAMES:
            if name == "recompute":
                expect = np.tile(rec[:, 0], len(lay))[rows]
            elif name == "recompute_layers":
                expect = np.tile(rec[:, 1], len(lay))[rows]
            else:
                expect = getattr(lay, name)[rows // 3]
            assert getattr(sub, name).tolist() == expect.tolist(), name
