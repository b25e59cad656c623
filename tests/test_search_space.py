"""The complete search: what is enumerated, what is shown (Pareto-clean), partial recompute
solved, counts that add up, bounded batches, Meta's published layouts among the valid ones."""

from __future__ import annotations

import numpy as np
import pytest

from planner.api import fit, problem
from planner.candidates import RECOMPUTE_CODES
from planner.engine.pareto import dominated_by_any
from planner.evaluate import evaluate
from planner.rules import RULE_NAMES
from planner.search import SearchSpace, search
from planner.space import CHUNK_ROWS, candidate_batches, split_rows, recomputes, splits
from planner.specs.hardware import load_profile
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


def test_no_default_row_is_dominated_by_any_valid_layout(shown, every):
    top = shown.order[:10]
    assert len(top) == 10
    assert not dominated_by_any(_objectives(shown, top), _objectives(every, every.order)).any()
    # --all ranks every valid row (solved partial-recompute rows included); the default fewer
    assert every.valid == shown.valid
    assert len(every.order) == every.valid + every.solved > len(shown.order)


def test_no_two_rows_differ_only_in_a_knob_that_changes_nothing(shown):
    c, r, top = shown.candidates, shown.results, shown.order[:10]
    points = {(float(r.time.step[i]), float(r.memory.peak[i])) for i in top}
    assert len(points) == len(top)  # equal cost twice would be a no-op knob
    c = c.take(shown.order)
    assert not np.any((c.tp == 1) & (c.sp == 1))             # SP without TP
    assert not np.any((c.dp * c.cp == 1) & (c.zero > 0))     # ZeRO with nothing to shard
    assert not np.any((c.zero == 0) & (c.shard > 0))          # a shard group without ZeRO
    assert not np.any((c.pp == 1) & (c.chunks > 1))           # interleaving without PP
    assert shown.problem.flash and not np.any(c.recompute == RECOMPUTE_CODES["selective"])


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
    fewer = c.take(part[:50])
    fewer.recompute_layers = fewer.recompute_layers - 1
    ok = evaluate(p70, rows).memory
    short = evaluate(p70, fewer).memory
    assert (ok.peak <= ok.usable).all() and (short.peak > short.usable).all()


def test_context_parallel_crosses_nodes_and_tp_does_not(shown):
    c = shown.candidates.take(shown.order)
    assert (c.tp <= H100.scale_up.gpus_per_domain).all()
    assert np.any(c.tp * c.cp > H100.scale_up.gpus_per_domain)


def test_the_space_fills_every_candidates_column():
    import dataclasses

    from planner.candidates import Candidates
    from planner.space import COLUMNS
    assert sorted(COLUMNS) == sorted(f.name for f in dataclasses.fields(Candidates))


def test_batches_are_bounded_and_cover_every_split(p70):
    space = SearchSpace()
    rec = recomputes(p70, space)
    sizes = [len(split_rows(p70, space, s, rec)["tp"]) for s in splits(p70, space)]
    batches = [len(b) for b in candidate_batches(p70, space, rows=4096)]
    assert sum(batches) == sum(sizes)
    assert max(batches) < 4096 + max(sizes)
    assert CHUNK_ROWS >= 4096


def test_the_shown_rows_do_not_depend_on_the_batch_size(p70, shown, monkeypatch):
    import planner.space
    monkeypatch.setattr(planner.space, "CHUNK_ROWS", 5000)
    small = search(p70)

    def rows(res):
        c = res.candidates
        return [tuple(int(getattr(c, f)[i]) for f in planner.space.COLUMNS) for i in res.order]
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
