"""The plan-file schema (pydantic): the sections of a proposed training configuration, each
mapping validated with ``extra="forbid"`` and strict types (planner.resolve.plan_file reads and checks files
against it; ``dtplan schema`` prints its JSON Schema)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.io import validate as v
from planner.io.bounds import YamlWord
from planner.specs.knobs import KNOB, BaseFormat, Finetune, Fp8Recipe, Offload, Recompute, Schedule


def _is_bool(f: Any) -> bool:
    ann = getattr(f, "annotation", None)
    return ann is bool or bool in getattr(ann, "__args__", ())


class _Strict(BaseModel):
    # strict: "8" is not an int and true is not 1; NaN/inf are refused everywhere.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _yaml_words(cls, data: Any) -> Any:
        """YAML 1.1's yes / no / on / off are a bool only in a bool field (``sp: on``); in a
        string field they are the text as written (``name: off``)."""
        if not isinstance(data, dict):
            return data
        return {k: x.as_bool() if isinstance(x, YamlWord) and _is_bool(cls.model_fields.get(k))
                else x for k, x in data.items()}


class ModelSection(_Strict):
    """Where the model comes from: a preset name, a Hugging Face config.json, or inline shape
    fields (the ModelSpec fields). Inline fields next to ``preset`` or ``config`` override them."""

    preset: Optional[str] = Field(default=None, description="preset name or alias (dtplan models)")
    config: Optional[str] = Field(default=None, description="path to a Hugging Face "
                                  "config.json (or its directory), relative to the plan file")
    name: Optional[str] = None
    layers: Optional[int] = Field(default=None, ge=1)
    hidden: Optional[int] = Field(default=None, ge=1)
    heads: Optional[int] = Field(default=None, ge=1)
    kv_heads: Optional[int] = Field(default=None, ge=1)
    head_dim: Optional[int] = Field(default=None, ge=1)
    ffn: Optional[int] = Field(default=None, ge=1)
    mlp: Optional[Literal["gelu", "swiglu"]] = None
    vocab: Optional[int] = Field(default=None, ge=1)
    tied_embeddings: Optional[bool] = None
    position: Optional[Literal["learned", "rope", "alibi", "none"]] = None
    max_positions: Optional[int] = Field(default=None, ge=1)
    qkv_bias: Optional[bool] = None
    linear_bias: Optional[bool] = None
    norm: Optional[Literal["layernorm", "rmsnorm"]] = None
    dropout: Optional[bool] = None
    experts: Optional[int] = Field(default=None, ge=0)
    experts_per_token: Optional[int] = Field(default=None, ge=0)
    expert_ffn: Optional[int] = Field(default=None, ge=1)
    shared_experts: Optional[int] = Field(default=None, ge=0)
    dense_layers: Optional[int] = Field(default=None, ge=0)
    moe_every: Optional[int] = Field(default=None, ge=1, description="MoE in every k-th layer")
    shared_expert_ffn: Optional[int] = Field(default=None, ge=1)
    window: Optional[int] = Field(default=None, ge=1,
                                  description="local attention span in tokens")
    window_kind: Optional[Literal["sliding", "chunked"]] = None
    global_every: Optional[int] = Field(default=None, ge=0, description="with window: every "
                                        "k-th layer attends globally")
    q_lora_rank: Optional[int] = Field(default=None, ge=0,
                                       description="MLA: q compression rank (0: none)")
    kv_lora_rank: Optional[int] = Field(default=None, ge=1,
                                        description="MLA: kv compression rank")
    qk_rope_dim: Optional[int] = Field(default=None, ge=0,
                                       description="MLA: decoupled rope dims")
    v_head_dim: Optional[int] = Field(default=None, ge=1)
    mtp_layers: Optional[int] = Field(default=None, ge=0,
                                      description="multi-token-prediction modules")


class HardwareSection(_Strict):
    """A bundled profile (or a profile TOML file) with optional overrides."""

    profile: Optional[str] = Field(default=None,
                                   description="bundled profile name (dtplan hardware)")
    file: Optional[str] = Field(default=None,
                                description="profile TOML, relative to the plan file")
    gpus_per_node: Optional[int] = Field(default=None, ge=1)
    # the ranges of --gpu-memory-gib and --nic-gbit-per-gpu (validate: GPU_MEMORY_GIB, NIC_GBIT)
    gpu_memory_gb: Optional[float] = Field(default=None, ge=v.GPU_MEMORY_GIB[0],
                                           le=v.GPU_MEMORY_GIB[1])
    nic_gbit_per_gpu: Optional[float] = Field(default=None, ge=v.NIC_GBIT[0], le=v.NIC_GBIT[1])


def _knob(name: str) -> Any:
    """The plan key of layout knob `name`: its pydantic Field (default, range, description)."""
    return KNOB[name].field(plan=True)[1]


class LayoutSection(_Strict):
    """The Layout fields. ``dp`` defaults to gpus ÷ (tp·pp·cp); precision and optimizer may be
    given here or at the top level (not both)."""

    # Every layout knob of specs.knobs.KNOBS in its order, with its help, unit and range; dp,
    # micro_batch, precision and optimizer may be left out (derived, or given in batch / at the
    # top level). Written out so a type checker sees each key's type;
    # tests/test_layout_knobs.py holds names and types equal to the table's.
    tp: int = _knob("tp")
    pp: int = _knob("pp")
    dp: Optional[int] = _knob("dp")
    cp: int = _knob("cp")
    ep: int = _knob("ep")
    etp: Optional[int] = _knob("etp")
    zero: int = _knob("zero")
    shard_group: Optional[int] = _knob("shard_group")
    micro_batch: Optional[int] = _knob("micro_batch")
    schedule: Schedule = _knob("schedule")
    chunks: int = _knob("chunks")
    first_stage_layers: Optional[int] = _knob("first_stage_layers")
    last_stage_layers: Optional[int] = _knob("last_stage_layers")
    sp: Optional[bool] = _knob("sp")
    recompute: Recompute = _knob("recompute")
    recompute_layers: Optional[int] = _knob("recompute_layers")
    offload_optimizer: Offload = _knob("offload_optimizer")
    offload_params: Offload = _knob("offload_params")
    precision: Optional[str] = _knob("precision")
    optimizer: Optional[str] = _knob("optimizer")
    fp8: Fp8Recipe = _knob("fp8")
    activation_offload: bool = _knob("activation_offload")
    optimizer_in_backward: bool = _knob("optimizer_in_backward")
    doc_tokens: Optional[int] = _knob("doc_tokens")
    finetune: Finetune = _knob("finetune")
    lora_rank: int = _knob("lora_rank")
    lora_alpha: int = _knob("lora_alpha")
    lora_targets: str = _knob("lora_targets")
    lora_dropout: bool = _knob("lora_dropout")
    base_format: BaseFormat = _knob("base_format")


class BatchSection(_Strict):
    """Global batch in sequences (``global_batch``) or tokens (``tokens_per_batch``); the
    micro-batch b and, optionally, the gradient-accumulation steps a the job will use."""

    global_batch: Optional[int] = Field(default=None, ge=1, le=v.MAX_GLOBAL_BATCH,
                                        description="sequences per optimizer step")
    tokens_per_batch: Optional[int] = Field(default=None, ge=1, le=v.MAX_TOKENS_PER_BATCH,
                                            description="tokens per optimizer step")
    micro_batch: Optional[int] = Field(default=None, ge=1, le=v.MAX_GPUS,
                                       description="sequences per GPU per micro-step")
    accumulation: Optional[int] = Field(default=None, ge=1, le=v.MAX_GLOBAL_BATCH,
                                        description="gradient-accumulation steps as "
                                        "configured in the job; checked against B = b·a·DP")


class CheckpointSection(_Strict):
    """Checkpoint policy. Cost δ: ``cost_min`` directly, else the checkpoint size (``size_gb``,
    default weights + master + optimizer state, planner.resilience) ÷ the write bandwidth
    (``write_gbps``, default the profile's storage, capped by the writers' NICs). Failure rate:
    exactly one of ``mtbf_hours`` (job), ``node_mtbf_hours`` or ``gpu_mtbf_hours``."""

    interval_min: float = Field(..., gt=0)
    cost_min: Optional[float] = Field(default=None, gt=0)
    size_gb: Optional[float] = Field(default=None, gt=0)
    write_gbps: Optional[float] = Field(default=None, gt=0)
    mtbf_hours: Optional[float] = Field(default=None, gt=0, description="job (whole cluster) MTBF")
    node_mtbf_hours: Optional[float] = Field(default=None, gt=0, description="one node's MTBF; "
                                             "the job's is this ÷ nodes")
    gpu_mtbf_hours: Optional[float] = Field(default=None, gt=0, description="one GPU's MTBF; "
                                            "the job's is this ÷ gpus")
    restart_min: float = Field(default=0.0, ge=0)


class BudgetSection(_Strict):
    """Overrides of the memory reserve (specs.budget.MemoryBudget); omitted fields keep defaults."""

    context_gb: Optional[float] = Field(default=None, ge=v.RESERVE_GB[0], le=v.RESERVE_GB[1],
                                        description="CUDA/NCCL context per GPU")
    comm_buffer_gb: Optional[float] = Field(default=None, ge=v.RESERVE_GB[0], le=v.RESERVE_GB[1],
                                            description="communication buckets")
    fragmentation_fraction: Optional[float] = Field(default=None, ge=0, lt=1)
    margin_fraction: Optional[float] = Field(default=None, ge=0, lt=1)


class Thresholds(_Strict):
    """Limits the plan must meet beyond fitting; each one set becomes a rule."""

    max_memory_fraction: Optional[float] = Field(default=None, gt=0, le=1,
                                                 description="peak ÷ GPU capacity")
    min_headroom_gb: Optional[float] = Field(default=None, ge=0, description="usable − peak, GB")
    min_mfu: Optional[float] = Field(default=None, ge=0, le=1)
    max_bubble: Optional[float] = Field(default=None, ge=0, le=1)
    max_step_time_s: Optional[float] = Field(default=None, gt=0)
    min_tokens_per_s_per_gpu: Optional[float] = Field(default=None, gt=0)
    max_collective_fraction: Optional[float] = Field(default=None, ge=0, le=1)
    max_checkpoint_waste: Optional[float] = Field(default=None, ge=0, le=1)


class Plan(_Strict):
    """A proposed training configuration (plan-file schema version 1)."""

    version: Literal[1] = Field(default=1, description="plan-file schema version")
    name: Optional[str] = None
    description: Optional[str] = None
    model: Union[str, ModelSection]
    hardware: Union[str, HardwareSection] = "h100"
    gpus: int = Field(..., ge=1, le=v.MAX_GPUS)
    layout: LayoutSection = LayoutSection()
    batch: BatchSection = BatchSection()
    seq_len: int = Field(..., ge=1, le=v.MAX_SEQ_LEN)
    precision: Optional[str] = None
    optimizer: Optional[str] = None
    framework: Optional[str] = Field(default=None,
                                     description="framework profile (default megatron)")
    checkpoint: Optional[CheckpointSection] = None
    budget: Optional[BudgetSection] = None
    thresholds: Thresholds = Thresholds()
