"""Recomputation as each framework defines it: what one checkpointed layer keeps for backward.

- Megatron "selective" (`--recompute-granularity selective`, core attention): Korthikanti
  Sec. 5, i.e. activations.layer_activation_terms with RECOMPUTE_SELECTIVE.
- torchtitan selective-op (`selective_ac_option = "op"`, torchtitan/distributed/
  activation_checkpoint.py and the 2024-12 parallelize_llama.py): each block runs under
  torch.utils.checkpoint with a policy that saves the outputs of every op in its save list
  (aten.mm, the SDPA kernels, aten.max) except every second mm, counting mms from 1 in each
  block's forward, and recomputes the rest. Between forward and backward a block therefore
  holds its input (the checkpoint input) and those outputs, not the tensors autograd would
  keep (the matmul inputs, norm outputs, SwiGLU products).
- torchtitan per-layer selective ("every N", `selective_ac_option = "N"`): every N-th block is
  fully checkpointed, the others keep everything (`full_recompute_layers` below).
- full: each block keeps its input only (activations.RECOMPUTE_FULL).

Regions as in activations.py: "seq" ÷t only with sequence parallel, "tp" ÷t, "kv" ÷min(t, k).
A row-parallel matmul's local output (attention output projection, MLP down projection) is the
partial sum over the whole local sequence before its all-reduce / reduce-scatter, so it is not
divided by t: region "full".
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out
from planner.engine.activations import Mlp

LSE_BYTES = 4.0  # flash / efficient SDPA return the fp32 log-sum-exp with the output

# (name, elements per token as a function of (h, a·d, k·d, f), region), in forward order.
_ATTENTION_MMS = (("wq", lambda h, q, kv, f: q, "tp"), ("wk", lambda h, q, kv, f: kv, "kv"),
                  ("wv", lambda h, q, kv, f: kv, "kv"), ("wo", lambda h, q, kv, f: h, "full"))
_MLP_MMS = {
    "swiglu": (("w1", lambda h, q, kv, f: f, "tp"), ("w3", lambda h, q, kv, f: f, "tp"),
               ("w2", lambda h, q, kv, f: h, "full")),
    "gelu": (("fc1", lambda h, q, kv, f: f, "tp"), ("fc2", lambda h, q, kv, f: h, "full")),
}


def op_sac_saved_mms(mlp: Mlp) -> list[str]:
    """The matmuls whose outputs torchtitan's op policy saves: the 1st, 3rd, 5th ... of a block.

    Llama (SwiGLU): wq, wk, wv, wo, w1, w3, w2 → saves wq, wv, w1, w2 and recomputes wk, wo, w3.
    """
    mms = _ATTENTION_MMS + _MLP_MMS[mlp]
    return [name for i, (name, _, _) in enumerate(mms, start=1) if i % 2 == 1]


def op_sac_terms(seq: Num, micro_batch: Num, hidden: Num, heads: Num, kv_heads: Num,
                 head_dim: Num, ffn: Num, *, mlp: Mlp = "swiglu", tp: Num = 1, sp: Num = 0,
                 cp: Num = 1, bytes_per_elem: Num = 2, mm_is_saved: bool = True
                 ) -> dict[str, Num]:
    """Bytes one block keeps per micro-batch under torchtitan's selective-op policy, per tensor.

    block input h·w (÷t with SP) + every odd mm's output + the SDPA output a·d·w and its fp32
    log-sum-exp 4a (÷t), on (s/c)·b local tokens. `mm_is_saved=False` is fp8 training through
    torchao's Float8Linear, whose GEMMs are aten._scaled_mm, not in the save list: only the
    block input and the SDPA outputs stay.
    """
    t = np.asarray(tp, dtype=float)
    tokens = np.asarray(seq, dtype=float) / np.asarray(cp, dtype=float) \
        * np.asarray(micro_batch, dtype=float)
    w = np.asarray(bytes_per_elem, dtype=float)
    h, a, k = (np.asarray(x, dtype=float) for x in (hidden, heads, kv_heads))
    d, f = np.asarray(head_dim, dtype=float), np.asarray(ffn, dtype=float)
    div = {"tp": t, "kv": np.minimum(t, k), "seq": np.where(np.asarray(sp) != 0, t, 1.0),
           "full": 1.0}
    terms: dict[str, Num] = {
        "block_input": tokens * h * w / div["seq"],
        "sdpa_out": tokens * a * d * w / t,
        "sdpa_lse": tokens * a * LSE_BYTES / t,
    }
    saved = set(op_sac_saved_mms(mlp)) if mm_is_saved else set()
    for name, elems, region in _ATTENTION_MMS + _MLP_MMS[mlp]:
        if name in saved:
            terms[f"{name}_out"] = tokens * elems(h, a * d, k * d, f) * w / div[region]
    shape = np.broadcast_shapes(*(np.shape(v) for v in terms.values()))
    return {n: out(np.broadcast_to(np.asarray(v, dtype=float), shape).astype(float))
            for n, v in terms.items()}


def op_sac_layer_bytes(terms: dict[str, Num]) -> Num:
    """Sum of op_sac_terms' terms: what one op-SAC block keeps for one micro-batch."""
    return out(sum(np.asarray(v, dtype=float) for v in terms.values()))


def every_nth_checkpointed(layers: Num, every: Num) -> Num:
    """Blocks torchtitan fully checkpoints with selective_ac_option = N: floor(layers / N).

    Its wrapper counts blocks from 1 and checkpoints those with count % N == 0 (N = 1: all).
    """
    return out(np.floor(np.asarray(layers, dtype=float) / np.maximum(np.asarray(every), 1)))
