"""The loss's peak on the last stage: the output layer's logits and cross-entropy, whole, in
token chunks, or fused with the output projection. Bytes per GPU; floats or arrays.

- Whole (Megatron `vocab_parallel_cross_entropy`, HF `ForCausalLMLoss`): every logit of the
  micro-batch is live with its fp32 upcast and log-softmax, T·V/t·B bytes (B the framework's
  bytes per logit element).
- Chunked: the cross-entropy runs over `chunks` token chunks, each upcast and differentiated on
  its own, so only one chunk's B bytes per logit are live, plus what stays whole: torchtune's
  CEWithChunkedOutputLoss keeps every chunk's bf16 logits (2 B; torchtune 0.6.1
  modules/loss/ce_chunked_output_loss.py, num_output_chunks=8); torchtitan's ChunkedLossWrapper
  runs the output layer per chunk too and keeps nothing whole but a [T, h] gradient accumulator
  (pytorch/torchtitan@b5bcd76 components/loss.py:501-560, num_chunks=8):
  T·V/t·(W + (B − W)/n) + T·h·A bytes (W whole bytes per logit, A the accumulator's bytes).
- Fused linear cross-entropy (Liger `LigerFusedLinearCrossEntropy`, liger-kernel 0.8.5
  ops/fused_linear_cross_entropy.py:51-140): the logits are never whole; a token chunk of
  ≈ T·h/V rows (chunk_size = next_pow2(ceil(T / ceil(V/h)))) is live at a time, and the
  gradient of the hidden states is computed in forward and held, T·h·2 bytes.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out


def loss_peak_bytes(tokens: Num, vocab_local: Num, hidden: Num, bytes_per_logit: Num, *,
                    chunks: Num = 1, whole_bytes: Num = 0.0, accumulator_bytes: Num = 0.0,
                    fused: bool = False) -> Num:
    """Peak bytes of the output logits and the loss for one micro-batch of `tokens` on a GPU
    holding `vocab_local` = V/t of the vocabulary (module docstring: whole, chunked, fused)."""
    t = np.asarray(tokens, dtype=float)
    v = np.asarray(vocab_local, dtype=float)
    h = np.asarray(hidden, dtype=float)
    b = np.asarray(bytes_per_logit, dtype=float)
    if fused:
        per_chunk = 2.0 ** np.ceil(np.log2(np.maximum(np.ceil(t / np.ceil(v / h)), 1.0)))
        return out(np.minimum(per_chunk, t) * v * b + t * h * 2.0)
    n = np.maximum(np.asarray(chunks, dtype=float), 1.0)
    w = np.minimum(np.asarray(whole_bytes, dtype=float), b)
    # the accumulator belongs to the chunking wrapper: held at any chunk count it runs with
    return out(t * v * (w + (b - w) / n) + t * h * np.asarray(accumulator_bytes, dtype=float))
