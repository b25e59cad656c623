"""MoE layer compute: the router, token permutation, and the experts as grouped GEMMs.

Per MoE layer and T tokens on a GPU (after the EP all-to-all each GPU computes the T·k token-expert
pairs routed to its E/EP experts; balanced routing assumed):
- router: one h × E GEMM per token, 2·T·h·E FLOPs, at the dense GEMM rate (it is tiny and
  memory-bound in practice, so its softmax/top-k traffic is counted with the permutation);
- permutation (dispatch sort and combine un-sort, Megatron's token dispatcher / torchtitan's
  generate_permute_indices): each of the T·k copies of an h-vector read and written once on
  the way in and once on the way out: 4·T·k·h·bytes of HBM traffic forward, the same backward;
- experts: 2·T·k·W_e FLOPs forward (W_e one expert's MLP weights), run as one grouped GEMM over
  the local experts at `grouped_fraction` of the dense rate (per-expert row counts are small
  and uneven; Megatron's --moe-grouped-gemm, torchtitan's grouped_mm), itself the profile's
  grouped-GEMM share × the expert GEMM's shape against the dense layer's (expert_shape_share).
Backward is twice the forward's FLOPs (Narayanan Eq. 3 convention).
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out
from planner.engine.compute import shape_efficiency


def router_flops(tokens: Num, hidden: Num, experts: Num) -> Num:
    """Forward router FLOPs: 2·T·h·E."""
    return out(2.0 * np.asarray(tokens, dtype=float) * hidden * np.asarray(experts, dtype=float))


def expert_flops(tokens: Num, top_k: Num, expert_params: Num) -> Num:
    """Forward expert FLOPs on this GPU: 2·T·k·W_e (T·k routed pairs, balanced)."""
    return out(2.0 * np.asarray(tokens, dtype=float) * top_k * np.asarray(expert_params, dtype=float))


def permute_bytes(tokens: Num, top_k: Num, hidden: Num, bytes_per_elem: Num = 2.0) -> Num:
    """Forward dispatch + combine HBM traffic: 4·T·k·h·bytes."""
    return out(4.0 * np.asarray(tokens, dtype=float) * top_k * hidden * bytes_per_elem)


def expert_shape_share(tokens: Num, top_k: Num, ep: Num, experts: Num, expert_width: Num,
                       dense_width: Num, half_width: Num, half_tokens: Num) -> Num:
    """The expert GEMM's rate over the dense layer's under one GEMM-shape model, n/(n + n½) per
    dimension (engine.compute.shape_efficiency): its sharded width one expert's FFN per expert-TP
    rank against h/TP, its rows the T·k·EP/E tokens each local expert gets against T."""
    per_expert = np.asarray(tokens, dtype=float) * top_k * np.asarray(ep, dtype=float) / experts
    return out(shape_efficiency(expert_width, half_width) / shape_efficiency(dense_width, half_width)
               * shape_efficiency(per_expert, half_tokens) / shape_efficiency(tokens, half_tokens))


def load_factor(ep: Num, imbalance: Num, capacity: Num) -> Num:
    """Routed rows on the busiest rank over the mean. A capacity factor c > 0 pads each expert's
    buffer to c × its mean share, dropping the rest (DeepSpeed-MoE: deepspeed 0.19.8
    moe/sharded_moe.py:152-158 _capacity = ⌈T/E · c⌉, the dispatch tensor E × capacity;
    Megatron-Core's moe_expert_capacity_factor with moe_pad_expert_input_to_capacity): c. Dropless,
    the stated imbalance where EP > 1; at EP 1 every expert is local and the rows sum to T·k
    however they are routed: 1."""
    ep_, cap = np.asarray(ep, dtype=float), np.asarray(capacity, dtype=float)
    return out(np.where(cap > 0, cap, np.where(ep_ > 1, imbalance, 1.0)))


def moe_layer_time(tokens: Num, hidden: Num, experts: Num, top_k: Num, expert_params: Num,
                   dense_rate: Num, grouped_fraction: Num, hbm_bytes_per_s: Num,
                   bytes_per_elem: Num = 2.0, load: Num = 1.0) -> tuple[Num, Num]:
    """(forward, backward) seconds of the MoE block's router + permutation + grouped experts,
    the last two on the busiest rank's `load` (load_factor) times the mean rows."""
    rate = np.asarray(dense_rate, dtype=float)
    t_router = np.asarray(router_flops(tokens, hidden, experts)) / rate
    t_perm = np.asarray(permute_bytes(tokens, top_k, hidden, bytes_per_elem)) / hbm_bytes_per_s
    t_exp = np.asarray(expert_flops(tokens, top_k, expert_params)) / (rate * grouped_fraction)
    t_perm, t_exp = load * t_perm, load * t_exp
    fwd = t_router + t_perm + t_exp
    return out(fwd), out(2.0 * (t_router + t_exp) + t_perm)
