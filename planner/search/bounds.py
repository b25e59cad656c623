"""The memory model's parts for a block of candidates, each on its distinct tuples
(distinct.Part): the search's floor and ceiling on every row's peak, and the exact memory of
only the rows it asks for (evaluate.memory, detail=False, bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import reduce
from types import SimpleNamespace
from typing import Any

import numpy as np

from planner.evaluation.candidates import (ACTIVATION_COLUMNS, IN_FLIGHT_COLUMNS, LAYER_COLUMNS,
                         RECOMPUTE_COLUMNS, STATE_COLUMNS, Candidates, Problem, Shape, shape)
from planner.evaluation.distinct import (Part, _dense, _first_rows, crossed_part, distinct_part,
                                         distinct_rows, gather)
from planner.engine import peak as pk
from planner.evaluation.memory import phase_inputs, stage_memory
from planner.evaluation.evaluate import (STAGES, STATE_ITEMS, Memory, StageMemory, _activation_part, _full,
                       _in_flight_part, _memory, _stage, _state_part)
from planner.evaluation.timing_terms import Groups
from planner.search.space import STATE_KNOBS


class _Absent(dict):
    """The other side's items for transient_ceiling: each 0 (the states' part holds none of
    the activations' items and back), the loss moment's mask at its largest (1)."""

    def __missing__(self, key: str) -> float:
        return 1.0 if key == "has_loss" else 0.0


def transient_ceiling(s: Any, a: Any) -> np.ndarray:
    """An upper bound on what any moment of engine.peak.PHASES allocates besides the states
    and the activations held, from a stage's stage_states s and stage_activations a (either
    side _Absent: the states' and the activations' parts are bounded apart, their sum bounds
    both): phase_items on memory_model.phase_inputs with the loss moment's mask and the later
    backward at their largest (1: each moment's item is its mask, 0 or 1, times what is
    computed here), then Σ over the items of the largest over the moments, clipped at 0.
    Derived from phase_items itself, so an item added there is in the ceiling too."""
    kw = phase_inputs(s, a)
    kw["has_loss"] = 1.0
    phases = pk.phase_items(0.0, 0.0, 0.0, 2.0, **kw)
    total: Any = 0.0
    for item in phases[pk.PHASES[0]]:
        if item in ("states", "activations"):
            continue
        # an item a moment does not hold is the scalar 0 (phase_items), which no max needs
        held = [v for v in (phases[ph][item] for ph in pk.PHASES)
                if not (isinstance(v, float) and v == 0.0)]
        if held:
            total = total + np.maximum(reduce(np.maximum, held), 0.0)
    return total


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
    # where the states' tuples were found by group: each group's (by its number in `group`) and
    # each states tuple's number of its tuple of the state columns but space.STATE_KNOBS
    state_keys: tuple[np.ndarray, np.ndarray] | None = None

    def floor(self, p: Problem) -> np.ndarray:
        """A lower bound on every row's peak (engine.peak.device_floor per stage, the largest
        of the stages a layout has): never above memory()'s peak. On crossed rows (`crossed`
        k > 1) the states' and in-flight terms are gathered once per layout, and the floor is
        computed one recompute row of every layout at a time: device_floor is elementwise, so
        each row's value is the one gathered row by row, bit for bit
        (tests/test_search_group_count.py)."""
        k = self.crossed
        n = len(self.c) // k
        per_stage = _per_layout(self.states, k, lambda t: {s: t[s]["persistent"] for s in STAGES})
        flight = _per_layout(self.flight, k, None)
        b, fw = p.budget, p.fw
        # PP of each layout (its first row's)
        pp = self.c.pp if k == 1 else columns_at(self.c, ("pp",), np.arange(0, n * k, k))[0]
        out = np.empty((n, k))
        for j in range(k):  # one recompute row of every layout at a time: 1-D, contiguous
            acts = self.acts.rows(None if k == 1 else np.arange(j, n * k, k), pick=lambda t: (
                {s: t["stages"][s]["per_mb"] for s in STAGES},
                t["stages"]["first"]["forward_working"]))
            floors = {s: pk.device_floor(per_stage[s], acts[0][s], flight[s], acts[1],
                                         share=b.fragmentation_fraction,
                                         expandable=fw.memory.expandable_segments,
                                         context=b.context_bytes, nccl=b.comm_buffer_bytes)
                      for s in STAGES}
            middle = np.where(pp > 2, floors["middle"], 0.0)
            out[:, j] = np.maximum(np.maximum(floors["first"], floors["last"]), middle)
        return out.reshape(-1)

    def ceiling(self, p: Problem, idx: np.ndarray) -> np.ndarray:
        """An upper bound on the peak of the rows idx (engine.peak.device_ceiling per stage, the
        largest of the stages a layout has): never below memory()'s peak. Its terms are summed
        once per distinct tuple (states, activations) and combined on the rows."""
        b, fw = p.budget, p.fw
        pp = columns_at(self.c, ("pp",), idx)[0]
        flight = self.flight.rows(idx)
        keep_rounding = 0.0 if fw.memory.expandable_segments else 1.0
        out = {}
        # every stage's terms gathered at once (one look-up of the rows' tuples per part)
        states = self.states.rows(idx, pick=lambda t: {k: (
            t[k]["persistent"], transient_ceiling(t[k], _Absent())) for k in STAGES})
        acts = self.acts.rows(idx, pick=lambda t: {k: (
            t["stages"][k]["per_mb"], transient_ceiling(_Absent(), t["stages"][k]),
            t["stages"][k]["rounding"], t["stages"][k]["rounding_transient"]) for k in STAGES})
        for k in STAGES:
            (s, ts), (a, ta, gap, gap_t) = states[k], acts[k]
            out[k] = pk.device_ceiling(s, a, flight[k], ts + ta,
                                       (gap * flight[k] + gap_t) * keep_rounding,
                                       share=b.fragmentation_fraction,
                                       expandable=fw.memory.expandable_segments,
                                       context=b.context_bytes, nccl=b.comm_buffer_bytes)
        middle = np.where(pp > 2, out["middle"], 0.0)
        return np.maximum(np.maximum(out["first"], out["last"]), middle)

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
                           flight=self.flight.take(idx))

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
                           acts=distinct_part(c, ACTIVATION_COLUMNS,
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
        acts=distinct_part(c, ACTIVATION_COLUMNS, lambda u: _activation_part(p, u), alike),
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
    keys: list[tuple[np.ndarray, np.ndarray]] = []

    def alike(names: tuple[str, ...], own: tuple[str, ...] = ()) -> tuple[np.ndarray, int] | None:
        if number is None or first is None or groups is None:
            return None
        found = distinct_rows([getattr(layouts, n).take(first) for n in names if n not in own])
        assert found is not None  # no bound asked
        if not own:
            return found[1].take(number), len(found[0])
        both = distinct_rows([found[1].take(number)] + [getattr(layouts, n) for n in own])
        assert both is not None
        by_group = np.full(groups[1], -1, dtype=np.int64)
        by_group[groups[0].take(first)] = found[1]
        keys.append((by_group, found[1].take(number.take(both[0]))))
        return both[1], len(both[0])
    states = crossed_part(c, layouts, k, STATE_COLUMNS, lambda u: _state_part(p, u),
                          groups=alike(STATE_COLUMNS, STATE_KNOBS))
    return MemoryParts(
        crossed=k, group=None if groups is None else groups[0], c=c, states=states,
        state_keys=keys[0] if keys and states.index is not None else None,
        acts=crossed_part(c, layouts, k, LAYER_COLUMNS, lambda u: _activation_part(p, u),
                          RECOMPUTE_COLUMNS, alike(LAYER_COLUMNS)),
        flight=crossed_part(c, layouts, k, IN_FLIGHT_COLUMNS, lambda u: _in_flight_part(p, u),
                            groups=alike(IN_FLIGHT_COLUMNS)))
