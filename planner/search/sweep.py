"""`fit` over several GPU counts: one search per count, together bounded like one search."""

from __future__ import annotations

from typing import Any, Callable


def fit_counts(model: Any, hardware: Any, counts: list[int], *,
               progress: Callable[[int, int], None] | None = None, **kw: Any) -> list[Any]:
    """api.fit at each count (a single count also explains its winner and suggests what would
    fit); the searches together price at most blocks.price_limit layouts (MAX_PRICED_ALL with
    --all: every count's valid rows are kept), each getting what the counts before it left
    (blocks.SpaceTooLarge names the spent budget)."""
    from planner.search import blocks
    from planner.search.fit import fit

    one = len(counts) == 1
    results, left = [], blocks.price_limit(bool(kw.get("dominated")))
    for i, n in enumerate(counts):
        if progress is not None:
            progress(i, n)
        results.append(fit(model, hardware, n, suggest=one, explain=one, limit=left, **kw))
        searched = results[-1].search_result
        assert searched is not None  # fit() keeps its search
        left -= searched.priced
    return results
