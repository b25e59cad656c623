"""Memory artifacts and profiler traces from real runs; our own snapshot pickle."""

from __future__ import annotations

import functools
import gzip
import json
import pickle

import numpy as np
import pytest

from planner.evidence import read_file
from evidence_paths import real

MIB = 2**20


@functools.lru_cache(maxsize=None)
def _trace(name: str):
    """Each real trace parsed once per session (the 16-rank one is 25 MB of JSON)."""
    return read_file(real("traces/" + name))


def test_per_rank_memory_by_pipeline_stage():
    e = read_file(real("memory/bigscience_megatron-deepspeed-3d_gpt-52b_v100-32gb_16x4_tp4-pp16_"
                       "per-rank-memory.log"))
    per = e.memory.per_rank
    assert sorted(per) == list(range(64))
    assert per[0] == pytest.approx(19961.072265625 * MIB)          # first stage holds the most
    assert per[61] == pytest.approx(18175.37841796875 * MIB)
    assert len({round(v) for v in per.values()}) > 8                # differs by stage
    assert (e.config["tp"], e.config["pp"], e.config["micro_batch_size"]) == (4, 16, 4)


def test_memory_summary_fairseq_joined_header():
    e = read_file(real("memory/fairseq-issue2442_memory_summary_v100-32gb_ddp-oom_EXCERPT.txt"))
    m = e.memory
    assert (m.allocated_bytes, m.peak_allocated_bytes) == (26377 * MIB, 26988 * MIB)
    assert m.counters == {"cuda_ooms": 1, "cudamalloc_retries": 6}


def test_memory_summary_pytorch_issue():
    e = read_file(real("memory/pytorch-issue35901_memory_summary_EXCERPT.txt"))
    m = e.memory
    assert (m.allocated_bytes, m.peak_allocated_bytes) == (1062 * MIB, 4877 * MIB)
    assert m.by_category_bytes["active_peak"] == 4877 * MIB and m.counters["cuda_ooms"] == 1


def test_hta_memory_timeline_peak():
    path = real("memory/hta_memory_timeline.raw.gz")
    e = read_file(path)
    data = json.loads(gzip.open(path).read())
    assert e.config["entries"] == 16845 and len(e.memory.by_category_bytes) == 8  # HTA: 8 categories
    # Independent check of the running-sum peak: group by timestamp, cumulative sum, max.
    arr = np.array(data, dtype=float)
    ts, inv = np.unique(arr[:, 0], return_inverse=True)
    per_t = np.bincount(inv, weights=arr[:, 2])
    assert e.memory.peak_allocated_bytes == pytest.approx(np.cumsum(per_t).max())
    assert sum(e.memory.by_category_bytes.values()) == pytest.approx(e.memory.peak_allocated_bytes)


def _snapshot() -> dict:
    """A small snapshot in torch.cuda.memory._snapshot()'s shape, written by us."""
    blocks = [{"address": 0, "size": 4 * MIB, "requested_size": 4 * MIB, "state": "active_allocated"},
              {"address": 4 * MIB, "size": 2 * MIB, "requested_size": 0, "state": "inactive"}]
    trace = [{"action": "alloc", "addr": 6 * MIB, "size": 10 * MIB, "stream": 0},
             {"action": "free_requested", "addr": 6 * MIB, "size": 10 * MIB, "stream": 0},
             {"action": "free_completed", "addr": 6 * MIB, "size": 10 * MIB, "stream": 0},
             {"action": "alloc", "addr": 0, "size": 4 * MIB, "stream": 0}]
    return {"segments": [{"device": 0, "address": 0, "total_size": 20 * MIB, "stream": 0,
                          "segment_type": "large", "allocated_size": 4 * MIB, "blocks": blocks}],
            "device_traces": [trace]}


def test_snapshot_pickle_plain(tmp_path):
    p = tmp_path / "snapshot.pickle"
    p.write_bytes(pickle.dumps(_snapshot(), protocol=4))
    e = read_file(p)
    m = e.memory
    assert (m.allocated_bytes, m.reserved_bytes) == (4 * MIB, 20 * MIB)
    # Backwards from 4 MiB: before the last alloc 0, before the free 10 MiB, before that alloc 0.
    assert m.peak_allocated_bytes == 10 * MIB
    assert m.fragmentation == pytest.approx(0.5)


@pytest.mark.parametrize("trace", [
    "hta_rank0_128rank-job_sampled.pt.trace.json.gz",
    "hta_rank1_128rank-job_sampled.pt.trace.json.gz",
    "hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz",
    "hta_a100-80gb_16rank_rank0.pt.trace.json.gz",
])
def test_trace_categories_sum_to_step_time(trace):
    e = _trace(trace)
    t = e.trace
    mean_step = sum(t.step_ms) / len(t.step_ms)
    assert sum(t.exclusive_ms.values()) == pytest.approx(mean_step, rel=0.02)
    for k, ov in t.overlapped_ms.items():               # overlapped + exposed = its busy time
        assert ov + t.exclusive_ms[k] <= t.busy_ms[k] + 1e-6
    assert t.exclusive_ms["gemm"] == pytest.approx(t.busy_ms["gemm"])   # GEMM comes first


def test_trace_sampled_128_rank_job():
    e = _trace("hta_rank0_128rank-job_sampled.pt.trace.json.gz")
    assert e.ranks == 128 and e.config["rank"] == 0 and e.gpu is None
    assert e.trace.steps == ["ProfilerStep#551", "ProfilerStep#552"]
    assert [round(x) for x in e.trace.step_ms] == [607, 623]                     # SOURCES
    # SendRecv kernels launched inside nccl:all_to_all / _all_gather_base annotations.
    assert {"comm:all_to_all", "comm:all_gather"} <= set(e.trace.exclusive_ms)


def test_trace_ddp_two_ranks():
    e = _trace("hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz")
    assert (e.ranks, e.gpu) == (2, "NVIDIA A100-PG509-200")
    assert e.trace.steps == [f"ProfilerStep#{i}" for i in (4, 5, 6)]
    assert all(219 <= s <= 225 for s in e.trace.step_ms)                          # ~220 ms
    assert e.trace.busy_ms["comm:all_reduce"] > 0 and "comm:broadcast" in e.trace.busy_ms


def test_trace_16_rank_a100_80gb():
    e = _trace("hta_a100-80gb_16rank_rank0.pt.trace.json.gz")
    assert (e.ranks, e.gpu) == (16, "NVIDIA A100-SXM4-80GB")
    assert len(e.trace.steps) == 5 and all(209 <= s <= 217 for s in e.trace.step_ms)
