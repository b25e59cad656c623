"""The moment of a stage's memory peak: which phase of the step, and what is live then.

A step runs, on each pipeline stage, the forwards of its in-flight micro-batches, their
backwards, then the optimizer. Allocated bytes at five moments (n = micro-batches in flight at
the stage's peak, A = one micro-batch's saved activations on the stage, S = persistent states):
- forward: the last in-flight micro-batch's last layer runs forward:
  S + n·A + forward working set + gathered parameters;
- loss (the stage with the output layer): the loss and its gradient run with every in-flight
  activation still held: S + n·A + the larger loss transient + the parameters gathered then
  (+ gradients accumulated across micro-batches from micro-batch 2 on);
- first backward: a layer's backward, its recomputation rebuilt: S + n·A + backward working set
  (the layer being recomputed and the activation gradients) + gathered parameters + the
  gradient buffers live then;
- later backward (m ≥ 2): as the first, with gradients that accumulate across micro-batches
  complete and min(n, m − 1) micro-batches in flight (1F1B refills to n between backwards while
  forwards remain; when m ≤ n none remain);
- optimizer step: S + the optimizer's temporaries.
Sources: Korthikanti et al. 2022 Sec. 4.2.3 (in-flight micro-batches); Narayanan et al. 2021
Sec. 2.2 (1F1B order); the framework terms are framework_memory.py's.
"""

from __future__ import annotations

import numpy as np

from planner.engine import allocator as alc
from planner.engine.arrays import FloatArray, Num, out

PHASES = ("forward", "loss", "first backward", "later backward", "optimizer step")
# device_ceiling's relative margin: its sums run in another order than phase_totals', and float
# sums of a dozen non-negative terms in two orders differ by a few units in the last place
# (~1e-15 relative); 1e-12 covers that a thousand times over (a bound, not a modelling constant).
CEILING_MARGIN = 1e-12


def phase_items(states: Num, activations_per_mb: Num, in_flight: Num, micro_batches: Num, *,
                forward_working: Num = 0.0, backward_working: Num = 0.0, loss: Num = 0.0,
                gathered_forward: Num = 0.0, gathered_at_loss: Num = 0.0,
                gathered_backward: Num = 0.0, grads_first: Num = 0.0,
                grads_accumulated: Num = 0.0, optimizer_temp: Num = 0.0,
                has_loss: Num = 1.0) -> dict[str, dict[str, Num]]:
    """What is allocated at each moment of PHASES, item by item (sums in the module docstring).

    Items: states, activations, working (forward or backward working set), loss (transient),
    gathered (sharded-DP parameters gathered), grads (gradient buffers live then), optimizer.
    `grads_first` is one layer's gradient buffers, `grads_accumulated` what accumulates across
    micro-batches. A later backward exists only for m ≥ 2, the loss moment only on the stage
    that runs the loss (`has_loss`); their items are 0 otherwise.
    """
    n = np.asarray(in_flight, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    a = np.asarray(activations_per_mb, dtype=float)
    later = np.asarray(m >= 2.0, dtype=float)
    acc = np.asarray(grads_accumulated, dtype=float)
    held = n * a
    h = np.asarray(has_loss, dtype=float)
    at = lambda f, v: f * np.asarray(v, dtype=float)  # noqa: E731
    # An item absent at a moment is the scalar 0.0 (it broadcasts; phase_totals skips it)
    raw = {
        "forward": dict(states=states, activations=held, working=forward_working, loss=0.0,
                        gathered=gathered_forward, grads=0.0, optimizer=0.0),
        "loss": dict(states=at(h, states), activations=at(h, held), working=0.0,
                     loss=at(h, loss), gathered=at(h, gathered_at_loss),
                     grads=at(h, later * acc), optimizer=0.0),
        "first backward": dict(states=states, activations=held, working=backward_working,
                               loss=0.0, gathered=gathered_backward, grads=grads_first,
                               optimizer=0.0),
        "later backward": dict(states=at(later, states),
                               activations=at(later, np.minimum(n, m - 1.0) * a),
                               working=at(later, backward_working), loss=0.0,
                               gathered=at(later, gathered_backward),
                               grads=at(later, acc + grads_first), optimizer=0.0),
        "optimizer step": dict(states=states, activations=0.0, working=0.0, loss=0.0,
                               gathered=0.0, grads=0.0, optimizer=optimizer_temp),
    }
    return {ph: {k: out(v) for k, v in items.items()} for ph, items in raw.items()}


def phase_totals(phases: dict[str, dict[str, Num]]) -> list[FloatArray]:
    """Allocated bytes at each moment of PHASES, in order: the sum of its items (an item that
    is the scalar 0 is skipped, adding it changes no sum), all of one shape."""
    sums = [sum((np.asarray(v, dtype=float) for v in phases[p].values()
                 if not (isinstance(v, float) and v == 0.0)), 0.0) for p in PHASES]
    shape = np.broadcast_shapes(*(np.shape(v) for v in sums))
    return [np.broadcast_to(v, shape) for v in sums]


def peak_of(phases: dict[str, dict[str, Num]], totals: list[FloatArray] | None = None
            ) -> tuple[Num, Num, dict[str, Num]]:
    """(peak bytes, index into PHASES of its moment, the items at that moment).

    Ties go to the earlier phase. `totals` is phase_totals(phases) where the caller has it.
    """
    stacked = np.stack(phase_totals(phases) if totals is None else totals)
    moment = stacked.argmax(axis=0)
    items = {k: out(np.choose(moment, [np.asarray(phases[p][k], dtype=float) for p in PHASES]))
             for k in phases[PHASES[0]]}
    return out(stacked.max(axis=0)), out(moment.astype(float)), items


def device_floor(states: Num, activations_per_mb: Num, in_flight: Num, working: Num,
                 *, share: Num, expandable: Num, context: Num, nccl: Num) -> Num:
    """A lower bound on a stage's device total from one moment every step reaches (the search
    takes the first backward, whose items no mask turns off): its allocated bytes S + n·A +
    W (W: what it holds besides the states and the activations), through
    allocator.reserved_bytes without the segment rounding, then allocator.device_total_bytes.

    Sound in floating point, not only in exact arithmetic: what it leaves out (rounding, the
    other phases of the max) is ≥ 0, its sums run in phase_totals' order, and every step is
    non-decreasing in its inputs (IEEE rounding is monotone), so the result never exceeds the
    exact device total (the search skips the five-phase model for layouts whose floor already
    exceeds usable memory)."""
    held = np.asarray(in_flight, dtype=float) * np.asarray(activations_per_mb, dtype=float)
    allocated = sum((np.asarray(v, dtype=float) for v in (states, held, working)), 0.0)
    steady = alc.steady_bytes(states, activations_per_mb, in_flight)
    reserved = alc.reserved_bytes(allocated, steady, 0.0, share=share, expandable=expandable)
    return alc.device_total_bytes(reserved, context, nccl)


def device_ceiling(states: Num, activations_per_mb: Num, in_flight: Num, transient: Num,
                   rounding: Num, *, share: Num, expandable: Num, context: Num, nccl: Num) -> Num:
    """An upper bound on a stage's device total (the max over PHASES that stage_memory takes):
    every moment allocates at most max(S, 0) + n·max(A, 0) + `transient` (computed by
    search.bound_terms.transient_ceiling: Σ over phase_items' items, the working sets, the loss,
    the gathered parameters, both gradient buffers and the optimizer's temporaries, of each one's
    largest over the moments, clipped at 0; each moment holds a subset, h and the
    later-backward mask at most 1, min(n, m − 1) ≤ n) with at most `rounding`; allocator.reserved_bytes is
    non-decreasing in both, then allocator.device_total_bytes, times (1 + CEILING_MARGIN) for
    the order of the sums. The search counts a layout whose ceiling is within usable memory as
    fitting without the five-phase model."""
    a = np.maximum(np.asarray(activations_per_mb, dtype=float), 0.0)
    # max(S, 0): a moment without the loss (h = 0) allocates 0, not S, where S < 0
    allocated = np.maximum(np.asarray(states, dtype=float), 0.0) \
        + np.asarray(in_flight, dtype=float) * a + transient
    # the same steady bytes as stage_memory's, so the fragmentation grows with `allocated` alone
    steady = alc.steady_bytes(states, activations_per_mb, in_flight)
    reserved = alc.reserved_bytes(allocated, steady, np.maximum(rounding, 0.0), share=share,
                                  expandable=expandable)
    return out(np.asarray(alc.device_total_bytes(reserved, context, nccl)) * (1.0 + CEILING_MARGIN))


def states_ceiling(states: Num, transient: Num, *, share: Num, expandable: Num) -> Num:
    """What a stage's states S and their transients T (≥ 0) add at most to device_ceiling:
    device_ceiling(S, A, n, T + T_a, r) ≤ device_ceiling(0, A, n, T_a, r) + this.
    allocator.reserved_bytes, a + r + share·(a − p)⁺, is subadditive in (a, p), as
    (x + y)⁺ ≤ x⁺ + y⁺, so the states' allocation (S⁺ + T, steady S) is reserved apart from the
    rest's; times (1 + CEILING_MARGIN), plus CEILING_MARGIN of |S| + T for the sum's rounding.
    Equal to the difference in exact arithmetic wherever the rest's churn is ≥ 0 (A ≥ 0)."""
    s = np.asarray(states, dtype=float)
    t = np.asarray(transient, dtype=float)
    reserved = alc.reserved_bytes(np.maximum(s, 0.0) + t, s, 0.0, share=share,
                                  expandable=expandable)
    return out(np.asarray(reserved) * (1.0 + CEILING_MARGIN) + CEILING_MARGIN * (np.abs(s) + t))
