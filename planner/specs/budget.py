"""The memory a GPU holds besides tensors: a named, documented default for each reserve."""

from planner.specs.plain import Plain, record, spec

from planner.engine.allocator import FRAGMENTATION_SHARE
from planner.specs.reserves import MARGIN_SHARE


@record(frozen=True, config={"extra": "forbid", "frozen": True})
class MemoryBudget(Plain):
    """What the GPU holds besides tensors, each a named, documented default the user can change."""

    context_bytes: float = spec(1.0e9, ge=0, description="CUDA context and cuBLAS/cuDNN "
                                 "workspaces outside PyTorch's allocator: ~0.5-1 GB on Hopper")
    comm_buffer_bytes: float = spec(1.0e9, ge=0, description="NCCL's channel buffers, outside "
                                     "PyTorch's allocator (framework buckets are counted inside)")
    fragmentation_fraction: float = spec(FRAGMENTATION_SHARE, ge=0, le=1, description=
                                          "caching-allocator fragmentation, as a share of the "
                                          "bytes allocated and freed within a step (fitted)")
    margin_fraction: float = spec(MARGIN_SHARE, ge=0, lt=1, description="safety margin held back from "
                                   "capacity for spikes the model does not see")
