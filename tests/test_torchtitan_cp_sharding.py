"""torchtitan's FSDP mesh is dp_shard × cp (distributed/parallel_dims.py build_mesh, b5bcd76c:
"when cp is used, FSDP is also applied"): a plan's shard group counts DP·CP ranks, as the
memory model shards over them, so it holds whole CP groups there (shard_spans_cp); export
writes data_parallel_shard_degree = group ÷ CP and `check` reads the same group back."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from planner.api import problem
from planner.search.fast import SearchSpace, search
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.presets import get_preset

PLAN = """model: llama3-8b
hardware: h100
framework: torchtitan
gpus: 16
seq_len: 8192
layout: {{tp: 1, cp: {cp}, pp: 1, dp: {dp}, zero: 3, shard_group: {group}, micro_batch: 1,
          recompute: full}}
batch: {{global_batch: 64}}
"""


def _plan(tmp_path: Path, cp: int, dp: int, group: int) -> Path:
    plan = tmp_path / f"cp{cp}-g{group}.yaml"
    plan.write_text(PLAN.format(cp=cp, dp=dp, group=group), encoding="utf-8")
    return plan


def test_export_writes_the_group_over_cp_and_check_reads_it_back(dtplan, tmp_path):
    out = tmp_path / "train.sh"
    r = dtplan("export", _plan(tmp_path, 2, 8, 4), "--to", "torchtitan", "-o", out,
               cwd=tmp_path)
    assert r.code == 0, r.err
    text = out.read_text()
    degree = {k: int(v) for k, v in re.findall(r"--parallelism\.([a-z-]+-degree) (\d+)", text)}
    assert (degree["data-parallel-replicate-degree"], degree["data-parallel-shard-degree"],
            degree["context-parallel-degree"]) == (4, 2, 2)
    j = dtplan("check", out, "--engine", "torchtitan", "--gpus", "16", "--hardware", "h100",
               "--model", "llama3-8b", "-f", "json").json()
    rule = next(x for x in j["files"][0]["rules"] if x["name"] == "sharding-valid")
    assert rule["measured"] == "shard group 4"


def test_a_group_that_splits_a_cp_group_fails_and_is_not_exported(dtplan, tmp_path):
    plan = _plan(tmp_path, 4, 4, 2)
    j = dtplan("check", plan, "-f", "json").json()
    rule = next(x for x in j["files"][0]["rules"] if x["name"] == "sharding-valid")
    assert rule["status"] == "fail" and "a multiple of CP 4" in rule["limit"]
    r = dtplan("export", plan, "--to", "torchtitan", "--allow-failing", "-o",
               tmp_path / "x.sh", cwd=tmp_path)
    assert r.code == 2 and "a group holds whole CP groups" in r.err, r.err
    assert dtplan("check", _plan(tmp_path, 2, 8, 2)).code == 0   # one whole CP group


def test_the_search_offers_torchtitan_groups_of_whole_cp_groups_only():
    for name in ("torchtitan", "fsdp"):   # Accelerate's dp_shard_cp mesh too
        assert load_framework(name).time.shard_spans_cp, name
    for name in ("megatron", "deepspeed"):
        assert not load_framework(name).time.shard_spans_cp, name
    p = problem(get_preset("llama3-8b"), load_profile("h100"), 32, seq_len=32768,
                global_batch=32, framework=load_framework("torchtitan"))
    res = search(p, SearchSpace(tp=1, pp=1, cp=4, micro_batch=1, recompute="full"),
                 dominated=True)
    c = res.candidates.take(res.order)
    grouped = c.shard > 0
    assert grouped.any() and (c.shard[grouped] % 4 == 0).all()
    assert np.isin(4, c.shard)
