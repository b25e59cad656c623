"""dtplan's torchtitan exports in torchtitan's own ConfigManager, for the release installed: 0.3
(the default export, a command line: ``--module``/``--config`` and tyro overrides) or 0.2.x
(``--torchtitan-version 0.2``, the job TOML). The parsed config builds torchtitan's ParallelDims
and its device mesh on torch's single-process fake backend for the plan's world size; the
trainer's batch, sequence and pipeline checks (which need a GPU and a dataset to build the
Trainer itself) are re-stated from v0.2.2 ``train.py`` / 0.3.0 ``trainer.py``. The model torchtitan
builds, the data-parallel degrees, batch, accumulation and pipeline stages must be the plan's.

The `engines` extra installs torchtitan 0.2.2: 0.3.0 imports triton (~1 GB) without declaring it,
which would take the extra past ~2 GB; with 0.3.0 and triton installed the same tests load the
0.3 exports. Skipped without torchtitan."""

from __future__ import annotations

import math
import shlex
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from engine_exports import accumulation, names, written, written_as_expected
from planner.framework_configs.torchtitan_export import (TITAN_V02_MODELS, TITAN_V03_CONFIGS,
                                                        TITAN_VERSIONS, model_key)

NAMES = names()
REFUSED = {"lora-8b-dp8": "no LoRA", "pass-qlora-llama3-8b-rtx4090": "no LoRA",
           "fail-batch-divisible": "not a multiple", "fail-sequence-divisible": "seq_len",
           "fail-sharding-valid": "shard group", "fail-dualpipe-valid": "DualPipe with two"}
# what a release refuses besides: 0.3 has no expert TP (v0.2.2 runs ETP = TP or 1)
REFUSED_BY: dict[str, dict[str, str]] = {
              "0.2": {},
              "0.3": {"fail-expert-grid-folds": "expert TP",
                      "fail-experts-divisible-by-ep": "expert TP",
                      "fail-sequence-parallel-with-moe": "expert TP"}}
TMP = Path(tempfile.mkdtemp(prefix="dtplan-titan-"))


@pytest.fixture(scope="module")
def tt() -> tuple[ModuleType, str]:
    """(torchtitan, the export release its ConfigManager reads), imported once."""
    module = pytest.importorskip("torchtitan")
    from importlib.metadata import version
    import torchtitan.config  # noqa: F401
    from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: F401
    full = version("torchtitan")
    return module, "0.2" if tuple(int(x) for x in full.split(".")[:2]) < (0, 3) else "0.3"


def parse(release: str, text: str, name: str) -> Any:
    from torchtitan.config import ConfigManager
    if release == "0.2":
        path = TMP / f"{name}.toml"
        path.write_text(text)
        return ConfigManager().parse_args(["--job.config_file", str(path)])
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    return ConfigManager().parse_args(tokens[tokens.index("torchtitan.train") + 1:])


def dims(release: str, cfg: Any, world: int) -> dict[str, int]:
    """ParallelDims as the trainer builds it, its mesh built on the fake backend."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.distributed.parallel_dims import ParallelDims
    p = cfg.parallelism
    if release == "0.2":   # train.py Trainer.init_distributed
        pd = ParallelDims(dp_shard=p.data_parallel_shard_degree,
                          dp_replicate=p.data_parallel_replicate_degree,
                          cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                          pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
                          etp=p.expert_tensor_parallel_degree, world_size=world)
    else:
        pd = ParallelDims.from_config(p, world)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        pd.build_mesh()
    finally:
        dist.destroy_process_group()
    return {"replicate": pd.dp_replicate, "shard": pd.dp_shard, "tp": pd.tp, "pp": pd.pp,
            "cp": pd.cp, "ep": pd.ep}


def layers_of(release: str, cfg: Any) -> int:
    """The layer count of the model torchtitan builds (never its debug model unasked)."""
    if release == "0.2":
        from torchtitan.protocols.train_spec import get_train_spec
        return int(get_train_spec(cfg.model.name).model_args[cfg.model.flavor].n_layers)
    return len(cfg.model_spec.model.layers)


def trainer_checks(release: str, cfg: Any, d: dict[str, int]) -> tuple[int, int]:
    """(global batch, accumulation) after the trainer's asserts (v0.2.2 train.py:196-215,
    parallelize.py:69; 0.3.0 trainer.py:307, 412-436)."""
    tr, p = cfg.training, cfg.parallelism
    if release == "0.2":
        divisor = d["tp"] * 2 * d["cp"]
    else:
        divisor = (d["tp"] if p.enable_sequence_parallel else 1) * (2 * d["cp"] if d["cp"] > 1
                                                                   else 1)
    assert tr.seq_len % divisor == 0
    batch = d["replicate"] * d["shard"]
    gbs = tr.global_batch_size if tr.global_batch_size >= 0 else tr.local_batch_size * batch
    assert gbs % (tr.local_batch_size * batch) == 0
    return gbs, gbs // (tr.local_batch_size * batch)


def stages(cfg: Any, layers: int, pp: int) -> int:
    """Stages per rank as pipeline_llm computes them (v0.2.2 pipeline_parallel.py:55-110)."""
    p = cfg.parallelism
    total = math.ceil((layers + p.pipeline_parallel_first_stage_less_layers
                       + p.pipeline_parallel_last_stage_less_layers)
                      / p.pipeline_parallel_layers_per_stage)
    assert total % pp == 0
    return total // pp


@pytest.mark.parametrize("name", NAMES)
def test_torchtitan_parses_each_export_to_the_plans_sizes(tt, name):
    _, release = tt
    w = written_as_expected("torchtitan", name, {**REFUSED, **REFUSED_BY[release]}, release)
    if w is None:
        return
    assert TITAN_VERSIONS[release] in w.text
    job, lay = w.job, w.job.layout
    known = TITAN_V02_MODELS if release == "0.2" else TITAN_V03_CONFIGS
    if model_key(job.model.name) not in known:   # no torchtitan config: the placeholder is refused
        with pytest.raises((ValueError, KeyError, SystemExit, ImportError)):
            layers_of(release, parse(release, w.text, name))
        return
    cfg = parse(release, w.text, name)
    if "world-size" in w.failing:   # the plan's grid is not its GPU count: ParallelDims says so
        with pytest.raises(AssertionError, match="WORLD_SIZE"):
            dims(release, cfg, job.gpus)
        return
    assert layers_of(release, cfg) == job.model.layers
    d = dims(release, cfg, job.gpus)
    assert (d["replicate"] * d["shard"], d["tp"], d["pp"], d["cp"], d["ep"]) == \
        (lay.dp, lay.tp, lay.pp, lay.cp, lay.ep)
    ddp = lay.dp == 1 or (lay.zero == 0 and lay.tp * lay.pp * lay.cp == 1)   # no FSDP at all
    # the plan's shard group counts DP·CP ranks; torchtitan's FSDP mesh is dp_shard × cp
    assert d["shard"] == (1 if ddp else (lay.shard_group or lay.dp * lay.cp) // lay.cp)
    gbs, accum = trainer_checks(release, cfg, d)
    assert gbs == job.global_batch
    if lay.pp > 1:   # every micro-batch goes through the pipeline in one local batch
        p = cfg.parallelism
        assert accum == 1 and p.pipeline_parallel_microbatch_size == lay.micro_batch
        assert cfg.training.local_batch_size // lay.micro_batch == accumulation(job)
        # a V schedule (DualPipeV) runs two stages on each rank
        assert stages(cfg, job.model.layers, lay.pp) == (2 if lay.schedule == "dualpipev"
                                                         else lay.chunks)
    else:
        assert (cfg.training.local_batch_size, accum) == (lay.micro_batch, accumulation(job))
    assert cfg.training.enable_cpu_offload == (lay.offload_optimizer != "none"
                                                or lay.offload_params != "none")
    assert cfg.compile.enable


def test_the_loads_cover_every_layout_family_torchtitan_runs(tt):
    _, release = tt
    loaded = {w.name for w in written("torchtitan", release) if w.text}
    assert {"zero1-dp64", "zero2-dp64", "zero3-dp64-full", "zero3-hsdp8", "tp2-zero3",
            "tp8-pp2-1f1b", "tp8-pp2-interleaved", "tp8-pp3-uneven", "tp4-cp2",
            "zero3-hsdp-cp2", "zero3-cpu-offload", "full-ft-7b-1gpu-offload",
            "llama3-70b-256xh100"} <= loaded


def test_a_mismatched_world_is_refused_by_torchtitan(tt):
    _, release = tt
    w = next(x for x in written("torchtitan", release) if x.name == "zero3-hsdp8")
    with pytest.raises(AssertionError, match="WORLD_SIZE|world"):
        dims(release, parse(release, w.text, "hsdp-world"), w.job.gpus * 2)


EP_BEYOND_SHARD = """model: qwen3-30b-a3b
hardware: h100
framework: torchtitan
gpus: 64
seq_len: 4096
layout: {tp: 1, pp: 1, zero: 3, shard_group: 4, ep: 8, micro_batch: 1, recompute: full}
batch: {global_batch: 64}
"""


def test_torchtitan_refuses_ep_beyond_the_shard_group_as_dtplan_does(tt, tmp_path):
    """EP 8 over shard groups of 4 (16 replicas): dtplan's ep-ranks fails it, and
    torchtitan's own ParallelDims refuses the written command line (b5bcd76c:
    "expert_parallel_degree must divide dp_shard * cp * tp"; 0.3.0 fails building the mesh,
    its efsdp 4 / 8 = 0)."""
    from conftest import run_dtplan
    _, release = tt
    plan = tmp_path / "ep.yaml"
    plan.write_text(EP_BEYOND_SHARD)
    rules = {x["name"]: x["status"] for x in run_dtplan("check", plan, "-f", "json")
             .json()["files"][0]["rules"]}
    assert rules["ep-ranks"] == "fail"
    out = tmp_path / "train.sh"
    args = ["export", plan, "--to", "torchtitan", "--allow-failing", "-o", out]
    r = run_dtplan(*args, "--torchtitan-version", release, cwd=tmp_path)
    assert r.code == 0, r.err
    with pytest.raises(ValueError, match="expert_parallel_degree|is 0, but"):
        dims(release, parse(release, out.read_text(), "ep-beyond-shard"), 64)
