"""A hardware profile's [efficiency] section: how close real kernels and overlap get to the
datasheet, per GPU generation and software stack (fitted or measured, each value cited in the
profile TOML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Optional

from pydantic import Field

from planner.specs.provenance import Provenance
from planner.specs.records import FORBID


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """How close real kernels and overlap get to the datasheet, fitted once per GPU generation on
    published runs (Korthikanti et al. 2022 Table 5; Narayanan et al. SC21 Table 1; see
    planner/engine/compute.py)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    # GEMM half-efficiency points: n/(n + n½) of the matmul ceiling for hidden width per TP rank
    # (and head dim for unfused attention) and for tokens per micro-batch per CP rank.
    # Defaults = the A100 fit (a100-80g.toml [efficiency], `dtplan calibrate`); other
    # generations have no published end-to-end runs in the reference and borrow them.
    matmul_half_hidden: Annotated[float, Field(gt=0)] = 64.0
    matmul_half_tokens: Annotated[float, Field(gt=0)] = 64.0
    # Memory-bound traffic per layer as a multiple of the layer's stored activation bytes
    # (norms, GeLU/SwiGLU, dropout, residual adds, softmax read and write them).
    memory_passes: Annotated[float, Field(ge=0)] = 2.0
    # Share of tensor-parallel communication not hidden behind computation.
    tp_exposed_fraction: Annotated[float, Field(ge=0, le=1)] = 1.0
    # How much compute slows while an overlapped collective (DP reduction, ZeRO-3 gathers, the
    # CP ring, TP userbuffers) runs beside it: its kernels hold SMs and HBM bandwidth, so
    # compute c beside communication a lasts max(c + σ·a, a) (engine/overlap.py beside).
    overlap_slowdown: Annotated[float, Field(ge=0, lt=1)] = 0.189
    # Share of the SMs the expert-parallel all-to-all kernels hold while they run beside the
    # compute of a paired forward and backward chunk (engine/overlap.py paired_exposed).
    comm_sm_fraction: Annotated[float, Field(ge=0, lt=1)] = 20.0 / 132.0
    # Share of the isolated-GEMM ceiling (MAMF) a training step's GEMMs sustain: MAMF is a
    # best-of-sweep on an idle GPU; in a step, clocks sag under the power cap and GEMMs share L2
    # and HBM with the kernels around them.
    sustained_matmul_fraction: Annotated[float, Field(gt=0, le=1)] = 0.84
    # Share of the bf16 peak a fused (Flash) attention kernel reaches over forward + backward:
    # FlashAttention-2 reaches 50-73 % of A100 peak forward and less backward (Dao 2023, Fig. 4-6),
    # well below the GEMM ceiling the projections run at.
    flash_attention_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    # FlashAttention-3 (Hopper+; None: not available, FA2 runs) at long sequences, same measure.
    fa3_attention_fraction: Annotated[Optional[float], Field(gt=0, le=1)] = None
    # KV length (causal: the mean, s/2) at which a flash kernel reaches half its long-sequence
    # rate: short sequences leave the tile pipeline half empty (engine/attention.py).
    attention_half_seq: Annotated[float, Field(gt=0)] = 512.0
    # Measured max achievable fp8 matmul ÷ fp8 peak (MAMF table of stas00/ml-engineering
    # compute/accelerator/README.md); None: no fp8.
    fp8_matmul_ceiling_fraction: Annotated[Optional[float], Field(gt=0, le=1)] = None
    # A recipe's own measured ceiling (recipe name -> max achievable ÷ its peak) where a public
    # kernel benchmark of its GEMM exists (e.g. DeepGEMM's block-scaled fp8 on Hopper); absent,
    # the recipe runs at fp8_matmul_ceiling_fraction.
    recipe_ceiling_fractions: dict[str, float] = field(default_factory=dict)
    # MoE grouped GEMM (all local experts in one kernel) as a share of a dense GEMM's rate of the
    # same shape (engine.moe.expert_shape_share prices the shape: expert width, rows per expert):
    # the per-expert GEMMs are uneven and launched together.
    grouped_gemm_fraction: Annotated[float, Field(gt=0, le=1)] = 0.85
    # The software stack these constants describe, and the runs they were fitted on ("" = none:
    # the estimate prints the wide band, uncalibrated_band, with its reason).
    software_stack: str = ""
    calibrated_on: str = ""
    # In-sample spread per regime "framework/family" (data, tensor, pipeline): RMS of `dtplan
    # calibrate`'s residuals for that regime on this GPU, per cent: the search's near-tie
    # tolerance (evaluation/error_band.py ranking_band). Absent: layouts ordered by time alone.
    # The band printed on figures is the leave-one-family-out one (planner/data/error_bands.json).
    error_bands: dict[str, float] = field(default_factory=dict)
    # The band (per cent) printed for a regime without calibration runs on this profile: how far
    # dtplan's own uncalibrated constants disagree with each other, the MFU of one Llama-3-8B
    # layout across the bundled framework × H100 profiles spanning 37.6-58.7 % (a 44 % range
    # about its mean, issue #30), rounded up. Kind: judgement on dtplan's own outputs (no
    # measured run behind it), not fitted; a regime with runs prints its derived band instead.
    uncalibrated_band: Annotated[float, Field(gt=0, le=100)] = 45.0


# The runs the A100 generation's step-time constants were fitted on (`dtplan calibrate` prints
# them): a profile that carries a default to another GPU says so (kind judgement).
A100_FIT_DATA = ("Megatron-LM on Selene A100-80GB: Korthikanti et al. 2022 Table 5 and Sec. 6.3, "
                 "Narayanan et al. 2021 Table 1; torchtitan FSDP2 on 64 A100-80GB "
                 "(pytorch/torchtitan docs/performance.md)")
_CARRIED = ("the A100 fit carried to a GPU with no figure of its own (fitted on " + A100_FIT_DATA
            + ")")

# Kind and source of each default above, for a profile that does not set the key itself.
DEFAULT_PROVENANCE: dict[str, Provenance] = {
    "matmul_half_hidden": Provenance(kind="judgement", source=_CARRIED),
    "matmul_half_tokens": Provenance(kind="judgement", source=_CARRIED),
    "memory_passes": Provenance(kind="judgement", source=_CARRIED),
    "tp_exposed_fraction": Provenance(kind="judgement", source=(
        "no asynchronous TP assumed: the TP all-reduces / all-gathers block the GEMMs that "
        "need their output, as in Megatron-LM without --tp-comm-overlap")),
    "overlap_slowdown": Provenance(kind="kernel-benchmark", source=(
        "Lee et al. 2025, Characterizing Compute-Communication Overlap in GPU-Accelerated "
        "Distributed Deep Learning (arXiv 2507.03114), abstract: compute overlapped with "
        "communication runs 18.9% slower on average (at most 40.0%) than alone, GPT and Llama "
        "layers on 4 A100, H100, MI250 and MI210; one figure for every GPU until a "
        "per-generation one is measured")),
    "comm_sm_fraction": Provenance(kind="framework-source", source=(
        "20 of 132 SMs: DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 3.2.2, 20 of the "
        "H800's 132 SMs suffice for the all-to-all under DualPipe; the same 20 is Megatron-Core's "
        "DeepEP default (NVIDIA/Megatron-LM core_v0.15.3 megatron/core/transformer/"
        "transformer_config.py:212 moe_deepep_num_sms = 20). Other GPUs keep the 20-SM kernel "
        "over 132 SMs unless their profile says otherwise")),
    "sustained_matmul_fraction": Provenance(kind="judgement", source=_CARRIED),
    "flash_attention_fraction": Provenance(kind="judgement", source=(
        "FlashAttention-2 on A100 (Dao 2023, Fig. 4-6: 50-73 % of peak forward, less "
        "backward) carried to a GPU with no attention-kernel figure")),
    "attention_half_seq": Provenance(kind="judgement", source=(
        "the FlashAttention-2 A100 curve's shape (Dao 2023 Fig. 4: half rate near 512 keys) "
        "carried to a GPU with no attention-kernel figure")),
    "grouped_gemm_fraction": Provenance(kind="judgement", source=(
        "no public bf16 grouped-GEMM sweep by expert token count; MoE experts' uneven GEMMs "
        "taken at 85 % of dense GEMMs of the same shape (the shape priced apart)")),
    "uncalibrated_band": Provenance(kind="judgement", source=(
        "dtplan's own spread: one Llama-3-8B layout's MFU across the bundled framework x H100 "
        "profiles spans 37.6-58.7 % (44 % about its mean), rounded up; no measured run behind "
        "it")),
}
