"""dtplan's Accelerate exports through Accelerate 1.15.0's own launch path, without launching:
``launch_command_parser`` + ``_validate_launch_command`` (which loads the YAML with
``load_config_from_file``: unknown keys and bad enum values rejected), ``prepare_multi_gpu_env``
(the FSDP_* / PARALLELISM_CONFIG_* environment and torchrun's arguments, per node), torchrun's
``config_from_args`` (the LaunchConfig it would run; nothing starts), then, in that environment,
``FullyShardedDataParallelPlugin()`` and ``ParallelismConfig()`` as the training process builds
them. ParallelismConfig's total-size check needs an Accelerator, so it is re-stated
(parallelism_config.py ``_validate_accelerator``). Processes per node, nodes, node rank, head
address, data-parallel degrees, TP, CP, resharding and offload must be the plan's. Skipped
without the `engines` extra."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import yaml

from engine_exports import names, written
from planner.framework_configs.accelerate import ACCELERATE_TARGET, HEAD_NODE_IP, MAIN_PROCESS_PORT

NAMES = names()
TMP = Path(tempfile.mkdtemp(prefix="dtplan-accelerate-"))


@pytest.fixture(scope="module")
def acc() -> ModuleType:
    """accelerate with its launcher and config classes, imported once."""
    module = pytest.importorskip("accelerate")
    import torch.distributed.run  # noqa: F401
    from accelerate.commands.launch import launch_command_parser  # noqa: F401
    from accelerate.parallelism_config import ParallelismConfig  # noqa: F401
    return module


def launch(text: str, name: str) -> dict[str, Any]:
    """What `accelerate launch --config_file F train.py` derives, without starting anything."""
    import torch.distributed.run as trun
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import _filter_args, prepare_multi_gpu_env
    from accelerate.parallelism_config import ParallelismConfig
    path = TMP / f"{name}.yaml"
    path.write_text(text)
    with contextlib.redirect_stdout(io.StringIO()):
        args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
        args, _, _ = _validate_launch_command(args)
        env = prepare_multi_gpu_env(args)
        targs = _filter_args(args, trun.get_args_parser(), ["--training_script", "train.py",
                                                            "--training_script_args", ""])
        cfg, _, _ = trun.config_from_args(targs)
    out: dict[str, Any] = {"processes": args.num_processes, "per_node": cfg.nproc_per_node,
                           "nodes": cfg.max_nodes, "node_rank": targs.node_rank,
                           "endpoint": cfg.rdzv_endpoint, "fsdp": None,
                           "dims": None}
    keep = {k: v for k, v in env.items() if k.startswith(("FSDP_", "PARALLELISM_CONFIG_",
                                                          "ACCELERATE_"))}
    with mock.patch.dict(os.environ, keep):
        if args.use_fsdp:
            plugin = FullyShardedDataParallelPlugin()
            out["fsdp"] = (plugin.fsdp_version, bool(plugin.reshard_after_forward),
                           type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy")
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            pc = ParallelismConfig()
            assert pc.total_size == cfg.nproc_per_node * cfg.max_nodes   # _validate_accelerator
            out["dims"] = (pc.dp_replicate_size, pc.dp_shard_size, pc.tp_size, pc.cp_size)
    return out


def test_the_release_the_writer_targets(acc):
    assert acc.__version__ == "1.15.0" and acc.__version__ in ACCELERATE_TARGET


@pytest.mark.parametrize("name", NAMES)
def test_accelerate_launches_each_export_as_planned(acc, name):
    w = next(x for x in written("accelerate") if x.name == name)
    job, lay = w.job, w.job.layout
    if w.text is None:   # what FSDP2 under Accelerate cannot run
        assert (lay.pp > 1 and "pipeline parallel" in str(w.refusal)) or \
            (lay.ep > 1 and "expert parallel" in str(w.refusal)) or \
            "not a multiple" in str(w.refusal), w.refusal
        return
    got = launch(w.text, name)
    per_node = min(job.hardware.scale_up.gpus_per_node, job.gpus)
    assert (got["processes"], got["per_node"] * got["nodes"]) == (job.gpus, job.gpus)
    assert got["per_node"] == per_node and got["node_rank"] == 0
    if got["nodes"] > 1:   # torchrun's static rendezvous at the head node
        assert got["endpoint"] == f"{HEAD_NODE_IP}:{MAIN_PROCESS_PORT}"
    if got["fsdp"] is not None:   # one GPU shards nothing: no resharding
        assert got["fsdp"] == (2, lay.zero >= 3 and lay.dp > 1, lay.offload_optimizer != "none")
    else:
        assert lay.zero == 0 and lay.tp == lay.cp == 1
    if got["dims"] is not None:
        rep, shard, tp, cp = got["dims"]
        assert (rep * shard, tp, cp) == (lay.dp, lay.tp, lay.cp)
        # the plan's shard group counts DP·CP ranks; the FSDP mesh is dp_shard × cp
        assert shard == (lay.shard_group or lay.dp * lay.cp) // lay.cp


def test_the_loads_cover_every_layout_family_accelerate_runs(acc):
    loaded = {w.name for w in written("accelerate") if w.text}
    assert {"zero1-dp64", "zero2-dp64", "zero3-dp64-full", "zero3-hsdp8", "tp2-zero3",
            "tp4-cp2", "zero3-hsdp-cp2", "zero3-cpu-offload", "full-ft-7b-1gpu-offload",
            "lora-8b-dp8",
            "pass-qlora-llama3-8b-rtx4090"} <= loaded


def test_each_node_fills_its_rank_and_the_head_address(acc):
    """The multi-node fields as Accelerate passes them to torchrun: a node's copy with its
    machine_rank and the head node's address gets that node rank and a static rendezvous at
    that address (launch.py: the YAML's same_network does not reach the launch arguments, so
    torchrun gets rdzv_endpoint = main_process_ip:main_process_port, utils/launch.py:216-224)."""
    w = next(x for x in written("accelerate") if x.name == "zero3-dp64-full")
    cfg = yaml.safe_load(w.text)
    assert (cfg["num_machines"], cfg["machine_rank"], cfg["main_process_ip"],
            cfg["main_process_port"], cfg["same_network"]) == (8, 0, HEAD_NODE_IP,
                                                               MAIN_PROCESS_PORT, True)
    node = {**cfg, "machine_rank": 5, "main_process_ip": "node-0"}
    got = launch(yaml.safe_dump(node), "node5")
    assert (got["node_rank"], got["endpoint"], got["nodes"], got["per_node"]) == \
        (5, f"node-0:{MAIN_PROCESS_PORT}", 8, 8)
    single = next(x for x in written("accelerate") if x.name == "full-ft-7b-1gpu-offload")
    assert "main_process_ip" not in yaml.safe_load(single.text)
    with pytest.raises(ValueError, match="unknown keys"):
        launch(w.text + "main_proces_ip: node-0\n", "typo")
