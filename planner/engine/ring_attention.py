"""Working memory of PyTorch's context-parallel ring attention, beyond the flash kernel's own.

torchtitan's context parallelism runs torch.distributed.tensor.experimental's ring attention
(torchtitan 9dec370 train.py:269-276, utils.py:171-193; pytorch/pytorch 0123248a
torch/distributed/tensor/experimental/_attention.py `_templated_ring_attention` and
`_templated_ring_attention_backward`, the same loops as the torch 2.6-era file with
`_RotateMethod.PRE_ALL_GATHER`). Per layer and GPU, with E = local query tokens × local heads ×
head dim (the K and V it is given are torchtitan's repeat_kv output: all heads ÷ TP, not the KV
heads), w the activation width and a the accumulation width (`_ContextParallelOptions.
convert_to_f32 = True`: fp32, 4 bytes), counted at the second ring step, where most is live:

- the rotated K|V: all-gather (`_AllGatherRotater`, torch's default `rotate_method` and
  torchtitan's "allgather") holds all c ranks' K|V from the first step to the last, c·2wE; an
  all-to-all ring (`_AllToAllRotater`) the received K|V and the arriving one, 2·2wE;
- the step's K|V concatenated for the exchange (`torch.cat`, made at every step): 2wE;
- forward: `_SDPAMerger` keeps the running output in fp32 (aE); merging a step's output casts it
  to fp32 (aE) and builds two out-sized temporaries: 4aE;
- backward: dQ accumulated in fp32 (aE); dK|dV in fp32 rotate by all-to-all whatever the method
  (`dkv_rotater`): the accumulators the step adds into, their concatenation being sent and the
  one arriving, 3·2aE: 7aE.
Forward E·(kv + 2w + 4a), backward E·(kv + 2w + 7a). The per-step flash outputs (out and lse;
dQ, dK, dV in w) are what the kernel writes without CP too. The saved tensors are the local q,
k, v, out and lse as without CP (the ring runs below autograd, inside the op's dispatch), so
nothing here is kept per micro-batch: it is a working set while one layer runs. Without CP
(c = 1) the ring does not run: 0.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import numpy as np

from planner.engine.arrays import Num, out

Rotate: TypeAlias = Literal["none", "allgather", "alltoall"]
ROTATE_METHODS: tuple[Rotate, ...] = ("none", "allgather", "alltoall")


def ring_attention_working(tokens: Num, heads: Num, head_dim: Num, cp: Num, *, rotate: Rotate,
                           width: Num = 2.0, accum_bytes: Num = 4.0) -> tuple[Num, Num]:
    """(forward, backward) bytes of one layer's ring attention beyond the flash kernel's own.

    E = tokens·heads·head_dim (tokens on this rank, heads on this rank); kv = c·2w for
    all-gather, 2·2w for all-to-all; forward E·(kv + 2w + 4a), backward E·(kv + 2w + 7a)
    (module docstring); 0 where c = 1 or the framework's CP is not this ring ("none").
    E.g. 32768 tokens, 16 heads, d 128, c = 8, all-gather, bf16: E = 2^26, backward
    2^26·(32 + 4 + 28) = 64·2^26 B = 4 GiB.
    """
    if rotate not in ROTATE_METHODS:
        raise ValueError(f"rotate must be one of {ROTATE_METHODS}, not {rotate!r}")
    c = np.asarray(cp, dtype=float)
    w = np.asarray(width, dtype=float)
    a = np.asarray(accum_bytes, dtype=float)
    e = np.asarray(tokens, dtype=float) * np.asarray(heads, dtype=float) \
        * np.asarray(head_dim, dtype=float)
    kv = c * 2.0 * w if rotate == "allgather" else 2.0 * 2.0 * w
    on = np.where((c > 1) & (rotate != "none"), 1.0, 0.0)
    return out(on * e * (kv + 2.0 * w + 4.0 * a)), out(on * e * (kv + 2.0 * w + 7.0 * a))
