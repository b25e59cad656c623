"""A row's memory floor and ceiling as a states term plus a rest term (MemoryParts.floor and
.ceiling, the search's bounds on the peak).

A stage's states (its persistent bytes S, and their transients T) are one part of the memory
model, its activations (per micro-batch A, the working sets, their transients) and
micro-batches in flight n the others (planner.search.bounds). Each bound splits into a term of
the states' tuple and a term of the (activations, in-flight) pair, computed once per tuple
and pair, and a row's bound per stage is their sum (the largest over the stages it has):
- floor: the first backward (engine.peak.PHASES: a moment every step reaches, no mask turns
  its items off) allocates S + X + n·A + W, X the states' items it holds (the gathered
  parameters and one layer's gradient buffers) and W the backward working set; its reserved
  bytes, a + share·(a − steady)⁺ with steady = S + (n − 1)⁺·A (allocator), are at least
  (S + X) + device_floor at S = 0 (n·A + W, and its churn), as (x + y)⁺ ≥ y⁺ for x ≥ 0 (a
  negative X gives up share·X of it). Each term is less its share of FLOOR_MARGIN of the
  magnitudes summed (the float rounding of the dozen operations either way is a few 1e-16
  of them), so the sum never exceeds the exact peak. The first backward holds more than the
  forward (the gradient buffers, a larger working set): on DeepSeek-V3 on 2,048 H800 its
  bound leaves 1.11 M of the 5.1 M rows open where the forward's left 1.23 M, and the
  five-phase model runs on 63 K of them, not 195 K.
- ceiling: device_ceiling at S = 0 and T = 0 plus engine.peak.states_ceiling (S⁺ + T reserved
  apart: the allocator's reserved bytes are subadditive): never below device_ceiling on the
  row, equal in exact arithmetic where activations are ≥ 0, so never below the exact peak.
The search's rows are a few thousand pairs and tuples per scan of ~10⁵-10⁶ rows (a group of
layouts alike but in their states, space.product, at one recompute row is one pair), so a
bound costs a gather and an add per stage and row: DeepSeek-V3 on 2,048 H800
(benchmarks/fit_speed.py) floors its 5.1 M rows in 0.05 CPU s instead of 0.15.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import numpy as np

from planner.engine import peak as pk
from planner.evaluation.evaluate import STAGES
from planner.evaluation.memory import phase_inputs
from planner.evaluation.candidates import Problem

__all__ = ["FLOOR_MARGIN", "rest_inputs", "rest_terms", "state_terms", "transient_ceiling"]

# Relative margin on the floor: device_floor's float rounding, and that of S + G, is a few
# units in the last place of the magnitudes summed (~1e-16 each); 1e-12 covers it a thousand
# times over (a bound, not a modelling constant: as engine.peak.CEILING_MARGIN).
FLOOR_MARGIN = 1e-12


class _Absent(dict):
    """The other side's items for transient_ceiling: each 0 (the states' part holds none of
    the activations' items and back), the loss moment's mask at its largest (1)."""

    def __missing__(self, key: str) -> float:
        return 1.0 if key == "has_loss" else 0.0


def transient_ceiling(s: Any, a: Any) -> np.ndarray:
    """An upper bound on what any moment of engine.peak.PHASES allocates besides the states
    and the activations held, from a stage's stage_states s and stage_activations a (either
    None: the states' and the activations' parts are bounded apart, their sum bounds both):
    phase_items on memory_model.phase_inputs with the loss moment's mask and the later
    backward at their largest (1: each moment's item is its mask, 0 or 1, times what is
    computed here), then Σ over the items of the largest over the moments, clipped at 0.
    Derived from phase_items itself, so an item added there is in the ceiling too."""
    kw = phase_inputs(_Absent() if s is None else s, _Absent() if a is None else a)
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


def _allocator(p: Problem) -> dict[str, Any]:
    return dict(share=p.budget.fragmentation_fraction,
                expandable=p.fw.memory.expandable_segments)


def state_terms(p: Problem, states: dict, ceiling: bool) -> dict[str, Any]:
    """Per stage, the states' term of the floor (or, with `ceiling`, of the ceiling; module
    docstring) from the states part's tree (memory.stage_states per stage, on its tuples)."""
    out = {}
    for s in STAGES:
        held = np.asarray(states[s]["persistent"], dtype=float)
        if ceiling:
            out[s] = pk.states_ceiling(held, transient_ceiling(states[s], None), **_allocator(p))
            continue
        # the first backward's states items (memory.phase_inputs), less the churn they
        # would cancel were they < 0 (the largest share the allocator may use)
        x = np.asarray(states[s]["gathered"], dtype=float) + states[s]["grads_first"]
        v = held + x + p.budget.fragmentation_fraction * np.minimum(x, 0.0)
        out[s] = v - 3.0 * FLOOR_MARGIN * (np.abs(v) + np.abs(held) + np.abs(x))
    return out


def rest_inputs(acts: dict, ceiling: bool) -> dict[str, tuple]:
    """What rest_terms reads of the activations part's stages (memory.stage_activations per
    stage), on its tuples (the caller gathers them to the pairs): per stage the bytes per
    micro-batch, and the backward working set for the floor, or the activations' transient
    ceiling and their segment rounding (held and transient) for the ceiling."""
    def of(a: dict) -> tuple:
        if ceiling:
            return a["per_mb"], transient_ceiling(None, a), a["rounding"], a["rounding_transient"]
        return a["per_mb"], a["backward_working"]
    return {s: of(acts[s]) for s in STAGES}


def rest_terms(p: Problem, acts: dict[str, tuple], flight: dict, middle: np.ndarray,
               ceiling: bool) -> dict[str, np.ndarray]:
    """Per stage, the rest's term of the floor (or, with `ceiling`, of the ceiling; module
    docstring) of pairs, from their rest_inputs and micro-batches in flight; −inf for the
    middle stage where `middle` is False (PP ≤ 2: no such stage)."""
    b, fw = p.budget, p.fw
    keep_rounding = 0.0 if fw.memory.expandable_segments else 1.0
    total = dict(**_allocator(p), context=b.context_bytes, nccl=b.comm_buffer_bytes)
    out = {}
    for s in STAGES:
        n = flight[s]
        if ceiling:
            a, transient, gap, gap_t = acts[s]
            v = pk.device_ceiling(0.0, a, n, transient, (gap * n + gap_t) * keep_rounding,
                                  **total)
        else:
            a, w = acts[s]
            v = pk.device_floor(0.0, a, n, w, **total)
            v = v - 2.0 * FLOOR_MARGIN * (np.abs(v) + np.abs(n * a) + np.abs(w))
        out[s] = np.broadcast_to(np.where(middle, v, -np.inf) if s == "middle" else v,
                                 middle.shape)
    return out
