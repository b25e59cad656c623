"""The [memory] table of a framework profile (planner.specs.framework): what in a framework's
implementation changes memory, each key read by engine/framework_memory.py and
evaluation/memory.py, each bundled value cited in the profile's TOML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import Field

from planner.specs.records import FORBID


@dataclass(frozen=True, kw_only=True)
class MemoryBehaviour:
    """What in a framework's implementation changes memory (engine/framework_memory.py)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID

    precision: Annotated[Literal["mixed", "mixed-fp32-grads", "fp8", "fp32", "bf16-pure"], Field(
        description="precision recipe this framework uses by default")]
    state_layout: Annotated[Literal["zero", "fsdp2"], Field(
        description="zero: 16-bit params + grads + fp32 optimizer, sharded by ZeRO "
                    "stage; fsdp2: fp32 params, grads and moments all sharded from "
                    "ZeRO 2, 16-bit copies gathered")] = "zero"
    grad_bytes: Annotated[float, Field(
        ge=0, le=4, description="bytes per gradient element kept for the optimizer under "
                                "16-bit mixed precision")] = 2.0
    accumulate_unsharded_grads_under_pp: Annotated[bool, Field(
        description="under PP a sharded stage accumulates unsharded gradients in the "
                    "reduce dtype until the last micro-batch")] = False
    reduce_in_flight: Annotated[float, Field(
        ge=0, le=4, description="reduce-scatter input buffers (reduce dtype, one block "
                                "each) live in backward")] = 1.0
    loss_forward_bytes: Annotated[float, Field(
        ge=0, description="bytes per logit element live while the loss runs forward")] = 6.0
    loss_backward_bytes: Annotated[float, Field(
        ge=0, description="bytes per logit element live while the loss runs backward")] = 6.0
    loss_forward_bytes_tp: Annotated[Optional[float], Field(
        ge=0, description="the same with the vocabulary split over TP (None: as without)")] = None
    loss_backward_bytes_tp: Annotated[Optional[float], Field(
        ge=0, description="the same in backward with the vocabulary split over TP")] = None
    loss_chunks: Annotated[int, Field(
        ge=1, le=4096, description="cross-entropy over this many token chunks: one chunk's "
                                   "upcast, log-softmax and gradient live at a time "
                                   "(engine/loss.py)")] = 1
    loss_whole_bytes: Annotated[float, Field(
        ge=0, description="bytes per logit element that stay whole when the loss is chunked "
                          "(torchtune keeps every chunk's bf16 logits: 2)")] = 0.0
    loss_accumulator_bytes: Annotated[float, Field(
        ge=0, description="bytes per hidden element of a [tokens, hidden] gradient buffer the "
                          "chunked loss keeps (torchtitan's GradAccumulator)")] = 0.0
    loss_fused_linear: Annotated[bool, Field(
        description="fused linear cross-entropy (Liger): the logits are never whole")] = False
    sp_saves_gathered_input: Annotated[bool, Field(
        description="under sequence parallel the all-gathered input of a "
                    "column-parallel matmul is saved for backward (else the shard, "
                    "re-gathered)")] = False
    fp8_weight_copies: Annotated[float, Field(
        ge=0, le=4, description="fp8 weight copies (1 byte each) cached between "
                                "micro-batches under fp8")] = 0.0
    fp8_params: Annotated[bool, Field(
        description="under fp8 the linears' weights are stored in fp8 alone (Megatron-Core "
                    "fp8_param_gather / TE fp8_model_init): no 16-bit copy, the row-wise "
                    "cached copy is the weight, the DP all-gather moves fp8")] = False
    fp8_activation_input: Annotated[bool, Field(
        description="under fp8 the MLP activation's saved input is stored in fp8 "
                    "(Megatron-Core activation_func_fp8_input_store)")] = False
    fp8_attention_saved: Annotated[bool, Field(
        description="under fp8 the fused attention runs in fp8 and saves its q, k, v in "
                    "fp8 (Transformer Engine fp8 DotProductAttention, FP8_DPA)")] = False
    lora_fused_qkv: Annotated[bool, Field(
        description="the attention's q, k, v projections are one fused linear (Megatron-Core "
                    "linear_qkv): a LoRA on them is one adapter, A r×h, B (q+k+v)×r")] = False
    fp8_saved_activations: Annotated[bool, Field(
        description="GEMM inputs saved for backward in fp8 under fp8 training")] = False
    cp_rotate: Annotated[Literal["none", "allgather", "alltoall"], Field(
        description="context parallel as torch's ring attention, all heads' K/V exchanged "
                    "by this collective: its working set (engine/ring_attention.py) and "
                    "traffic (engine/step_time.py cp_time_per_layer); none: Transformer "
                    "Engine's p2p ring of the KV heads")] = "none"
    cp_accum_bytes: Annotated[float, Field(
        ge=0, le=4, description="bytes per element of the ring's merged output and dQ/dK/dV "
                                "accumulators")] = 4.0
    optimizer_temp_bytes: Annotated[float, Field(
        ge=0, description="optimizer step temporaries per local optimizer parameter")] = 0.0
    max_live_params: Annotated[float, Field(
        ge=0, description="ZeRO-3 cap on gathered parameters")] = 1e9
    expandable_segments: Annotated[bool, Field(
        description="PYTORCH_CUDA_ALLOC_CONF expandable_segments:True by default")] = False
    optimizer_in_backward: Annotated[bool, Field(
        description="the framework can step the optimizer per parameter in backward, freeing "
                    "each gradient once applied (torchtune optimizer_in_bwd)")] = False
    offload_moves_gradients: Annotated[bool, Field(
        description="with the optimizer offloaded to CPU, the gradient partitions live in host "
                    "memory too (only the reduce buckets stay on the GPU)")] = False
    quantised_linear_saves_input: Annotated[bool, Field(
        description="a 4-bit base linear saves its input for backward although no weight "
                    "gradient needs it (bitsandbytes < 0.43.2 MatMul4Bit; fixed in 0.43.2)")] = False
    quantised_base_rest_fp32: Annotated[bool, Field(
        description="under a quantised base, the parameters left unquantised (embeddings, "
                    "output layer, norms) are cast to fp32 (HF PEFT "
                    "prepare_model_for_kbit_training)")] = False
    quantised_head: Annotated[bool, Field(
        description="under a quantised base the output layer is quantised too (Lightning "
                    "Fabric's BitsandbytesPrecision replaces every torch.nn.Linear)")] = False
    dequant_bytes: Annotated[float, Field(
        ge=0, le=8, description="bytes per parameter of a quantised linear's dequantised "
                                "copies live during its matmul (2: one bf16 copy)")] = 2.0
    previous_graph_held_in_forward: Annotated[bool, Field(
        description="the training loop keeps the previous micro-batch's logits, and through "
                    "them its autograd graph, until the next forward returns")] = False
    norm_saved_bytes: Annotated[Optional[float], Field(
        gt=0, le=8, description="bytes per element a norm saves of its input (None: the "
                                "activation width; 4: an RMSNorm that upcasts to fp32)")] = None
