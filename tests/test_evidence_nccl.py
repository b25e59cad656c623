"""nccl-tests outputs from real clusters: the figures their sources state."""

from __future__ import annotations

import pytest

from planner.evidence import read_file
from evidence_paths import DATA, real

SB = "nccl/superbench_a100-sxm4-40gb-x8_{}_perf.txt"


@pytest.mark.parametrize("test,largest,inplace,avg", [
    ("all_reduce", 235.26, 235.03, 68.4048),
    ("all_gather", 223.39, 230.07, 58.2651),       # SOURCES: 223 out-of-place, 230 in-place
    ("reduce_scatter", 231.52, 231.25, 60.168),
    ("alltoall", 224.31, 226.16, 58.6481),         # alltoall: redop header, no redop values
])
def test_superbench_a100_node(test, largest, inplace, avg):
    e = read_file(real(SB.format(test)))
    t = e.nccl
    assert (e.kind, t.collective, e.ranks, e.nodes, e.gpu) == (
        "nccl-tests", test, 8, 1, "A100-SXM4-40GB")
    assert t.largest.size_bytes == 8589934592
    assert t.largest.busbw_gbps == largest and t.largest.inplace_busbw_gbps == inplace
    assert t.avg_busbw_gbps == avg
    assert len(t.rows) == 34 and t.rows[0].size_bytes == 0


def test_gb200_nvl72_rack_excerpt():
    e = read_file(real("nccl/coreweave-pr43_gb200-nvl72-1rack-72gpu_all_reduce_perf.txt"))
    assert (e.ranks, e.nodes, e.gpu) == (72, 18, "NVIDIA Graphics Device")  # 18 hosts x 4
    assert round(e.nccl.largest.busbw_gbps) == 835                          # SOURCES: 835 GB/s
    assert [r.size_bytes for r in e.nccl.rows] == [2**29 * k for k in (1, 2, 4, 8, 16)]
    assert e.nccl.avg_busbw_gbps == 745.53


def test_three_node_hdr_excerpt_without_column_headers():
    e = read_file(real("nccl/nccl-tests-issue119_a100-sxm4-40gb-3node-4xhdr_all_reduce_perf_"
                       "EXCERPT.txt"))
    assert round(e.nccl.avg_busbw_gbps, 2) == 84.86                         # SOURCES
    assert e.nccl.largest.size_bytes == 133169160 and e.nccl.largest.busbw_gbps == 95.74
    assert len(e.nccl.rows) == 6 and e.gpu == "NVIDIA A100-SXM4-40GB"


def test_rank_prefixed_rows_split_by_the_launcher():
    e = read_file(real("nccl/nccl-issue1453_h100-8gpu-nodes-ib_all_reduce_perf_rank-prefixed_"
                       "EXCERPT.txt"))
    rows = {r.size_bytes: r for r in e.nccl.rows}
    assert sorted(rows) == [2**20 * 2**k for k in range(10)]                # 1 MiB .. 512 MiB
    assert rows[2**25].busbw_gbps == 29.50 and rows[2**26].busbw_gbps == 5.27  # the collapse
    assert rows[2**29].inplace_busbw_gbps == 5.33
    assert e.ranks is None and e.nccl.collective == "all_reduce"


def test_sendrecv_two_nodes_na_in_wrong_column():
    e = read_file(real("nccl/nccl-tests-issue214_a40-2node-1gpu-each_sendrecv_perf_EXCERPT.txt"))
    assert (e.nccl.collective, e.ranks, e.nodes, e.gpu) == ("sendrecv", 2, 2, "NVIDIA A40")
    assert [r.size_bytes for r in e.nccl.rows] == [256, 512, 1024, 2048, 4096]
    assert e.nccl.rows[0].time_us == 34.24 and e.nccl.largest.busbw_gbps == 0.13


def test_our_wrapped_and_tagged_table():
    """Our own file: a newer header naming the test, ANSI colour, mpirun tags, a wrapped row."""
    e = read_file(DATA / "nccl_wrapped_tagged.txt")
    t = e.nccl
    assert t.collective == "reduce_scatter" and (e.ranks, e.nodes) == (16, 2)
    assert [r.size_bytes for r in t.rows] == [1048576, 2097152, 4194304]
    assert t.rows[1].busbw_gbps == 40.25 and t.rows[1].inplace_busbw_gbps == 40.5
    assert t.rows[2].time_us == 250.0
