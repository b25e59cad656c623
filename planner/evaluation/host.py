"""Host memory a layout takes on one node, once: what `estimate`, both searches and the
fits-in-host-memory rule read.

Three parts, each per node (bytes):
- offloaded states: ZeRO-Offload/Infinity's optimizer states (and fp32 gradients, parameters);
- paged states: the moments a paged optimizer pages to the host;
- offloaded activations: CPU activation offload's saved tensors of the busiest GPU (the stage
  holding the most layers) times the GPUs a node holds, min(GPUs, GPUs per node) (a node's
  GPUs are one stage's: the pipeline is the outermost rank dimension).
Their sum must fit in the node's host memory less the profile's reserve (host.reserve_gb).

The states need only the layout's states knobs; the activations need its micro-batch and
recompute too. `state_fits` (states alone, a necessary condition: the activations are never
negative) is the structural rule the search applies before the recompute variants exist;
`fits` is the whole rule, which `evaluate` and the searches' memory phase apply.
"""

from __future__ import annotations

import numpy as np

from planner.engine.memory import PAGED_STATES, optimizer_bytes_per_param, paged_moment_bytes
from planner.evaluation import tuning as tun
from planner.evaluation.candidates import Candidates, Problem, shape
from planner.evaluation.distinct import on_distinct
from planner.evaluation.memory import layer_activation_views

PARTS = ("offloaded states", "paged states", "offloaded activations")

# fp32 gradient partition bytes per parameter in host memory where the framework moves the
# gradients with the optimizer (DeepSpeed's CPU fp32 partitions; FSDP2's CPUOffloadPolicy keeps
# gradients in the parameters' dtype, fp32 with a mixed-precision policy).
HOST_GRAD_BYTES = 4.0


def _dpcp(c: Candidates) -> np.ndarray:
    return c.dp * c.cp


def _shard(c: Candidates) -> np.ndarray:
    return np.where(c.shard > 0, c.shard, _dpcp(c))


def nodes(p: Problem) -> int:
    """The job's nodes: ⌈GPUs / GPUs per node⌉."""
    return -(-p.gpus // p.hardware.scale_up.gpus_per_node)


def limit(p: Problem) -> float:
    """A node's host memory less the profile's reserve (the OS, the training processes)."""
    return p.hardware.host.host_memory_bytes - p.hardware.host.reserve_bytes


def offloaded_state_bytes(p: Problem, c: Candidates) -> np.ndarray:
    """The whole job's host bytes of ZeRO-Offload/Infinity: every replica (DP·CP / shard group)
    holds the trained parameters' optimizer states (K bytes a parameter; under a frozen base,
    the adapters'), plus their fp32 gradients where the framework moves them (FrameworkProfile
    memory.offload_moves_gradients) and their weights (w bytes) under parameter offload. 0 for
    a paged optimizer (paged_host_bytes) and without offload."""
    if p.optimizer in PAGED_STATES:
        return 0.0 * c.offload_opt
    w_b, _, k_b = optimizer_bytes_per_param(p.precision, p.optimizer)
    grads = HOST_GRAD_BYTES if p.fw.memory.offload_moves_gradients else 0.0
    per_param = np.where(c.offload_opt > 0, k_b + grads, 0.0) + np.where(c.offload_par > 0, w_b, 0.0)
    return tun.trained_param_count(p) * per_param * _dpcp(c) / _shard(c)


def paged_host_bytes(p: Problem, c: Candidates) -> np.ndarray:
    """Per GPU (the job's mean): the moments a paged optimizer keeps in host memory where the
    layout pages them (offload_optimizer cpu; tuning.paged_fraction of them), each replica of
    the states one copy (ZeRO ≥ 1 shards them over the shard group, ZeRO-0 keeps one per DP·CP
    rank); 0 otherwise."""
    m_b = paged_moment_bytes(p.precision, p.optimizer) * tun.paged_fraction(p)
    replicas = np.where(c.zero >= 1, _dpcp(c) / _shard(c), _dpcp(c))
    return np.where(c.offload_opt > 0, tun.trained_param_count(p) * m_b * replicas / p.gpus, 0.0)


def activation_bytes_per_gpu(p: Problem, c: Candidates) -> np.ndarray:
    """Host bytes the busiest GPU's offloaded activations take (memory.offloaded_activation_
    bytes on the stage holding the most layers); 0 without activation offload."""
    if not p.tuning.activation_offload:
        return np.zeros(len(c))
    x = shape(p, c)
    layers = np.maximum(np.maximum(x.held_layers(0), x.held_layers(1)), x.held_layers(2))
    views = on_distinct(c, p.layer_columns, lambda u: layer_activation_views(p, u, p.fw))
    return np.asarray(tun.offloaded_activation_bytes(p, c, views, layers), dtype=float)


def parts_per_node(p: Problem, c: Candidates, activations: bool = True
                   ) -> dict[str, np.ndarray]:
    """PARTS → bytes on one node: the states spread evenly over the job's nodes, the
    activations the busiest GPU's times the GPUs of a node (0 without `activations`)."""
    n = nodes(p)
    acts = (activation_bytes_per_gpu(p, c) * min(p.gpus, p.hardware.scale_up.gpus_per_node)
            if activations else np.zeros(len(c)))
    return {"offloaded states": np.asarray(offloaded_state_bytes(p, c) / n, dtype=float),
            "paged states": np.asarray(paged_host_bytes(p, c) * p.gpus / n, dtype=float),
            "offloaded activations": acts}


def bytes_per_node(p: Problem, c: Candidates, activations: bool = True) -> np.ndarray:
    """The sum of parts_per_node: the host memory the layout takes on one node."""
    return np.asarray(sum(parts_per_node(p, c, activations).values()), dtype=float)


def state_fits(p: Problem, c: Candidates) -> np.ndarray:
    """The states alone fit the host (a necessary condition of `fits`)."""
    return bytes_per_node(p, c, activations=False) <= limit(p)


def fits(p: Problem, c: Candidates) -> np.ndarray:
    """The whole fits-in-host-memory rule: states and offloaded activations fit the host."""
    if not p.tuning.activation_offload:
        return state_fits(p, c)
    return bytes_per_node(p, c) <= limit(p)
