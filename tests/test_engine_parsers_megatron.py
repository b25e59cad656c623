"""dtplan's Megatron-LM exports in megatron-core 0.15.3's own classes (the release the writer
targets): the launch script's flags become the TransformerConfig and
DistributedDataParallelConfig that Megatron-LM's ``core_transformer_config_from_args`` builds
(every flag whose name is a field, plus its renames: core_v0.15.3 arguments.py), whose
``__post_init__`` validates them; ``parallel_state.initialize_model_parallel`` builds every
TP/PP/DP/CP/EP group on torch's single-process fake backend for the script's world size; the
microbatch calculator derives the accumulation. The data-parallel size, partial-DP (hybrid
shard) size, virtual stages, stage split, recompute count and batch must be the plan's.

Megatron-LM's ``megatron/training/arguments.py`` (parse_args, validate_args) is on no package
registry: the megatron-core wheels ship ``megatron/core`` only. Its launch-environment rules
(CUDA_DEVICE_MAX_CONNECTIONS, Megatron-FSDP's checkpoint format, flags argparse rejects) are
checked against dtplan's reader in tests/test_export_current.py. Skipped without the extra."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import ROOT
from engine_exports import accumulation, names, written, written_as_expected
from planner.engine.stages import stage_layers
from planner.framework_configs.megatron_args import MEGATRON_TARGET

NAMES = names()
REFUSED = {"zero3-cpu-offload": "ZeRO-Offload", "zero2-cpu-offload-fp32": "ZeRO-Offload",
           "full-ft-7b-1gpu-offload": "ZeRO-Offload", "lora-8b-dp8": "no LoRA",
           "pass-qlora-llama3-8b-rtx4090": "no LoRA", "fail-offload-valid": "ZeRO-Offload",
           "fail-batch-divisible": "not a multiple", "fail-sharding-valid": "shard group",
           "fail-dualpipe-valid": "dualpipe pipeline schedule (it runs 1f1b, interleaved); no "
                                  "export target runs it"}
# What megatron-core's TransformerConfig rejects in the shipped failing plans (as dtplan does)
REJECTED = {"fail-heads-divisible-by-tp": "num_attention_heads",
            "fail-kv-heads-compatible-with-tp": "num_query_groups",
            "fail-tp-in-nvlink-domain": "num_query_groups",
            "fail-expert-grid-folds": "expert",
            # EP > 1 and TP > 1 without SP: core_v0.15.3 model_parallel_config.py:388-393 calls
            # warnings.warn, which that module never imports, so the config raises NameError
            # (at d98e8a64 it warns and MoELayer.forward raises ValueError in training)
            "fail-sequence-parallel-with-moe": "warnings"}
MAX_GROUPS_WORLD = 4096   # larger worlds: the sizes by formula (thousands of fake groups)


@pytest.fixture(scope="module")
def mc() -> ModuleType:
    """megatron.core with its config classes and parallel_state, imported once."""
    module = pytest.importorskip("megatron.core")
    import megatron.core.num_microbatches_calculator  # noqa: F401
    import megatron.core.parallel_state  # noqa: F401
    from megatron.core.distributed import DistributedDataParallelConfig  # noqa: F401
    from megatron.core.transformer import TransformerConfig  # noqa: F401
    return module


def torchrun(text: str) -> Any:
    """torchrun's own LaunchConfig for the script's launcher, on node 3 of a head at node-0
    (torch.distributed.run's parser and config_from_args; nothing starts)."""
    import torch.distributed.run as trun
    tokens = shlex.split(text.replace("\\\n", " ").replace('"$NODE_RANK"', "3")
                         .replace('"$MASTER_ADDR"', "node-0"), comments=True)
    start = tokens.index("torchrun") + 1
    args = trun.get_args_parser().parse_args(tokens[start:tokens.index("pretrain_gpt.py") + 1])
    return args, trun.config_from_args(args)[0]


def script_args(text: str) -> tuple[dict[str, Any], dict[str, str], int]:
    """(flags after pretrain_gpt.py, exported variables, torchrun's world) of a launch script."""
    body = text.replace("\\\n", " ")
    env, tokens = {}, []
    for line in body.splitlines():
        toks = shlex.split(line, comments=True)
        if toks[:1] == ["export"]:
            name, _, value = toks[1].partition("=")
            env[name] = value
        elif toks:
            tokens += toks
    at = tokens.index("pretrain_gpt.py")
    launcher = dict(zip(tokens[1:at:2], tokens[2:at:2]))
    flags: dict[str, Any] = {}
    rest = tokens[at + 1:]
    for i, tok in enumerate(rest):
        if tok.startswith("--"):
            nxt = rest[i + 1] if i + 1 < len(rest) else "--"
            flags[tok[2:].replace("-", "_")] = True if nxt.startswith("--") else nxt
    return flags, env, int(launcher["--nproc_per_node"]) * int(launcher["--nnodes"])


def _typed(cls: type, name: str, value: Any) -> Any:
    kind = {f.name: f.type for f in dataclasses.fields(cls)}[name]
    text = str(kind)
    if value is True or "bool" in text:
        return bool(value)
    return int(value) if "int" in text and "str" not in text else \
        float(value) if "float" in text else value


def configs(mc: ModuleType, a: dict[str, Any]) -> tuple[Any, Any, int | None]:
    """(TransformerConfig, DistributedDataParallelConfig, vpp) as Megatron-LM builds them."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig as DDP
    from megatron.core.transformer import TransformerConfig as TC
    names = {f.name for f in dataclasses.fields(TC)}
    kw = {k: _typed(TC, k, v) for k, v in a.items() if k in names}
    layers, pp = int(a["num_layers"]), int(a["pipeline_model_parallel_size"])
    vpp = None
    if "num_layers_per_virtual_pipeline_stage" in a:   # validate_args: counted layers / PP / lpv
        counted = layers + bool(a.get("account_for_embedding_in_pipeline_split")) \
            + bool(a.get("account_for_loss_in_pipeline_split"))
        vpp = counted // pp // int(a["num_layers_per_virtual_pipeline_stage"])
        vpp = vpp if vpp > 1 else None
    # core_transformer_config_from_args' renames (core_v0.15.3 arguments.py)
    kw.update(virtual_pipeline_model_parallel_size=vpp,
              num_layers_in_first_pipeline_stage=_int(a.get("decoder_first_pipeline_num_layers")),
              num_layers_in_last_pipeline_stage=_int(a.get("decoder_last_pipeline_num_layers")),
              num_moe_experts=_int(a.get("num_experts")),
              num_query_groups=_int(a.get("num_query_groups")) if a.get("group_query_attention")
              else None,
              add_bias_linear=not a.get("disable_bias_linear"),
              pipeline_dtype=torch.bfloat16 if a.get("bf16") else torch.float32)
    if a.get("swiglu"):
        kw.update(gated_linear_unit=True, activation_func=torch.nn.functional.silu)
    if a.get("recompute_activations"):   # validate_args: --recompute-activations = selective
        kw["recompute_granularity"] = "selective"
    if "fp8_format" in a:
        kw["fp8"] = a["fp8_format"]
    ddp_names = {f.name for f in dataclasses.fields(DDP)}
    ddp = DDP(**{k: _typed(DDP, k, v) for k, v in a.items() if k in ddp_names})
    return TC(**kw), ddp, vpp


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def groups(mc: ModuleType, tc: Any, ddp: Any, world: int) -> dict[str, int]:
    """parallel_state's sizes, built on the fake backend as training/initialize.py calls it."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        ps.initialize_model_parallel(
            tc.tensor_model_parallel_size, tc.pipeline_model_parallel_size,
            tc.virtual_pipeline_model_parallel_size, context_parallel_size=tc.context_parallel_size,
            expert_model_parallel_size=tc.expert_model_parallel_size,
            expert_tensor_parallel_size=tc.expert_tensor_parallel_size,
            num_distributed_optimizer_instances=ddp.num_distributed_optimizer_instances,
            create_gloo_process_groups=False)
        return {"dp": ps.get_data_parallel_world_size(),
                "partial": ps.get_data_parallel_world_size(with_context_parallel=True,
                                                          partial_data_parallel=True),
                "expert_dp": ps.get_expert_data_parallel_world_size()}
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def microbatches(gbs: int, mbs: int, dp: int) -> int:
    import megatron.core.num_microbatches_calculator as nmc
    nmc.destroy_num_microbatches_calculator()
    nmc.init_num_microbatches_calculator(0, None, gbs, mbs, dp, False)
    return nmc.get_num_microbatches()


def test_the_release_the_writer_targets(mc):
    from importlib.metadata import version
    assert version("megatron-core") == "0.15.3" and "0.15.3" in MEGATRON_TARGET


@pytest.mark.parametrize("name", NAMES)
def test_megatron_core_builds_each_export_to_the_plans_sizes(mc, name):
    w = written_as_expected("megatron", name, REFUSED)
    if w is None:
        return
    job, lay = w.job, w.job.layout
    a, env, world = script_args(w.text)
    assert world == job.gpus
    targs, launch = torchrun(w.text)
    assert launch.nproc_per_node * launch.max_nodes == job.gpus
    if launch.max_nodes > 1:   # every node its rank, the head's address (as set on node 3)
        assert (targs.node_rank, targs.master_addr, targs.master_port) == (3, "node-0", 29500)
    if name in REJECTED:
        with pytest.raises((AssertionError, ValueError, RuntimeError, NameError),
                           match=REJECTED[name]):
            tc, ddp, _ = configs(mc, a)
            groups(mc, tc, ddp, world)
        assert w.failing, "megatron-core rejects it: dtplan's verdict must fail too"
        return
    tc, ddp, vpp = configs(mc, a)
    assert (tc.tensor_model_parallel_size, tc.pipeline_model_parallel_size,
            tc.context_parallel_size, tc.expert_model_parallel_size) == (lay.tp, lay.pp, lay.cp,
                                                                          lay.ep)
    assert (vpp or 1) == lay.chunks and tc.sequence_parallel == lay.sequence_parallel
    if lay.pp > 1 and lay.schedule != "interleaved":
        first, _, last = stage_layers(job.model.layers, lay.pp, 1, lay.first_stage_layers or 0,
                                      lay.last_stage_layers or 0)   # the split fit chose
        assert (tc.num_layers_in_first_pipeline_stage or first,
                tc.num_layers_in_last_pipeline_stage or last) == (first, last)
    if lay.recompute == "full" and lay.recompute_layers is not None:
        # Megatron recomputes recompute_num_layers in each model chunk (transformer_block.py)
        assert tc.recompute_method == "block"
        assert tc.recompute_num_layers * lay.chunks == lay.recompute_layers
    zero_of = {(False, False): 0, (True, False): 1}
    zero = zero_of.get((ddp.use_distributed_optimizer, ddp.use_megatron_fsdp)) if not \
        ddp.use_megatron_fsdp else {"optim_grads": 2, "optim_grads_params": 3}[
            ddp.data_parallel_sharding_strategy]
    assert zero == lay.zero
    got = groups(mc, tc, ddp, world) if world <= MAX_GROUPS_WORLD else \
        {"dp": world // (lay.tp * lay.pp * lay.cp), "partial": None}
    if "world-size" in w.failing:   # the plan's own grid is not its GPU count: nor is Megatron's
        assert got["dp"] != lay.dp
        return
    assert got["dp"] == lay.dp
    assert got["partial"] in (None, lay.shard_group or lay.dp * lay.cp)
    dp = got["dp"]
    assert microbatches(int(a["global_batch_size"]), int(a["micro_batch_size"]), dp) \
        == accumulation(job)
    assert int(a["global_batch_size"]) == job.global_batch


def test_the_loads_cover_every_layout_family_megatron_runs(mc):
    loaded = {w.name for w in written("megatron") if w.text} - set(REJECTED)
    assert {"zero1-dp64", "zero2-dp64", "zero3-dp64-full", "zero3-hsdp8", "tp2-zero3",
            "tp8-pp2-1f1b", "tp8-pp2-interleaved", "tp8-pp3-uneven", "tp4-cp2", "moe-ep8",
            "llama3-70b-256xh100"} <= loaded


def test_the_config_classes_are_live(mc):
    """megatron-core's own checks reject a recompute count and a split the plan cannot run."""
    from megatron.core.transformer import TransformerConfig as TC
    import torch
    base = dict(num_layers=80, hidden_size=8192, num_attention_heads=64,
                tensor_model_parallel_size=8, pipeline_model_parallel_size=2,
                pipeline_dtype=torch.bfloat16)
    assert TC(**base, recompute_granularity="full", recompute_method="block",
              recompute_num_layers=4).recompute_num_layers == 4
    with pytest.raises(ValueError):
        TC(**{**base, "num_attention_heads": 60})
    with pytest.raises(ValueError):
        TC(**base, recompute_granularity="full")


def test_megatron_core_builds_a_stated_stage_that_is_no_multiple_of_v(mc, tmp_path):
    """Stated first/last stages that v does not divide go out as a layout string
    (--pipeline-model-parallel-layout): megatron-core's PipelineParallelLayerLayout parses it,
    finds PP × v virtual stages and every layer once, and builds on each pipeline rank the
    layers dtplan's split puts there (as MLPerf v6.0's DeepSeek-V3 runs 13 layers on the last
    stage of PP 4 × v 4)."""
    from megatron.core.transformer.enums import LayerType
    from planner.framework_configs import export
    from planner.review.build import inputs_from_plan
    plan = tmp_path / "uneven-v4.yaml"
    plan.write_text("model: llama3-70b\nhardware: h100\ngpus: 128\nseq_len: 8192\n"
                    "layout: {tp: 8, pp: 4, zero: 1, sp: true, micro_batch: 1, "
                    "schedule: interleaved, chunks: 4, first_stage_layers: 18, "
                    "last_stage_layers: 14, recompute: full}\nbatch: {global_batch: 512}\n")
    job = inputs_from_plan(str(plan))
    a, _, world = script_args(export("megatron", job).text)
    assert "pipeline_model_parallel_layout" in a and "decoder_first_pipeline_num_layers" not in a
    tc, _, _ = configs(mc, a)
    layout = tc.pipeline_model_parallel_layout
    assert layout.virtual_pipeline_model_parallel_size == 4
    built = [sum(chunk.count(LayerType.decoder) for chunk in rank) for rank in layout.layout]
    first, middle, last = stage_layers(80, 4, 4, 18, 14)
    assert built == [first, middle, middle, last] == [18, 24, 24, 14]
    assert min(chunk.count(LayerType.decoder) for rank in layout.layout for chunk in rank) >= 1


@pytest.mark.parametrize("text", ["Et*4|(t*4|)*14tmL", "Et*3|(tt|)*29,m|L", "E|t*3|(tt|)*3|L"])
def test_dtplan_reads_a_layout_string_as_megatron_core_does(mc, text):
    from megatron.core.transformer.pipeline_parallel_layer_layout import \
        PipelineParallelLayerLayout
    from planner.framework_configs.megatron_pipeline import parse_layout
    ref = PipelineParallelLayerLayout.parse_str_to_list(text)
    assert [len(s) for s in parse_layout(text)] == [len(s) for s in ref]
    assert [s.count("t") for s in parse_layout(text)] == \
        [sum(x.name == "decoder" for x in s) for s in ref]


@pytest.mark.parametrize("dispatcher,capacity", [("alltoall", 1.25), ("allgather", 0.0)])
def test_megatron_core_builds_the_token_path_a_profile_states(mc, tmp_path, dispatcher, capacity):
    """A profile's dispatcher and padded expert capacity go out as Megatron's flags; megatron-
    core's TransformerConfig takes them (transformer_config.py:554-570, 855-885) and dtplan's
    reader reads them back to the same profile keys."""
    from planner.framework_configs import export
    from planner.framework_configs.megatron_args import parse_megatron_args
    from planner.framework_configs.megatron_moe import job_framework
    from planner.review.build import inputs_from_plan
    base = (Path(ROOT) / "framework_profiles" / "megatron.toml").read_text()
    prof = tmp_path / "mine.toml"
    prof.write_text(base.replace('ep_dispatcher = "deepep"', f'ep_dispatcher = "{dispatcher}"')
                    .replace("moe_capacity_factor = { value = 0.0,",
                             f"moe_capacity_factor = {{ value = {capacity},")
                    .replace('name = "megatron"', 'name = "megatron-mine"'))
    plan = tmp_path / "moe.yaml"
    plan.write_text(f"model: mixtral-8x7b\nhardware: h100\ngpus: 16\nseq_len: 4096\n"
                    f"framework: {prof}\nlayout: {{ep: 8, zero: 1, micro_batch: 1, "
                    "recompute: full}\nbatch: {global_batch: 64}\n")
    text = export("megatron", inputs_from_plan(str(plan))).text
    a, _, _ = script_args(text)
    tc, _, _ = configs(mc, a)
    assert tc.moe_token_dispatcher_type == dispatcher
    assert (tc.moe_expert_capacity_factor or 0.0) == capacity
    assert tc.moe_pad_expert_input_to_capacity == bool(capacity)
    fw = job_framework(parse_megatron_args(text, "moe.sh"), "moe.sh", [])
    assert (fw.time.ep_dispatcher, fw.time.moe_capacity_factor) == (dispatcher, capacity)
