"""The memory a GPU holds besides tensors: a named, documented default for each reserve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field

from planner.engine.allocator import FRAGMENTATION_SHARE
from planner.specs.records import FORBID
from planner.specs.reserves import HEADROOM_SHARE, MARGIN_SHARE


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
    min_headroom_fraction: Annotated[float, Field(ge=0, lt=1, description=(
        "headroom the search's #1 must leave, a share of its peak: the memory model's largest "
        "under-estimate of a measured peak (-6.6 %, calibration set); layouts under it are "
        "flagged and ranked after"))] = HEADROOM_SHARE
    min_headroom_bytes: Annotated[float, Field(ge=0, description=(
        "headroom the search's #1 must leave, GB (--min-headroom-gb; the larger of the two "
        "rules applies)"))] = 0.0

    def required_headroom(self, peak: Any) -> Any:
        """Headroom a ranked #1 must leave: max(min_headroom_bytes, min_headroom_fraction ×
        peak), elementwise over an array of peaks."""
        return np.maximum(self.min_headroom_bytes, self.min_headroom_fraction * np.asarray(peak, dtype=float))
