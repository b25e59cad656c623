"""`fit` over several GPU counts: one search per count, together bounded like one search."""

from __future__ import annotations

from typing import Any, Callable

# fit's keywords that make its question (search.fit.fit_problem), all a sweep's counts share
PROBLEM_KEYS = ("seq_len", "global_batch", "precision", "optimizer", "budget", "space",
                "tuning", "objective", "framework")


def fit_counts(model: Any, hardware: Any, counts: list[int], *,
               progress: Callable[[int, int], None] | None = None, **kw: Any) -> list[Any]:
    """api.fit at each count (a single count also explains its winner and suggests what would
    fit); the searches together price at most blocks.price_limit layouts (MAX_PRICED_ALL with
    --all: every count's valid rows are kept). Several counts are all counted first (each
    count's structurally valid layouts, blocks.space_priced, no row built) and refused
    together before any is priced (blocks.SpaceTooLarge); each search then gets what the counts
    before it left."""
    from planner.search import blocks
    from planner.search.fit import fit

    one = len(counts) == 1
    dominated = bool(kw.get("dominated"))
    left = blocks.price_limit(dominated)
    if not one:
        blocks.check_priced(sweep_priced(model, hardware, counts, **kw), left, dominated,
                            counts=len(counts))
    results = []
    for i, n in enumerate(counts):
        if progress is not None:
            progress(i, n)
        results.append(fit(model, hardware, n, suggest=one, explain=one, limit=left, **kw))
        searched = results[-1].search_result
        assert searched is not None  # fit() keeps its search
        left -= searched.priced
    return results


def sweep_priced(model: Any, hardware: Any, counts: list[int], **kw: Any) -> int:
    """The structurally valid layouts the searches of every count price together (what
    fit_counts refuses over its bound), counted by arithmetic on the knob tables."""
    from planner.search import blocks
    from planner.search.fast import SearchSpace
    from planner.search.fit import fit_problem

    ask = {k: kw[k] for k in PROBLEM_KEYS if k in kw}
    space = ask.get("space", SearchSpace())
    return sum(blocks.space_priced(fit_problem(model, hardware, n, **ask), space)
               for n in counts)
