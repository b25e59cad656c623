"""The memory a GPU holds besides tensors: a named, documented default for each reserve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import Field

from planner.engine.allocator import FRAGMENTATION_SHARE
from planner.specs.records import FORBID
from planner.specs.reserves import MARGIN_SHARE


@dataclass(frozen=True, kw_only=True)
class MemoryBudget:
    """What the GPU holds besides tensors, each a named, documented default the user can change."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    context_bytes: Annotated[float, Field(ge=0, description=(
        "CUDA context and cuBLAS/cuDNN workspaces outside PyTorch's allocator: ~0.5-1 GB on "
        "Hopper"))] = 1.0e9
    comm_buffer_bytes: Annotated[float, Field(ge=0, description=(
        "NCCL's channel buffers, outside PyTorch's allocator (framework buckets are counted "
        "inside)"))] = 1.0e9
    fragmentation_fraction: Annotated[float, Field(ge=0, le=1, description=(
        "caching-allocator fragmentation, as a share of the bytes allocated and freed within a "
        "step (fitted)"))] = FRAGMENTATION_SHARE
    margin_fraction: Annotated[float, Field(ge=0, lt=1, description=(
        "safety margin held back from capacity for spikes the model does not see"))] = MARGIN_SHARE
