"""dtplan's DeepSpeed exports in DeepSpeed's own parser: ``deepspeed.runtime.config.DeepSpeedConfig``
of the release the writer targets (0.19.8), the class ``deepspeed.initialize`` builds, given the
plan's world size. Every shipped example plan and every layout of tests/engine_exports.py is
exported; each written file must be accepted, and the batch, data-parallel size, ZeRO stage,
offload and precision DeepSpeed derives must be the plan's. Skipped without the `engines` extra.

Without a process group DeepSpeedConfig silently takes world 1 (its world-size lookup catches
the AssertionError of ``deepspeed.comm.get_rank``), so the test stands in for the launcher:
``get_rank`` 0 and ``get_world_size`` the plan's GPUs; with TP·PP > 1 it passes the mpu
Megatron-DeepSpeed passes, whose data-parallel size is world ÷ (TP·PP) (config.py:437-480)."""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

from engine_exports import accumulation, names, written, written_as_expected
from planner.framework_configs.deepspeed import DEEPSPEED_TARGET

NAMES = names()
# What the exporter refuses, and why (each a thing DeepSpeed 0.19.8 cannot run)
REFUSED = {"zero3-hsdp8": "hybrid sharding", "tp8-pp2-interleaved": "interleaved",
           "tp4-cp2": "context parallel", "zero3-hsdp-cp2": "context parallel",
           "fail-interleaving-valid": "interleaved",
           "fail-sharding-valid": "hybrid sharding", "fail-zero-with-pp": "incompatible with "
           "pipeline", "fail-batch-divisible": "not a multiple",
           "fail-sequence-divisible": "context parallel",
           "fail-dualpipe-valid": "the dualpipe pipeline schedule (it runs 1f1b)"}


@pytest.fixture(scope="module")
def ds() -> ModuleType:
    """deepspeed, imported once for the module (DS_ACCELERATOR=cpu: no accelerator probing)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    module = pytest.importorskip("deepspeed")
    import deepspeed.runtime.config  # noqa: F401  (the parser under test)
    from deepspeed.utils import logger
    logger.setLevel("ERROR")   # DeepSpeed logs its config to stdout
    return module


class _Mpu:
    """The part of Megatron's mpu DeepSpeedConfig reads: the data-parallel world size."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def load(ds: ModuleType, cfg: dict[str, Any], world: int, tp: int, pp: int) -> Any:
    from deepspeed import comm
    from deepspeed.runtime.config import DeepSpeedConfig
    mpu = _Mpu(world // (tp * pp)) if tp * pp > 1 else None
    with mock.patch.object(comm, "get_rank", lambda group=None: 0), \
            mock.patch.object(comm, "get_world_size", lambda group=None: world):
        return DeepSpeedConfig(cfg, mpu=mpu)


def test_the_release_the_writer_targets(ds):
    assert ds.__version__ == "0.19.8" and ds.__version__ in DEEPSPEED_TARGET


@pytest.mark.parametrize("name", NAMES)
def test_deepspeed_parses_each_export_to_the_plans_sizes(ds, name):
    w = written_as_expected("deepspeed", name, REFUSED)
    if w is None:
        return
    lay, cfg = w.job.layout, json.loads(w.text)
    if "world-size" in w.failing:   # the plan's grid is not its GPU count: DeepSpeed's DP differs
        with pytest.raises(AssertionError):   # and its batch assertion fails (config.py)
            load(ds, cfg, w.job.gpus, lay.tp, lay.pp)
        return
    got = load(ds, cfg, w.job.gpus, lay.tp, lay.pp)
    zc = got.zero_config
    assert (got.world_size, got.train_batch_size, got.train_micro_batch_size_per_gpu,
            got.gradient_accumulation_steps) == (lay.dp, w.job.global_batch, lay.micro_batch,
                                                 accumulation(w.job))
    assert int(got.zero_optimization_stage) == lay.zero
    for block, planned in ((zc.offload_optimizer, lay.offload_optimizer),
                           (zc.offload_param, lay.offload_params)):
        device = "none" if block is None else getattr(block.device, "value", block.device)
        assert device == planned
    assert bool(got.bfloat16_config.enabled) == (lay.precision != "fp32")
    assert not got.float16_config.enabled


def test_the_loads_cover_every_layout_family_deepspeed_runs(ds):
    loaded = {w.name for w in written("deepspeed") if w.text}
    assert {"zero1-dp64", "zero2-dp64", "zero3-dp64-full", "tp2-zero3", "tp8-pp2-1f1b",
            "tp8-pp3-uneven", "moe-ep8", "zero3-cpu-offload", "zero2-cpu-offload-fp32",
            "full-ft-7b-1gpu-offload", "lora-8b-dp8", "pass-qlora-llama3-8b-rtx4090",
            "llama3-70b-256xh100"} <= loaded


def test_the_parser_is_live(ds):
    """The same parser rejects what dtplan check fails: MiCS (removed in 0.19.7), a batch that
    counts all GPUs where TP·PP divide them, and bf16 with fp16."""
    base = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3}}
    assert load(ds, base, 64, 1, 1).world_size == 64
    from deepspeed.runtime.config import DeepSpeedConfigError
    with pytest.raises(DeepSpeedConfigError, match="mics_shard_size"):
        load(ds, {**base, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}, 64, 1, 1)
    with pytest.raises(AssertionError):
        load(ds, base, 64, 2, 2)   # DP 16: 256 ≠ 1 × 4 × 16
    with pytest.raises(AssertionError):
        load(ds, {**base, "fp16": {"enabled": True}}, 64, 1, 1)
    hpz = load(ds, {**base, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}},
               64, 1, 1)
    assert hpz.zero_config.zero_hpz_partition_size == 8 and hpz.world_size == 64
