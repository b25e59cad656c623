"""PyTorch's CUDA caching allocator: from bytes the tensors allocate to bytes it reserves.

Three views of one GPU's memory (what `torch.cuda.max_memory_allocated`, `max_memory_reserved`
and nvidia-smi report):
- allocated: the tensors themselves, each rounded to the allocator's block size;
- reserved: the segments the allocator holds from cudaMalloc, i.e. allocated plus the rounding
  of segments and the fragmentation of cached-but-free blocks;
- device total: reserved plus what lives outside the allocator (CUDA context and library
  workspaces, NCCL's channel buffers).

Constants are PyTorch's (c10/cuda/CUDACachingAllocator.cpp, c10/core/AllocatorConfig.h):
requests round up to a multiple of 512 B; requests up to 1 MiB come from 2 MiB "small"
segments, 1-10 MiB requests from 20 MiB segments, larger ones get a segment of their own
rounded up to 2 MiB. With `expandable_segments:True` one segment per stream grows in 2 MiB
pages, so freed blocks coalesce and no block is stranded between segments.
"""

from __future__ import annotations

from functools import reduce
from typing import Sequence

import numpy as np

from planner.engine.arrays import Num, out

MIN_BLOCK = 512.0                  # kMinBlockSize
SMALL_SIZE = 1048576.0             # kSmallSize: largest "small" request
SMALL_BUFFER = 2097152.0           # kSmallBuffer: small-pool segment
LARGE_BUFFER = 20971520.0          # kLargeBuffer: segment for 1-10 MiB requests
MIN_LARGE_ALLOC = 10485760.0       # kMinLargeAlloc
ROUND_LARGE = 2097152.0            # kRoundLarge: large segments round up to 2 MiB
EXPANDABLE_PAGE = 2097152.0        # expandable segments map 2 MiB physical pages

# Fragmentation of the non-persistent (activation and transient) bytes without expandable
# segments: blocks freed in backward are split and re-used by differently sized requests, and a
# large request that no cached block fits makes a new segment. Nothing in the allocator's source
# fixes the share for a training step, so it is FITTED on the 18 max-reserved rows of
# calibration_modern.json (torchtitan, H100; two families: the 2024-12 benchmark tables, 10
# rows, and the Qwen3 32B configs of torchtitan #1690, 8), refitted once each saved tensor was
# rounded on its own (tensors_gap): on a 0.05 grid, leaving either family out, the other's
# least-squares share is 0.20 both times (held-out RMS 6.1 % / 3.5 %, worst -11.2 % / -6.0 %);
# over all 18 rows 0.20 gives median -0.7 %, worst -11.2 % (CP 8 405B, a CP effect no share
# fixes: 0.25 brings it to -8.7 % but the compiled 8B rows to +12.8 %). tests/
# test_memory_calibration.py prints each row. With expandable segments freed pages
# coalesce; what remains is page rounding (EXPANDABLE_PAGE per live segment, one per stream).
FRAGMENTATION_SHARE = 0.20
FRAGMENTATION_SHARE_EXPANDABLE = 0.0


def steady_bytes(states: Num, activations_per_mb: Num, in_flight: Num) -> Num:
    """Bytes that do not churn within a step: the states S plus the saved activations of all
    but one of the n micro-batches a pipeline stage keeps in flight, S + max(n − 1, 0)·A.

    In 1F1B (and its interleaved form) each forward allocates the same tensor sizes the
    backward just before it freed, so the caching allocator serves them from exactly fitting
    cached blocks (best fit within a size class, CUDACachingAllocator.cpp get_free_block): the
    blocks of earlier micro-batches are recycled whole, not split. What fragments is what one
    micro-batch's cycle allocates and frees (its activations, the working sets, gathered
    copies), so the fragmentation term does not grow with the depth of the pipeline. The
    fitted share's data (calibration_modern.json) has n = 1, where this is S as before; no
    measurement of a deep pipeline's max reserved says otherwise."""
    n = np.maximum(np.asarray(in_flight, dtype=float) - 1.0, 0.0)
    return out(np.asarray(states, dtype=float) + n * np.asarray(activations_per_mb, dtype=float))


def block_bytes(request: Num) -> Num:
    """Bytes the allocator hands out for one request: max(512, ceil(request/512)·512)."""
    r = np.asarray(request, dtype=float)
    return out(np.maximum(MIN_BLOCK, np.ceil(r / MIN_BLOCK) * MIN_BLOCK))


def segment_bytes(request: Num) -> Num:
    """Size of the cudaMalloc segment a request creates when no cached block fits.

    ≤ 1 MiB: a 2 MiB small segment; < 10 MiB: a 20 MiB segment; else ceil(request/2 MiB)·2 MiB.
    """
    r = np.asarray(block_bytes(request), dtype=float)
    large = np.ceil(r / ROUND_LARGE) * ROUND_LARGE
    return out(np.where(r <= SMALL_SIZE, SMALL_BUFFER,
                        np.where(r < MIN_LARGE_ALLOC, LARGE_BUFFER, large)))


def segment_gap(tensor_bytes: Num) -> Num:
    """Bytes one tensor of `tensor_bytes` strands: the gap to its segment's 2 MiB rounding when
    it gets a segment of its own (> 10 MiB), else its 512 B block rounding."""
    b = np.asarray(tensor_bytes, dtype=float)
    gap = np.where(b >= MIN_LARGE_ALLOC, np.asarray(segment_bytes(b)) - b,
                   np.asarray(block_bytes(b)) - b)
    return out(np.maximum(gap, 0.0))


def tensors_gap(tensors: Sequence[Num]) -> Num:
    """Bytes the allocator strands for these live tensors: each one's own segment_gap, summed
    (a tensor of whole 2 MiB pages strands nothing; rounding the average size instead would
    charge a gap no tensor has)."""
    return out(sum((np.asarray(segment_gap(t), dtype=float) for t in tensors),
                   np.asarray(0.0)))


def segment_rounding(tensor_bytes: Num, live_tensors: Num) -> Num:
    """Bytes lost to 2 MiB rounding of large segments: live_tensors × (segment − request).

    Each live tensor of `tensor_bytes` (> 10 MiB) that got its own segment wastes the gap to the
    next 2 MiB; smaller tensors share segments and lose at most their 512 B rounding.
    """
    return out(np.asarray(segment_gap(tensor_bytes)) * np.asarray(live_tensors, dtype=float))


def reserved_bytes(allocated: Num, persistent: Num, rounding: Num = 0.0, *,
                   share: Num = FRAGMENTATION_SHARE, expandable: Num = 0) -> Num:
    """Peak reserved bytes the step asks of the allocator: allocated + rounding + share ×
    (allocated − persistent).

    `persistent` is what does not churn within the step (steady_bytes: the weights, gradients
    and optimizer state, allocated once, and the activations of the micro-batches held in
    flight besides the one being worked on, recycled whole): it never fragments. The share defaults to FRAGMENTATION_SHARE; with
    expandable segments it is FRAGMENTATION_SHARE_EXPANDABLE. Not capped at the device: when the
    demand passes what the allocator may take, PyTorch frees its cached blocks and retries
    (release_cached_blocks) and raises OOM if that fails; the model cannot tell how much of the
    fragmentation such a retry recovers, so it reports the demand and lets the verdict reject it.
    """
    a = np.asarray(allocated, dtype=float)
    churn = np.maximum(a - np.asarray(persistent, dtype=float), 0.0)
    share = np.where(np.asarray(expandable) != 0, FRAGMENTATION_SHARE_EXPANDABLE,
                     np.asarray(share, dtype=float))
    return out(a + np.asarray(rounding, dtype=float) + share * churn)


def max_reserved_bytes(allocated: Sequence[Num], persistent: Num, rounding: Num,
                       live: Sequence[Num], *, share: Num = FRAGMENTATION_SHARE,
                       expandable: Num = 0) -> Num:
    """max over moments i of reserved_bytes(allocated_i, persistent, rounding·[live_i > 0]), the
    rounding counted at the moments whose `live` (their activations) is positive.

    reserved_bytes is non-decreasing in `allocated` (each of its operations is, IEEE rounding
    included), so its largest value over moments that share a rounding is its value at their
    largest allocation: one call with the rounding and one without, instead of one per moment,
    bit for bit the same max. A moment whose `live` is positive on some rows only joins each
    group on its own rows (−inf elsewhere, which no maximum picks)."""
    with_rounding: list[Num] = []
    without: list[Num] = []
    for a, act in zip(allocated, live):
        on = np.asarray(act) > 0
        if on.all():
            with_rounding.append(a)
        elif not on.any():
            without.append(a)
        else:
            with_rounding.append(np.where(on, a, -np.inf))
            without.append(np.where(on, -np.inf, a))
    kw = dict(share=share, expandable=expandable)
    peaks = ([reserved_bytes(reduce(np.maximum, with_rounding), persistent, rounding, **kw)]
             if with_rounding else []) + \
        ([reserved_bytes(reduce(np.maximum, without), persistent, 0.0, **kw)] if without else [])
    return out(reduce(np.maximum, peaks))


def device_total_bytes(reserved: Num, cuda_context: Num, nccl_buffers: Num) -> Num:
    """What nvidia-smi shows for the process: reserved + CUDA context + NCCL buffers."""
    return out(np.asarray(reserved, dtype=float) + cuda_context + nccl_buffers)
