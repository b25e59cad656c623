"""Collective communication volumes and the α–β time model.

Bytes each GPU sends (and receives) in a ring collective over n ranks for a message of M bytes
are nccl-tests' "bus bandwidth" factors (NVIDIA/nccl-tests doc/PERFORMANCE.md):
all-reduce 2(n−1)/n·M, all-gather and reduce-scatter (n−1)/n·M (M = the full array), all-to-all
(n−1)/n·M. Time = steps·α + bytes/β (Hockney's latency–bandwidth model).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

# Bytes moved per GPU as a multiple of the message, and ring steps, as functions of n.
_FACTOR = {
    "all-reduce": lambda n: 2.0 * (n - 1.0) / n,
    "all-gather": lambda n: (n - 1.0) / n,
    "reduce-scatter": lambda n: (n - 1.0) / n,
    "all-to-all": lambda n: (n - 1.0) / n,
    "send-recv": lambda n: np.ones_like(n),
}
_STEPS = {
    "all-reduce": lambda n: 2.0 * (n - 1.0),
    "all-gather": lambda n: n - 1.0,
    "reduce-scatter": lambda n: n - 1.0,
    "all-to-all": lambda n: n - 1.0,
    "send-recv": lambda n: np.ones_like(n),
}
COLLECTIVES = tuple(_FACTOR)


def bytes_per_gpu(kind: str, message_bytes: Num, n: Num) -> Num:
    """Bytes each GPU moves in a ring `kind` over n ranks (n = 1 moves nothing)."""
    n = np.asarray(n, dtype=float)
    return out(np.asarray(message_bytes, dtype=float) * np.where(n > 1, _FACTOR[kind](n), 0.0))


def ring_steps(kind: str, n: Num) -> Num:
    """Latency-bound steps of a ring `kind`: 2(n−1) for all-reduce, n−1 for the others."""
    n = np.asarray(n, dtype=float)
    return out(np.where(n > 1, _STEPS[kind](n), 0.0))


def alpha_beta_time(bytes_moved: Num, bandwidth_bytes_per_s: Num, steps: Num = 0.0,
                    latency_s: Num = 0.0) -> Num:
    """Time = steps·α + bytes/β, α the per-step latency and β the link bandwidth."""
    return out(np.asarray(steps, dtype=float) * latency_s
               + np.asarray(bytes_moved, dtype=float) / bandwidth_bytes_per_s)


def collective_time(kind: str, message_bytes: Num, n: Num, bandwidth_bytes_per_s: Num,
                    latency_s: Num = 0.0) -> Num:
    """α–β time of one ring collective: ring_steps·α + bytes_per_gpu/β."""
    return alpha_beta_time(bytes_per_gpu(kind, message_bytes, n), bandwidth_bytes_per_s,
                           ring_steps(kind, n), latency_s)
