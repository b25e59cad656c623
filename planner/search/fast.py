"""Search the complete layout space (planner.search.space), rank what fits, explain the rest:
planner.search.reference gives the same answer as plain loops over a small space.

Two stages per block of candidates: the structural rules over integer arrays for every
candidate (each rejection counted against the first rule it fails; on the layouts before the
recompute knob, which no structural rule reads, and a split that a split rule rejects is
counted without being built; under activation offload the whole host rule, evaluation.host,
read on its recompute rows; only the layouts that pass are built, blocks.passing_blocks, as
the grid they form, planner.search.grid, each with its group: the layouts alike but in their
ZeRO, sharding and offload states, on one of which the cost model finds the activation,
in-flight and step-floor tuples), then the cost model (planner.evaluation.evaluate) on the
survivors only: a sound floor on the peak (MemoryParts.floor, a states term plus a term of
each group at each recompute row, planner.search.bound_terms) rejects what cannot fit,
planner.search.settle decides the rest with a sound ceiling and the step time, running the
five-phase memory model only where the bounds leave it open (and for the closest miss and the
layouts to solve). Partial full-recompute rows get their layer count solved
(planner.search.partial). Only the rows that fit and that no other row beats on step time ×
peak memory × GPUs (a Pareto front, planner.search.pareto) are kept from block to block, so
memory stays bounded; `dominated=True` keeps every valid row instead (`dtplan fit --all`)."""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from planner.evaluation.candidates import COLUMN_NAMES, Candidates, Problem
from planner.evaluation import host
from planner.evaluation.distinct import Part, concat_parts, gather
from planner.search.pareto import pareto_front
# the ranking, read here as before it had its own module
from planner.search.ranking import RankedRows, ordered
from planner.evaluation.evaluate import Evaluation, evaluate, usable_bytes
from planner.search.bounds import MemoryParts, crossed_memory_parts
from planner.search.partial import known_stages, screen, solve, to_solve
from planner.search.settle import Anchors, beaten_by, settle
from planner.search.blocks import Block, Budget, first_failures, passing_blocks, price_limit
from planner.evaluation.rules import RULE_NAMES
from planner.search.crossing import materialize, with_recomputes
from planner.search.space import (BLOCK_ROWS, SCAN_DOUBLING, SCAN_GROWTH, SCAN_ROWS, SearchSpace,
                                  recomputes)

__all__ = ["OBJECTIVES", "SearchResult", "SearchSpace", "search"]

OBJECTIVES = ("time", "headroom", "cost", "gpus")
FITS = RULE_NAMES.index("fits-in-memory")
STRUCTURAL_RULES = tuple(i for i, n in enumerate(RULE_NAMES) if n != "fits-in-memory")
HOST = RULE_NAMES.index("fits-in-host-memory")
@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """The kept rows (valid ones, then one example per rejecting rule), their evaluation, the
    ranking and the counts over the whole space."""

    problem: Problem
    candidates: Candidates
    results: Evaluation
    order: np.ndarray          # indices of the valid rows shown, best first
    first_failure: np.ndarray  # per kept row: index into RULE_NAMES of the first failing rule, -1 if valid
    enumerated: int = 0        # candidates in the whole space
    valid: int = 0             # candidates passing every rule (dominated ones included)
    rejected: np.ndarray       # per rule: candidates it rejected first
    solved: int = 0            # partial-recompute layouts solved (not enumerated) that fit

    @property
    def priced(self) -> int:
        """Candidates the cost model priced: the structurally valid ones (those a structural
        rule rejected are counted, not priced)."""
        structural = int(self.rejected.sum() - self.rejected[FITS])
        return self.enumerated - structural


def _concat(parts: list[Candidates]) -> Candidates:
    return Candidates(**{f: np.concatenate([getattr(x, f) for x in parts])
                         for f in COLUMN_NAMES})


def _objectives(ev: Evaluation, gpus: int) -> np.ndarray:
    """(step time, peak memory, GPUs) per row: the three a shown layout must not lose on."""
    return np.stack([ev.time.step, ev.memory.peak, np.full(len(ev), float(gpus))], axis=1)


def _front(obj: np.ndarray) -> np.ndarray:
    """The rows no other beats on step time × peak × GPUs: search.pareto's exact front (no
    tolerance, so exact fronts merge block by block and narrowing the space never drops a
    faster row another row had pushed off)."""
    return pareto_front(obj)


@dataclass(kw_only=True)
class _Tally:
    """What one pass over the space accumulates: counts, one example per rule, kept rows (per
    block: the rows that fit, then its solved rows) and the layouts to solve at the end (block
    by block, with their per-stage memory where known and a floor on their peak)."""

    enumerated: int
    valid: int
    rejected: np.ndarray
    examples: dict[int, Candidates]
    closest: tuple[float, Candidates] | None
    kept: list[Candidates]
    solved: int = 0
    # (rows, per-stage memory or NaN, floor on the peak, states part, in-flight part, each
    # row's activation tuple numbered over the whole search or None, each row's layout group
    # numbered over the whole search)
    to_solve: list[tuple[Candidates, np.ndarray, np.ndarray, Part | None, Part | None,
                         np.ndarray | None, np.ndarray]] = field(default_factory=list)
    act_tuples: int = 0  # activation tuples numbered so far (to_solve's item 5)
    groups: int = 0      # layout groups numbered so far (to_solve's item 6)
    anchors: Anchors = field(default_factory=Anchors)  # surely fitting rows timed so far (settle)
    held: dict[int, int] = field(default_factory=dict)  # tuple rows of the parts kept for the solve
    scans: int = 0       # scans priced so far (the scan's size grows with them)


def _count_structural(p: Problem, t: _Tally, block: Block, rec: np.ndarray
                      ) -> tuple[Candidates, np.ndarray | None, np.ndarray]:
    """The structural rules on a block (blocks.passing_blocks: the layouts that pass, before
    the recompute knob, which no structural rule reads; `left`, the splits left out as none
    passes, counted by rule), each rejection counted against its first rule (`counts`, exact
    from blocks.verdicts), its first candidate the rule's example; the layouts that pass (`ok`
    of the block's, not yet crossed with their recompute rows) and, under activation offload,
    which of their recompute rows pass the whole host rule (evaluation.host.fits; None: all),
    its misses counted, the first in the space's order its example. Each row's first failing
    rule (blocks.first_failures, on the block's splits built up to the first where each rule
    not yet seen fails) is read only for a rule's example.
    Last, the survivors' groups (blocks.Block)."""
    survivors, left, counts, ok, whole, group = block
    for rule, rows, example in left:
        t.enumerated += rows
        t.rejected[rule] += rows
        if example is not None:
            t.examples.setdefault(rule, example)
    host_known = HOST in t.examples
    t.enumerated += len(ok) * len(rec)
    failing = np.flatnonzero(counts)
    t.rejected[failing] += counts[failing] * len(rec)
    new = [int(r) for r in failing if r not in t.examples]
    states_at = None  # the row (recompute rows counted) of the states' first host failure
    idx = np.flatnonzero(ok)
    if new:   # the block's first splits, up to the first where each new rule fails
        lay = whole(new)
        first = first_failures(p, lay, STRUCTURAL_RULES)
        for rule in new:
            t.examples[rule] = lay.take(np.flatnonzero(first == rule)[:1])
        if HOST in new:
            states_at = int(np.flatnonzero(first == HOST)[0]) * len(rec)
    if not p.tuning.activation_offload or not len(idx):
        return survivors, None, group
    crossed = with_recomputes(survivors, rec)
    fit = host.fits(p, crossed)
    t.rejected[HOST] += int((~fit).sum())
    if not host_known and not fit.all():
        j = int(np.flatnonzero(~fit)[0])
        if states_at is None or int(idx[j // len(rec)]) * len(rec) + j % len(rec) < states_at:
            t.examples[HOST] = materialize(crossed, np.array([j]))
    return survivors, fit, group


def _scan_blocks(p: Problem, pending: list[tuple[Candidates, np.ndarray | None, np.ndarray]],
                 rec: np.ndarray, t: _Tally, dominated: bool) -> None:
    """The cost model on the structural survivors of consecutive blocks (`lays`, each crossed
    here with the recompute rows `rec`, consecutive, and priced together: the model's fixed
    cost per call is paid once per SCAN_ROWS), keep what fits (planner.search.settle), partial
    recompute queued for solving; kept rows and layouts to solve recorded block by block, in
    the order a block-by-block scan gives them. Below the floor (MemoryParts.floor, never
    above the exact peak) a row cannot fit; the five-phase model runs, besides where settle
    needs it, for the misses that could be the closest one. Kept for the layouts partial
    recompute may solve: their floor, and their per-stage memory where it was computed
    (NaN elsewhere: the solve computes it for the layouts it solves). The rows the host rule
    refused (each block's mask from _count_structural, counted there) are not priced."""
    n_rec = len(rec)
    lays = [x for x, *_ in pending]
    lay = lays[0] if len(lays) == 1 else _concat(lays)
    ends = np.cumsum([len(x) * n_rec for x in lays])
    # None: the host rule refused no row (no block has a mask), no pass over every row for it
    host_ok = None if all(ok is None for _, ok, _ in pending) else np.concatenate(
        [np.ones(len(x) * n_rec, dtype=bool) if ok is None else ok for x, ok, _ in pending])
    surv = with_recomputes(lay, rec)
    groups = _groups_of(pending)
    parts = crossed_memory_parts(p, surv, lay, n_rec, groups)
    floor = parts.floor(p)
    slack = usable_bytes(p) - floor  # ≥ each row's exact headroom
    cand = np.flatnonzero(slack >= 0.0 if host_ok is None else (slack >= 0.0) & host_ok)
    rows = surv.take(cand)
    ex, mem, fit, kept = settle(p, parts, cand, rows, floor[cand], dominated, anchors=t.anchors)
    fits = np.zeros(len(surv), dtype=bool)
    fits[cand[fit]] = True
    t.rejected[FITS] += (len(surv) if host_ok is None else int(host_ok.sum())) - int(fit.sum())
    miss = ~(mem.peak <= mem.usable)
    # a row the host refused is no closest miss (+inf slack leaves it out there)
    _closest(p, t, surv, parts, slack if host_ok is None else np.where(host_ok, slack, np.inf),
             cand[ex[miss]], mem.headroom[miss])
    t.valid += int(fit.sum())
    base = to_solve(surv, fits, n_rec, host_ok)
    stages = known_stages(mem, cand[ex], base)
    for a, b in zip(_cuts(base, ends), _cuts(cand[kept], ends)):
        # kept as plain copies: a row subset of the lazy crossing holds the block's layouts
        t.to_solve.append((materialize(surv, base[a]), stages[:, a], floor[base[a]],
                           _shared(t, parts.states, base[a]), _shared(t, parts.flight, base[a]),
                           None if parts.acts.index is None else
                           parts.acts.index.take(base[a]) + t.act_tuples,
                           groups[0].take(base[a] // n_rec) + t.groups))
        t.kept.append(materialize(rows, kept[b]))
    t.act_tuples += parts.acts.size
    t.groups += groups[1]


def _groups_of(pending: list[tuple[Candidates, np.ndarray | None, np.ndarray]]
               ) -> tuple[np.ndarray, int]:
    """The layouts' groups of consecutive blocks as one numbering (each block's after the
    ones before it) and its count."""
    tops = np.cumsum([int(g.max()) + 1 if len(g) else 0 for *_, g in pending])
    return np.concatenate([g + (tops[i - 1] if i else 0) for i, (*_, g) in enumerate(pending)]), \
        int(tops[-1])


def _shared(t: _Tally, part: Part, idx: np.ndarray) -> Part | None:
    """The part of the rows idx, kept for the solve where it is on distinct tuples and the
    parts kept so far hold at most BLOCK_ROWS tuple rows (memory bounded); None elsewhere
    (the solve computes its own then). No rows: an empty part holding no tree, which
    concat_parts leaves out (the budget is not spent on it)."""
    if part.index is None:
        return None
    if not len(idx):
        return Part(tree=None, index=idx, size=0)
    if id(part.tree) not in t.held:
        if sum(t.held.values()) + part.size > BLOCK_ROWS:
            return None
        t.held[id(part.tree)] = part.size
    return part.take(idx)


def _cuts(rows: np.ndarray, ends: np.ndarray) -> list[slice]:
    """The sorted positions `rows` cut at the blocks' ends (one slice per block)."""
    at = np.concatenate([[0], np.searchsorted(rows, ends)])
    return [slice(int(a), int(b)) for a, b in zip(at[:-1], at[1:])]


def _closest(p: Problem, t: _Tally, surv: Candidates, parts: MemoryParts, slack: np.ndarray,
             miss: np.ndarray, headroom: np.ndarray) -> None:
    """The miss with the most headroom (the first of equals) into t.closest, exactly as if every
    row's memory were known: `miss` are the rows known not to fit (their `headroom`), the rows
    the floor rejected have headroom ≤ their `slack`, so only those whose slack reaches the best
    headroom known (this block's or an earlier one's) can be it, and only those are evaluated."""
    shut = ~(slack >= 0.0)  # NaN slack counts as rejected, as before
    if shut.any():
        best = max(float(headroom.max()) if len(headroom) else -np.inf,
                   t.closest[0] if t.closest is not None else -np.inf)
        if best == -np.inf:  # nothing known yet: the row with the most slack sets the bar
            rest = np.flatnonzero(shut)
            best = float(parts.rows(p, rest[[np.argmax(slack[rest])]])[2].headroom[0])
        extra = np.flatnonzero(shut & (slack >= best))
        if len(extra):  # else no floor reaches the best headroom known: nothing to evaluate
            both = np.concatenate([miss, extra])
            order = np.argsort(both, kind="stable")
            miss = both[order]
            headroom = np.concatenate([headroom, parts.rows(p, extra)[2].headroom])[order]
    if len(miss):
        j = int(np.argmax(headroom))
        if t.closest is None or headroom[j] > t.closest[0]:
            t.closest = (float(headroom[j]), materialize(surv, miss[[j]]))


@dataclass(frozen=True, kw_only=True)
class _Left:
    """A group's layouts left to solve (partial.screen): each one's block, the rows, their
    per-stage memory, states and in-flight parts, and activation tuples where known."""

    block: np.ndarray
    rows: Candidates
    mn: np.ndarray
    states: Part | None
    flight: Part | None
    tuples: np.ndarray | None


def _solve_all(p: Problem, t: _Tally, dominated: bool) -> list[Candidates]:
    """Every block's partial-recompute layouts solved, those that fit counted and kept (their
    exact front unless `dominated`), placed after their block's rows: the kept rows in the
    order a block-by-block solve gives. A group of blocks at a time (memory bounded), the
    layouts the anchors put off the front whatever count they get are only counted
    (partial.screen); then the rest, a few per group, are solved together, BLOCK_ROWS at a
    time (partial.solve: one evaluation for them all, not one per group)."""
    left: list[_Left] = []
    beaten = None if dominated else beaten_by(p, t.anchors)
    for group in _groups([len(e[0]) for e in t.to_solve]):
        block = np.concatenate([np.full(len(t.to_solve[i][0]), i) for i in group])
        rows = _concat([t.to_solve[i][0] for i in group])
        mn = np.concatenate([t.to_solve[i][1] for i in group], axis=1)
        # the states and in-flight parts are the full-recompute rows' (no recompute knob reads them)
        states = concat_parts([t.to_solve[i][3] for i in group])
        flight = concat_parts([t.to_solve[i][4] for i in group])
        alike = _alike(t, group)
        live, counted = screen(p, rows, mn, np.full(len(block), usable_bytes(p)), states,
                               flight, beaten, np.concatenate([t.to_solve[i][2] for i in group]),
                               alike, np.concatenate([t.to_solve[i][6] for i in group]))
        t.solved += counted
        left.append(_Left(block=block.take(live), rows=rows.take(live), mn=mn[:, live],
                          states=None if states is None else states.take(live),
                          flight=None if flight is None else flight.take(live),
                          tuples=None if alike is None else alike[0].take(live)))
    solved: dict[int, list[Candidates]] = {i: [] for i in range(len(t.to_solve))}
    for chunk in _groups([len(x.block) for x in left]):
        block = np.concatenate([left[i].block for i in chunk])
        if not len(block):
            continue
        tuples = [x for i in chunk if (x := left[i].tuples) is not None]
        rows, ok, parts, peak = solve(
            p, _concat([left[i].rows for i in chunk]),
            np.concatenate([left[i].mn for i in chunk], axis=1),
            np.full(len(block), usable_bytes(p)),
            concat_parts([left[i].states for i in chunk]),
            concat_parts([left[i].flight for i in chunk]),
            (np.concatenate(tuples), t.act_tuples) if len(tuples) == len(chunk) else None)
        # each solved row's exact peak is known: it is the floor and the ceiling as well
        fit, keep = settle(p, parts, np.arange(len(rows)), rows, peak, dominated,
                           anchors=t.anchors, peak=peak)[2:]
        t.solved += int(fit.sum())
        rows, block = rows.take(keep), block[ok][keep]
        for i in np.flatnonzero(np.bincount(block)):  # (np.unique would load numpy.ma)
            solved[int(i)].append(rows.take(np.flatnonzero(block == i)))
    return [r for i, kept in enumerate(t.kept)
            for r in [kept] + ([_concat(solved[i])] if solved[i] else [])]


def _alike(t: _Tally, group: list[int]) -> tuple[np.ndarray, int] | None:
    """The blocks' layouts to solve numbered by their activation tuple over the whole search
    (its count), None where a block's is not known."""
    idx = [x for i in group if (x := t.to_solve[i][5]) is not None]
    return (np.concatenate(idx), t.act_tuples) if len(idx) == len(group) else None


def _groups(sizes: list[int]) -> list[list[int]]:
    """Consecutive indices of `sizes` in groups of at most BLOCK_ROWS rows (or one index)."""
    out: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if out and total + n <= BLOCK_ROWS:
            out[-1].append(i)
            total += n
        else:
            out.append([i])
            total = n
    return out


def _scan_rows(t: _Tally) -> int:
    """Candidate rows a scan prices at least: SCAN_ROWS, doubled every SCAN_DOUBLING scans up
    to SCAN_GROWTH times (space.SCAN_ROWS says why)."""
    return SCAN_ROWS * min(SCAN_GROWTH, 2 ** (t.scans // SCAN_DOUBLING))


def search(p: Problem, space: SearchSpace = SearchSpace(), objective: str = "time", *,
           dominated: bool = False, limit: int | None = None) -> SearchResult:
    """The whole space, block by block; the valid rows ranked (Pareto-clean unless `dominated`),
    each rejection attributed to the first rule it fails. Over `limit` structurally valid
    candidates (None: blocks.price_limit) it is refused before any is built (SpaceTooLarge)."""
    asked, p = p, p.resolved()
    t = _Tally(enumerated=0, valid=0, rejected=np.zeros(len(RULE_NAMES), dtype=np.int64),
               examples={}, closest=None, kept=[])
    rec = recomputes(p, space)
    # structural survivors of blocks not yet priced, with their rows the host rule passes
    pending: list[tuple[Candidates, np.ndarray | None, np.ndarray]] = []
    for block in passing_blocks(p, space, price_limit(dominated) if limit is None else limit,
                                dominated):
        survivors, host_ok, group = _count_structural(p, t, block, rec)
        if len(survivors):
            pending.append((survivors, host_ok, group))
        # until some row surely fits (settle's anchors) a block is priced alone: its anchors
        # put most rows of the blocks after it off the front by their step floor alone
        # (keeping every valid row, `dominated`, uses no anchors: blocks merge from the first)
        alone = not dominated and not len(t.anchors.step)
        if sum(len(x) for x, *_ in pending) * len(rec) >= (1 if alone else _scan_rows(t)):
            _scan_blocks(p, pending, rec, t, dominated)
            t.scans += 1
            pending = []
    if pending:
        _scan_blocks(p, pending, rec, t, dominated)
    t.kept = _solve_all(p, t, dominated)
    kept = _concat(t.kept) if t.kept else Candidates(
        **{f: np.zeros(0, dtype=np.int64) for f in COLUMN_NAMES})
    if t.closest is not None:
        t.examples[FITS] = t.closest[1]
    rules = sorted(t.examples)
    cand = _concat([kept] + [t.examples[k] for k in rules])
    ev = evaluate(p, cand)  # once: a row's evaluation does not depend on the others
    n = len(kept)
    if n and not dominated:  # fronts of blocks → the front of the whole space
        ev_kept = gather(ev, np.arange(n), len(cand))
        front = np.flatnonzero(_front(_objectives(ev_kept, p.gpus)))
        shown = np.concatenate([front, np.arange(n, len(cand))])
        kept, cand, ev, n = kept.take(front), cand.take(shown), gather(ev, shown, len(cand)), \
            len(front)
    order = ordered(p, RankedRows.of(ev, np.arange(n)), kept, objective) if n \
        else np.zeros(0, int)
    first = np.concatenate([np.full(n, -1), np.array(rules, dtype=np.int64)])
    return SearchResult(problem=asked, candidates=cand, results=ev, order=order, first_failure=first,
                        enumerated=t.enumerated, valid=t.valid, rejected=t.rejected,
                        solved=t.solved)
