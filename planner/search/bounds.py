"""The memory model's parts for a block of candidates, each on its distinct tuples
(distinct.Part): the search's floor and ceiling on every row's peak, and the exact memory of
only the rows it asks for (evaluate.memory, detail=False, bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

import numpy as np

from planner.evaluation.candidates import (IN_FLIGHT_COLUMNS, RECOMPUTE_COLUMNS, STATE_COLUMNS,
                                           Candidates, Problem, Shape, shape)
from planner.evaluation.distinct import (Part, _dense, _first_rows, crossed_part, distinct_part,
                                         distinct_rows, gather)
from planner.engine import peak as pk
from planner.evaluation.memory import stage_memory
from planner.search.bound_terms import rest_inputs, rest_terms, state_terms
from planner.evaluation.evaluate import (STAGES, STATE_ITEMS, Memory, StageMemory, _activation_part, _full,
                       _in_flight_part, _memory, _stage, _state_part)
from planner.evaluation.timing_terms import Groups
from planner.search.space import STATE_KNOBS


@dataclass(frozen=True, kw_only=True)
class MemoryParts:
    """What memory() computes once per distinct tuple (the states, the activations, the
    micro-batches in flight, as distinct.Part) for a block of candidates c: the floor of every
    row and the exact memory of only the rows a caller asks for (their shape computed then)."""

    c: Candidates
    states: Part
    acts: Part
    flight: Part
    # c is layouts crossed with this many recompute rows (row i·k + j, crossing.with_recomputes),
    # which the states and the micro-batches in flight do not read; 1: no such structure known
    crossed: int = 1
    # each layout's group where known (space.product: layouts alike but in their states share one)
    group: np.ndarray | None = None

    def floor(self, p: Problem) -> np.ndarray:
        """A lower bound on every row's peak, never above memory()'s: per stage the states'
        term plus the pair's (search.bound_terms), the largest over the stages a row has. On
        crossed rows with their layouts' groups known (a group at one recompute row is one
        pair) the states' terms are gathered once per layout, the pairs' once per group and
        recompute row: the same sums (tests/test_search_group_count.py)."""
        k, group = self.crossed, self.group
        if group is None or k == 1 or not len(group):
            return self._bound(p, None, False)
        count = int(group.max()) + 1
        first = np.zeros(count, dtype=np.int64)
        first[group] = np.arange(len(group), dtype=np.int64)  # a layout of each group
        # each group's rows (a group without a layout here: layout 0's, never read)
        rest = self._rest(p, (first[:, None] * k + np.arange(k)).reshape(-1), False)
        own = _per_layout(self.states, k, lambda t: state_terms(p, t, False))
        out = np.full((len(group), k), -np.inf)
        for key, v in rest.items():
            f = v.reshape(count, k).take(group, axis=0)
            f += np.broadcast_to(own[key], group.shape)[:, None]
            np.maximum(out, f, out=out)
        return out.reshape(-1)

    def ceiling(self, p: Problem, idx: np.ndarray) -> np.ndarray:
        """An upper bound on the peak of the rows idx, never below memory()'s: per stage the
        states' term plus the pair's (search.bound_terms), the largest over the stages."""
        return self._bound(p, idx, True)

    def _bound(self, p: Problem, idx: np.ndarray | None, ceiling: bool) -> np.ndarray:
        """The floor (or the ceiling) of the rows idx (None: every row)."""
        pair, rep = self._pairs(idx)
        rest = self._rest(p, rep, ceiling)
        own = self.states.rows(idx, pick=lambda t: state_terms(p, t, ceiling))
        n = len(self.c) if idx is None else len(idx)
        out = np.full(n, -np.inf)
        for key, v in rest.items():
            np.maximum(out, (v if pair is None else v.take(pair)) + own[key], out=out)
        return out

    def _pairs(self, idx: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """Each row of idx's (activations, in-flight) pair and a row of c of each pair: by
        the layouts' groups where known, else by the parts' tuples (None: each row its own)."""
        rows = np.arange(len(self.c), dtype=np.int64) if idx is None else idx
        k = self.crossed
        if self.group is not None and len(self.group) * k == len(self.c) and len(rows):
            found = _dense(self.group.take(rows // k) * k + rows % k,
                           (int(self.group.max()) + 1) * k)
        elif self.acts.index is not None and self.flight.index is not None and len(rows) > 1:
            got = distinct_rows([self.acts.index.take(rows), self.flight.index.take(rows)])
            assert got is not None  # no bound asked
            found = got[1], len(got[0])
        else:
            return None, rows
        return found[0], rows.take(_first_rows(*found))

    def _rest(self, p: Problem, rows: np.ndarray, ceiling: bool) -> dict[str, np.ndarray]:
        """bound_terms.rest_terms of the rows of c `rows`."""
        middle = columns_at(self.c, ("pp",), rows)[0] > 2
        acts = self.acts.rows(rows, pick=lambda t: rest_inputs(t["stages"], ceiling))
        return rest_terms(p, acts, self.flight.rows(rows), middle, ceiling)

    def states_memory(self, idx: np.ndarray) -> SimpleNamespace:
        """What the time model reads of the rows idx's memory (timing.step_seconds: the first
        stage's weights, gradients, optimizer state and parameters, the last stage's
        parameters), bit for bit as rows() gives them, without the five-phase model."""
        n = len(idx)
        first, last = self.states.rows(idx, pick=lambda t: (
            {k: t["first"][k] for k in ("weights", "gradients", "optimizer", "params")},
            t["last"]["params"]))
        return SimpleNamespace(first=SimpleNamespace(**{k: _full(v, n) for k, v in first.items()}),
                               last=SimpleNamespace(params=_full(last, n)))

    def rows(self, p: Problem, idx: np.ndarray | None = None, sub: Candidates | None = None
             ) -> tuple[Shape, dict, Memory]:
        """evaluate_memory(p, c.take(idx), detail=False), bit for bit, from the parts: (shape,
        the time model's per-mode layer bytes, memory) of the rows idx (None: every row);
        `sub` is c.take(idx) where the caller has it."""
        if sub is None:
            sub = self.c if idx is None else self.c.take(idx)
        x = shape(p, sub)
        ends = ("first", "last")
        acts = self.acts.rows(idx, pick=lambda t: {"stages": {k: t["stages"][k] for k in ends},
                                                   "per_mode": t["per_mode"]})
        return x, acts, _memory(p, x, self.states.rows(idx, pick=lambda t: {k: t[k] for k in ends}),
                                acts, self.flight.rows(idx, pick=lambda t: {k: t[k] for k in ends}),
                                False, {"middle": self._middle(p, x, idx)})

    def peak(self, p: Problem) -> np.ndarray:
        """rows(p)'s peak alone, bit for bit: each stage's device total (memory.stage_memory
        without the detail), the middle stage's only where there is one (PP > 2)."""
        x = shape(p, self.c)

        def total(stage: str, at: np.ndarray | None) -> np.ndarray:
            m = x.micro_batches
            v = stage_memory(p, p.fw, self.states.rows(at, pick=lambda t: t[stage]),
                             self.acts.rows(at, pick=lambda t: t["stages"][stage]),
                             self.flight.rows(at, pick=lambda t: t[stage]),
                             m if at is None else m.take(at), False)["device_total"]
            return _full(v, len(x.tp) if at is None else len(at))
        mid = np.flatnonzero(x.pp > 2)
        middle = np.zeros(len(x.tp))
        if len(mid):
            middle[mid] = total("middle", mid)
        return np.maximum(np.maximum(total("first", None), total("last", None)),
                          np.where(x.pp > 2, middle, 0.0))

    def _middle(self, p: Problem, x: Shape, idx: np.ndarray | None) -> StageMemory:
        """The middle stage (detail=False) of the rows idx, computed only where there is one
        (PP > 2) and 0 elsewhere, where memory() reads it only through has_middle."""
        n = len(x.tp)
        mid = np.flatnonzero(x.pp > 2)
        if not len(mid):  # what the spread below gives on no rows, without the stage model
            return StageMemory(**{k: np.zeros(n) for k in STATE_ITEMS + ("total", "reserved",
                                                                         "params")})
        at = mid if idx is None else np.asarray(idx).take(mid)
        # _stage reads the stage's m: only it is gathered
        m = _stage(p, x.micro_batches.take(mid),
                   self.states.rows(at, pick=lambda t: t["middle"]),
                   self.acts.rows(at, pick=lambda t: t["stages"]["middle"]),
                   self.flight.rows(at, pick=lambda t: t["middle"]), False)

        def spread(v: np.ndarray) -> np.ndarray:
            full = np.zeros(n)
            full[mid] = v
            return full
        return StageMemory(**{f.name: spread(v) for f in fields(StageMemory)
                              if (v := getattr(m, f.name)) is not None})

    def axis_groups(self, idx: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The rows idx grouped alike in AXIS_COLUMNS (timing_terms.communication), where the
        activations part is on distinct tuples: AXIS_COLUMNS are the ACTIVATION_COLUMNS with DP
        and EP, so a row's activation tuple with its DP and EP names its axis tuple."""
        if self.acts.index is None or (idx is not None and len(idx) < 2):
            return None
        # on a crossing, the layouts' columns at the rows idx (not built on every row first)
        dp, ep = (self.c.dp, self.c.ep) if idx is None else columns_at(self.c, ("dp", "ep"), idx)
        found = distinct_rows([self.acts.index if idx is None else self.acts.index.take(idx),
                               dp, ep])
        return None if found is None else (found[1], len(found[0]))

    def groups(self, idx: np.ndarray | None = None) -> Groups:
        """The rows idx grouped alike in the columns the time model's parts read (state, axis
        and activation tuples, timing_terms.Groups), as far as the parts know them."""
        act = None if self.acts.index is None else (
            self.acts.index if idx is None else self.acts.index.take(idx), self.acts.size)
        return Groups(state=self.state_groups(idx), axis=self.axis_groups(idx), act=act)

    def state_groups(self, idx: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The rows idx grouped alike in STATE_COLUMNS (timing_terms.communication), where the
        states part is on distinct tuples."""
        if self.states.index is None:
            return None
        return (self.states.index if idx is None else self.states.index.take(idx),
                self.states.size)

    def take(self, idx: np.ndarray, c: Candidates) -> "MemoryParts":
        """The parts of the rows idx, for candidates c alike to them in every column the states
        and the micro-batches in flight read (nothing recomputed, nothing gathered)."""
        return MemoryParts(c=c, states=self.states.take(idx), acts=self.acts.take(idx),
                           flight=self.flight.take(idx),
                           # a row's group (crossed = 1) is still its; a crossing's is not
                           group=None if self.group is None or self.crossed != 1
                           else self.group.take(idx))

    def with_acts(self, p: Problem, c: Candidates,
                  layer_groups: tuple[np.ndarray, int] | None = None,
                  alike: tuple[np.ndarray, int] | None = None) -> "MemoryParts":
        """The parts of c, rows alike to these but in the columns the activations alone read
        (a partial-recompute layer count): the states and the in-flight part kept. With
        `layer_groups` (c's rows grouped alike in LAYER_COLUMNS) the activations are computed
        on the rows, their layer bytes once per group; with `alike` (c's rows grouped alike
        in ACTIVATION_COLUMNS) once per group, without looking for the groups."""
        if layer_groups is not None:
            return MemoryParts(c=c, states=self.states, flight=self.flight,
                               acts=Part(tree=_activation_part(p, c, layer_groups), index=None,
                                         size=len(c)))
        return MemoryParts(c=c, states=self.states, flight=self.flight,
                           acts=distinct_part(c, p.activation_columns,
                                              lambda u: _activation_part(p, u), alike))


def columns_at(c: Candidates, names: tuple[str, ...], idx: np.ndarray) -> list[np.ndarray]:
    """c's columns `names` at the rows idx, the same values as getattr(c, name).take(idx); on
    a crossing (crossing.with_recomputes: each row's layout row `_at` in `_layouts`) a column
    not yet built is read from the layouts at those rows, without building it on every row."""
    d = c.__dict__
    at = d["_at"].take(idx) if "_at" in d and any(n not in d for n in names) else None
    return [getattr(c, n).take(idx) if at is None or n in d else
            getattr(d["_layouts"], n).take(at) for n in names]


def _per_layout(part: Part, k: int, pick: Any) -> Any:
    """part's tree (or `pick` of it) on the first of each k crossed rows, for a part that does
    not read the recompute rows (each layout's k rows share its tuple, whichever way
    distinct.crossed_part or distinct_part numbered them: equal columns, equal index)."""
    tree = part.tree if pick is None else pick(part.tree)
    if part.index is None:
        return tree if k == 1 else gather(tree, np.arange(0, part.size, k), part.size)
    return gather(tree, part.index[::k], part.size)


def memory_parts(p: Problem, c: Candidates, states: Part | None = None,
                 flight: Part | None = None, alike: tuple[np.ndarray, int] | None = None
                 ) -> MemoryParts:
    """The distinct-tuple parts of memory() for every candidate of c (MemoryParts); `states`
    and `flight` where the caller has them for rows alike to c's in STATE_COLUMNS and
    IN_FLIGHT_COLUMNS (the solved partial-recompute rows: their full-recompute rows'); `alike`
    (c's rows numbered alike in ACTIVATION_COLUMNS, the count) where the caller knows them."""
    return MemoryParts(
        c=c, states=states if states is not None else distinct_part(
            c, STATE_COLUMNS, lambda u: _state_part(p, u)),
        acts=distinct_part(c, p.activation_columns, lambda u: _activation_part(p, u), alike),
        flight=flight if flight is not None else distinct_part(
            c, IN_FLIGHT_COLUMNS, lambda u: _in_flight_part(p, u)))


def crossed_memory_parts(p: Problem, c: Candidates, layouts: Candidates, k: int,
                         groups: tuple[np.ndarray, int] | None = None) -> MemoryParts:
    """memory_parts(p, c) for c = layouts crossed with k recompute rows (crossing.with_recomputes):
    the states' and the micro-batches in flight's tuples, which no recompute knob changes, and
    the layer tuples of the activations found on the layouts (distinct.crossed_part). With
    `groups` (each layout's group, the count: layouts alike in every column but the states',
    space.product) the layer and in-flight tuples, which read no states column, are found on
    one layout per group, and the states' tuples on each layout's group's tuple of the other
    STATE_COLUMNS with its own states (space.STATE_KNOBS): five columns instead of them all."""
    number = first = None
    if groups is not None and len(layouts):
        number, count = _dense(*groups)
        first = _first_rows(number, count)

    def alike(names: tuple[str, ...], own: tuple[str, ...] = ()) -> tuple[np.ndarray, int] | None:
        if number is None or first is None or groups is None:
            return None
        found = distinct_rows([getattr(layouts, n).take(first) for n in names if n not in own])
        assert found is not None  # no bound asked
        if not own:
            return found[1].take(number), len(found[0])
        both = distinct_rows([found[1].take(number)] + [getattr(layouts, n) for n in own])
        assert both is not None
        return both[1], len(both[0])
    states = crossed_part(c, layouts, k, STATE_COLUMNS, lambda u: _state_part(p, u),
                          groups=alike(STATE_COLUMNS, STATE_KNOBS))
    return MemoryParts(
        crossed=k, group=None if groups is None else groups[0], c=c, states=states,
        acts=crossed_part(c, layouts, k, p.layer_columns, lambda u: _activation_part(p, u),
                          RECOMPUTE_COLUMNS, alike(p.layer_columns)),
        flight=crossed_part(c, layouts, k, IN_FLIGHT_COLUMNS, lambda u: _in_flight_part(p, u),
                            groups=alike(IN_FLIGHT_COLUMNS)))
