"""The memory a GPU holds besides tensors: a named, documented default for each reserve."""

from pydantic import BaseModel, ConfigDict, Field


class MemoryBudget(BaseModel):
    """What the GPU holds besides tensors, each a named, documented default the user can change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_bytes: float = Field(1.0e9, ge=0, description="CUDA context, cuBLAS/cuDNN workspaces "
                                 "and NCCL's own memory: ~0.5-1 GB on Hopper-class GPUs")
    comm_buffer_bytes: float = Field(1.0e9, ge=0, description="gradient-reduction and all-gather "
                                     "buckets and NCCL channel buffers")
    fragmentation_fraction: float = Field(0.08, ge=0, le=1, description="caching-allocator "
                                          "fragmentation, as a share of allocated tensors")
    margin_fraction: float = Field(0.05, ge=0, lt=1, description="safety margin held back from "
                                   "capacity for spikes the model does not see")
