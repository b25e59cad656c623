"""The moment of a stage's memory peak: which phase of the step, and what is live then.

A step runs, on each pipeline stage, the forwards of its in-flight micro-batches, their
backwards, then the optimizer. Allocated bytes at four moments (n = micro-batches in flight at
the stage's peak, A = one micro-batch's saved activations on the stage, S = persistent states):
- forward: the last in-flight micro-batch's forward ends (on the last stage: with the loss):
  S + n·A + forward working set + gathered parameters + loss forward transient;
- first backward: S + n·A + loss backward transient + backward working set (the layer being
  recomputed and the activation gradients) + gathered parameters + the gradients live then;
- later backward (m ≥ 2): as the first, with gradients that accumulate across micro-batches
  complete and min(n, m − 1) micro-batches in flight (1F1B refills to n between backwards while
  forwards remain; when m ≤ n none remain);
- optimizer step: S + the optimizer's temporaries.
Sources: Korthikanti et al. 2022 Sec. 4.2.3 (in-flight micro-batches); Narayanan et al. 2021
Sec. 2.2 (1F1B order); the framework terms are framework_memory.py's.
"""

from __future__ import annotations

import numpy as np

from ._array import Num, out

PHASES = ("forward", "first backward", "later backward", "optimizer step")


def phase_bytes(states: Num, activations_per_mb: Num, in_flight: Num, micro_batches: Num, *,
                forward_working: Num = 0.0, backward_working: Num = 0.0,
                loss_forward: Num = 0.0, loss_backward: Num = 0.0, gathered_forward: Num = 0.0,
                gathered_backward: Num = 0.0, grads_first: Num = 0.0, grads_later: Num = 0.0,
                optimizer_temp: Num = 0.0) -> dict[str, Num]:
    """Allocated bytes at each moment of PHASES (see the module docstring for each sum)."""
    s = np.asarray(states, dtype=float)
    a = np.asarray(activations_per_mb, dtype=float)
    n = np.asarray(in_flight, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    later_n = np.minimum(n, m - 1.0)
    bwd_common = s + np.asarray(loss_backward) + np.asarray(backward_working) \
        + np.asarray(gathered_backward)
    phases = {
        "forward": s + n * a + np.asarray(forward_working) + np.asarray(gathered_forward)
        + np.asarray(loss_forward),
        "first backward": bwd_common + n * a + np.asarray(grads_first),
        "later backward": np.where(m >= 2.0, bwd_common + later_n * a + np.asarray(grads_later),
                                   0.0),
        "optimizer step": s + np.asarray(optimizer_temp),
    }
    shape = np.broadcast_shapes(*(np.shape(v) for v in phases.values()))
    return {k: out(np.broadcast_to(np.asarray(v, dtype=float), shape).astype(float))
            for k, v in phases.items()}


def peak_of(phases: dict[str, Num]) -> tuple[Num, Num]:
    """(peak bytes, index into PHASES of the moment it happens); ties go to the earlier phase."""
    stack = np.stack([np.asarray(phases[p], dtype=float) for p in PHASES])
    return out(stack.max(axis=0)), out(stack.argmax(axis=0).astype(float))


def in_flight_at_later_backward(in_flight: Num, micro_batches: Num) -> Num:
    """Micro-batches in flight at a backward once gradients are complete: min(n, m − 1)."""
    return out(np.minimum(np.asarray(in_flight, dtype=float),
                          np.asarray(micro_batches, dtype=float) - 1.0))


def loss_bytes(tokens: Num, vocab_local: Num, bytes_per_logit: Num) -> Num:
    """A loss transient: tokens × V/t × bytes per logit element.

    Megatron's vocab-parallel cross-entropy: forward 2 (bf16 logits) + 4 (fp32 copy turned into
    the softmax in place); backward works in place on the saved softmax: 4 + 2 for the bf16
    gradient into the output layer. torchtitan's cross_entropy(pred.float()): forward 2 + 4 + 4
    (bf16 logits, fp32 copy, log-softmax output); backward 4 + 4 + 4 (saved log-softmax, its
    incoming gradient, the gradient it returns), the bf16 logits having been deleted.
    """
    return out(np.asarray(tokens, dtype=float) * np.asarray(vocab_local, dtype=float)
               * np.asarray(bytes_per_logit, dtype=float))
