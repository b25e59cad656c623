"""Exports for the engine versions users run today, and readers with the same semantics, so the
round trip export → check cannot hide a difference (issue 26): Megatron-LM core_v0.15.3's
validate_args (Megatron-FSDP's environment and checkpoint format, no nonexistent flags,
recompute counted per model chunk) and DeepSpeed 0.19.8's removed keys (no MiCS: hybrid sharding
refused). The same files are loaded into the engines' own parsers in test_engine_parsers_*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.framework_configs import export, read_engine
from planner.framework_configs.megatron_args import CONNECTIONS, MEGATRON_TARGET
from planner.resolve.job import resolve_file
from planner.specs.job import CheckOptions, Job

PLAN = """model: {model}
hardware: h100
gpus: {gpus}
seq_len: 8192
layout: {{{layout}}}
batch: {{global_batch: {batch}}}
"""
FSDP = dict(model="llama3-8b", gpus=64, batch=256,
            layout="tp: 1, pp: 1, dp: 64, zero: 3, micro_batch: 1, recompute: full")
INTERLEAVED = dict(model="llama3-70b", gpus=128, batch=512,
                   layout="tp: 8, pp: 2, dp: 8, zero: 1, sp: true, micro_batch: 1, "
                          "recompute: full, recompute_layers: 8, schedule: interleaved, chunks: 2")


def _job(tmp_path: Path, **plan: object) -> Job:
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN.format(**plan))
    return resolve_file(str(p), CheckOptions())[0]


def _read_back(tmp_path: Path, text: str, gpus: int) -> Job:
    return read_engine("megatron", str(tmp_path / "run.sh"), text, None,
                       CheckOptions(gpus=gpus, hardware="h100"))


def _failing(job: Job) -> set[str]:
    return {r.name for r in job.rules if r.status == "fail"}


def test_megatron_fsdp_export_as_validate_args_requires(tmp_path):
    text = export("megatron", _job(tmp_path, **FSDP)).text
    assert MEGATRON_TARGET in text
    assert f"export {CONNECTIONS}=1" not in text and f"unset {CONNECTIONS}" in text
    assert "--use-megatron-fsdp" in text and "--ckpt-format fsdp_dtensor" in text
    back = _read_back(tmp_path, text, 64)
    assert not _failing(back) and back.layout.zero == 3


def test_reader_fails_what_megatron_fsdp_refuses(tmp_path):
    good = export("megatron", _job(tmp_path, **FSDP)).text
    connections = good.replace(f"unset {CONNECTIONS}", f"export {CONNECTIONS}=1")
    assert "megatron-fsdp-connections" in _failing(_read_back(tmp_path, connections, 64))
    no_format = good.replace("--ckpt-format fsdp_dtensor", "--ckpt-format torch_dist")
    assert "megatron-fsdp-ckpt-format" in _failing(_read_back(tmp_path, no_format, 64))


def test_tensor_parallel_without_fsdp_exports_one_connection(tmp_path):
    text = export("megatron", _job(tmp_path, **INTERLEAVED)).text
    assert f"export {CONNECTIONS}=1" in text
    back = _read_back(tmp_path, text.replace(f"export {CONNECTIONS}=1", ""), 128)
    assert "megatron-connections" in _failing(back)


def test_interleaved_recompute_counted_per_model_chunk(tmp_path):
    """8 layers per stage with v = 2 chunks: Megatron recomputes --recompute-num-layers in each
    chunk, so the export writes 4 and the reader reads 4 × 2 = 8 back."""
    job = _job(tmp_path, **INTERLEAVED)
    text = export("megatron", job).text
    assert "--recompute-num-layers 4" in text
    assert "--overlap-p2p-communication" not in text    # no such flag in Megatron-LM
    back = _read_back(tmp_path, text, 128)
    assert back.layout.recompute_layers == job.layout.recompute_layers == 8
    assert not _failing(back)
    # a script that says 8 recomputes 16 layers per stage, and the reader says so
    assert _read_back(tmp_path, text.replace("--recompute-num-layers 4",
                                             "--recompute-num-layers 8"),
                      128).layout.recompute_layers == 16


def test_recompute_megatron_cannot_express_is_refused(tmp_path):
    odd = {**INTERLEAVED, "layout": INTERLEAVED["layout"].replace("recompute_layers: 8",
                                                                  "recompute_layers: 3")}
    with pytest.raises(Exception, match="multiple of 2"):
        export("megatron", _job(tmp_path, **odd))


def test_nonexistent_megatron_flag_fails_the_check(tmp_path):
    text = export("megatron", _job(tmp_path, **INTERLEAVED)).text
    bad = text.replace("--num-layers-per-virtual-pipeline-stage",
                       "--overlap-p2p-communication \\\n  --num-layers-per-virtual-pipeline-stage")
    assert "megatron-unknown-flag" in _failing(_read_back(tmp_path, bad, 128))


def test_deepspeed_refuses_hybrid_sharding_and_rejects_removed_keys(tmp_path):
    hsdp = {**FSDP, "layout": FSDP["layout"] + ", shard_group: 8"}
    with pytest.raises(Exception, match="MiCS was removed"):
        export("deepspeed", _job(tmp_path, **hsdp))
    cfg = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1,
           "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "mics_shard_size": 8}}
    opts = CheckOptions(gpus=64, seq_len=8192, model="llama3-8b", hardware="h100")
    job = read_engine("deepspeed", "ds.json", "", cfg, opts)
    assert "ds-removed-key" in _failing(job)
    cfg["zero_optimization"] = {"stage": 3, "zero_hpz_partition_size": 8}
    job = read_engine("deepspeed", "ds.json", "", cfg, opts)
    assert not _failing(job) and any("hpZ" in n for n in job.notes)
