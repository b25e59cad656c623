"""The pipeline schedule of one optimizer step as timed blocks, for the review's timeline chart.

No formula of its own beyond the schedule's order: its idle share agrees with
``engine.pipeline.bubble_fraction`` (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InputError


@dataclass(frozen=True)
class Block:
    """One forward or backward pass of one micro-batch through one model chunk on one stage."""

    stage: int
    micro_batch: int
    chunk: int
    kind: str          # "F" or "B"
    start: float
    end: float


def pipeline_timeline(p: int, m: int, v: int = 1, schedule: str = "1f1b", *,
                      forward: float = 1.0, backward: float = 2.0) -> list[Block]:
    """The schedule of one optimizer step on ``p`` stages with ``m`` micro-batches (``v`` chunks
    per stage when interleaved), as start/end times in units of one full-stage forward.

    Each stage runs its passes in the schedule's order; a pass starts when its stage is free
    and its input is ready (the previous virtual stage's forward, the next one's backward).
    Orders (Narayanan et al., SC21, Sec. 2.2, and Megatron-LM's ``schedules.py``):
    GPipe runs all forwards, then all backwards; 1F1B runs p−i−1 warm-up forwards on stage i,
    then alternates one forward and one backward; interleaved 1F1B takes micro-batches in groups
    of p per chunk, with (p−i−1)·2 + (v−1)·p warm-up forwards. A chunk's pass takes 1/v of the
    stage's. The idle share of p × makespan is (p−1)/(v·m + p−1) (tested).
    """
    for name, x in (("stages", p), ("micro-batches", m), ("chunks", v)):
        if int(x) != x or x < 1:
            raise InputError(name, f"must be a whole number >= 1, got {x}")
    p, m, v = int(p), int(m), int(v)
    if schedule != "interleaved":
        v = 1
    elif m % p:
        raise InputError("micro-batches", f"the interleaved schedule needs a multiple of p = {p}, "
                                          f"got {m}")
    t_f, t_b = forward / v, backward / v
    n = m * v
    # k-th forward on a stage: micro-batch group k // (p·v), chunk (k // p) % v
    fwd = [((k // (p * v)) * p + k % p, (k // p) % v) for k in range(n)]
    bwd = [(mb, v - 1 - c) for mb, c in fwd]
    orders = []
    for d in range(p):
        if schedule == "gpipe":
            seq = [("F", x) for x in fwd] + [("B", x) for x in bwd]
        else:
            warm = min((p - d - 1) * 2 + (v - 1) * p if v > 1 else p - d - 1, n)
            seq = [("F", x) for x in fwd[:warm]]
            for i in range(warm, n):
                seq += [("F", fwd[i]), ("B", bwd[i - warm])]
            seq += [("B", x) for x in bwd[n - warm:]]
        orders.append(seq)
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    pos = [0] * p
    blocks: list[Block] = []
    total = sum(len(s) for s in orders)
    while len(blocks) < total:
        moved = False
        for d in range(p):
            while pos[d] < len(orders[d]):
                kind, (mb, chunk) = orders[d][pos[d]]
                vs = chunk * p + d                      # virtual stage
                if kind == "F":
                    dep = ("F", vs - 1, mb) if vs > 0 else None
                else:
                    dep = ("B", vs + 1, mb) if vs < p * v - 1 else ("F", vs, mb)
                if dep is not None and dep not in done:
                    break
                start = max(free[d], done[dep] if dep else 0.0)
                end = start + (t_f if kind == "F" else t_b)
                done[(kind, vs, mb)] = free[d] = end
                blocks.append(Block(d, mb, chunk, kind, start, end))
                pos[d] += 1
                moved = True
        if not moved:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError("pipeline schedule deadlocked")
    return blocks


def timeline_bubble(blocks: list[Block]) -> float:
    """Idle share of (stages × makespan) in a timeline."""
    stages = 1 + max(b.stage for b in blocks)
    span = max(b.end for b in blocks) - min(b.start for b in blocks)
    busy = sum(b.end - b.start for b in blocks)
    return 1.0 - busy / (stages * span)
