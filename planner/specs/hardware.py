"""Hardware profiles: GPU, NVLink (scale-up), network (scale-out), host and storage.

Profiles live as TOML files in the ``hardware_profiles`` package, in human units (GB, TB/s,
Gb/s, µs); the models here hold SI units (bytes, bytes/s, FLOP/s, s). Every bundled value cites
its source in a comment (a public datasheet, nccl-tests or MAMF table, or "assumption: …").

Unit conventions: bandwidths are decimal (1 GB/s = 1e9 B/s, 1 Gb/s = 1e9/8 B/s, 1 TB/s =
1e12 B/s) as in the vendors' datasheets. Memory capacities (``memory_gb``,
``host_memory_gb``) are read as GiB (2^30 bytes), because HBM and DRAM are sold in binary
sizes (an "80 GB" H100 has 80 GiB).
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Optional

from pydantic import AfterValidator, Field

from planner.specs.efficiency import Efficiency
from planner.specs.provenance import Provenance
from planner.specs.records import FORBID

DEFAULT_PROFILE = "h100"

GB = 1e9
GIB = float(2**30)
TB = 1e12
GBIT = 1e9 / 8.0
TFLOP = 1e12
US = 1e-6

# Precisions a profile may list under peak_tflops.
# "mxfp8": block-scaled fp8 where its rate differs from plain fp8 (RTX Blackwell runs MXFP8 with
# fp32 accumulation at twice the plain-fp8 rate); absent, MXFP8 runs at the fp8 peak.
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8", "fp6", "fp4", "int8")


def _peaks(v: dict[str, float]) -> dict[str, float]:
    """peak_flops must hold bf16 and only known precisions, each a positive finite number."""
    if "bf16" not in v:
        raise ValueError("must include bf16")
    for k, x in v.items():
        if k not in PRECISIONS:
            raise ValueError(f"unknown precision {k!r}; allowed: {', '.join(PRECISIONS)}")
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{k} must be a positive number")
    return v


Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]   # a share in (0, 1]


@dataclass(frozen=True, kw_only=True)
class GPUSpec:
    """One accelerator: memory, HBM bandwidth, dense peak FLOP/s by precision, power."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    name: str
    memory_bytes: Positive
    hbm_bytes_per_s: Positive
    peak_flops: Annotated[dict[str, float], AfterValidator(_peaks)]
    power_w: Positive
    # Measured max achievable bf16 matmul FLOP/s ÷ bf16 peak (stas00's MAMF); a ceiling for MFU.
    matmul_ceiling_fraction: Fraction
    # Low-precision training recipes the tensor cores run natively (engine.fp8.NAMES; empty:
    # no fp8). Hopper has no MX / NVFP4 tensor cores, Ada and Hopper no block-scaled MMA,
    # Ampere no fp8 (TE quantization.py:148-188 checks; research/finetune fp8.md §3).
    fp8_recipes: tuple[str, ...] = ()
    # Per-tensor fp8 GEMMs take either operand layout (compute capability >= 10: Transformer
    # Engine v2.2.1 pytorch/utils.py:253-257), so TE's Float8Tensor keeps no transposed copy
    # (tensor/float8_tensor.py:435-440); Hopper and Ada need the transpose.
    fp8_any_layout: bool = False

    @property
    def matmul_ceiling_flops(self) -> float:
        """Achievable dense bf16 matmul FLOP/s (peak × measured fraction)."""
        return self.peak_flops["bf16"] * self.matmul_ceiling_fraction


@dataclass(frozen=True, kw_only=True)
class ScaleUp:
    """NVLink-class domain: per-GPU unidirectional bandwidth, per-step latency, efficiency."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    gpus_per_domain: Annotated[int, Field(ge=1)]
    gpus_per_node: Annotated[int, Field(ge=1)]
    bandwidth_bytes_per_s: Positive
    latency_s: NonNegative
    # Achieved nccl-tests busbw ÷ link bandwidth (busbw as nccl-tests doc/PERFORMANCE.md
    # defines it; measured figures in stas00/ml-engineering network/README.md).
    bus_efficiency: Fraction
    # NVLink SHARP (in-switch reduction, Hopper+ NVSwitch): NCCL's NVLS / NVLS-Tree all-reduce
    # reduce-scatters inside the domain and crosses the network with 1/k of the data.
    nvls: bool = False
    # nccl-tests busbw of NVLS (in-switch reduction) all-reduce ÷ link bandwidth, capped at 1
    # (measured above the wire on 8x H100 / H200); None: as bus_efficiency. Prices the NVLink
    # half of NCCL's NVLS-Tree; rings keep bus_efficiency.
    nvls_bus_efficiency: Optional[Fraction] = None


@dataclass(frozen=True, kw_only=True)
class ScaleOut:
    """Inter-node network: NIC bandwidth per GPU (one direction), latency, efficiency."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    nic_bytes_per_s: Positive
    latency_s: NonNegative
    bus_efficiency: Fraction
    oversubscription: Annotated[float, Field(ge=1)] = 1.0
    pod_gpus: Annotated[Optional[int], Field(ge=1)] = None


# host.reserve_gb where a profile does not set it: the host memory a node keeps for the OS and
# the training processes themselves, which the fits-in-host-memory rule leaves out.
HOST_RESERVE_GB = 16.0
HOST_RESERVE_PROVENANCE = Provenance(kind="judgement", source=(
    "no public per-node figure: the OS and each rank's own process (interpreter, CUDA and NCCL "
    "libraries, data-loader workers) hold host memory besides offloaded tensors; 16 GiB a node"))


@dataclass(frozen=True, kw_only=True)
class Host:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    pcie_bytes_per_s: Positive
    host_memory_bytes: Positive
    nvme_bytes_per_s: Positive
    # host memory offloaded tensors may not use (host.reserve_gb)
    reserve_bytes: NonNegative = HOST_RESERVE_GB * GIB


@dataclass(frozen=True, kw_only=True)
class Storage:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    write_bytes_per_s: Positive
    read_bytes_per_s: Positive


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID
    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    gpu: GPUSpec
    scale_up: ScaleUp
    scale_out: ScaleOut
    host: Host
    storage: Storage
    efficiency: Efficiency = Efficiency()
    notes: str = ""
    source_file: Optional[str] = None
    # Kind and source of each efficiency constant the profile file sets, keyed "section.key"
    # (specs/constants.py lists them with the defaults' own).
    provenance: dict[str, Provenance] = dataclasses.field(default_factory=dict)
