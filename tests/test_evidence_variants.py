"""Format variants the real fixtures do not show, in files we write here."""

from __future__ import annotations

import gzip
import json

import pytest

from planner.evidence import read_file


def _k(name, ts, dur, stream=7, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": 0, "stream": stream, "correlation": ts, **args}}


def test_small_llm_trace_with_flash_attention_and_overlap(tmp_path):
    """Two steps of 100 µs: a GEMM, a flash kernel, an all-gather half under the GEMM."""
    ev = []
    for s in (0, 100):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s // 100 + 1}",
                   "pid": 1, "tid": 1, "ts": s, "dur": 100})
        ev += [_k("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", s + 0, 40),
               _k("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>", s + 40, 20),
               _k("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                  s + 20, 40, stream=20),
               {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 9,
                "ts": s + 70, "dur": 10, "args": {"device": 0}}]
    p = tmp_path / "rank0.pt.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": ev, "distributedInfo": {
        "rank": 0, "world_size": 8}}).encode()))
    t = read_file(p).trace
    assert t.step_ms == [0.1, 0.1]
    ex = {k: round(v * 1e3, 6) for k, v in t.exclusive_ms.items()}     # µs per step
    assert ex == {"gemm": 40, "attention": 20, "other_compute": 0, "comm:all_gather": 0,
                  "memcpy": 10, "idle": 30}
    assert t.overlapped_ms["comm:all_gather"] * 1e3 == pytest.approx(40)   # 20..60 under compute


def test_trace_without_profiler_steps_is_one_window(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [_k("ampere_sgemm_128x64_nn", 10, 30),
                                             _k("elementwise_kernel", 50, 10)]}))
    e = read_file(p)
    assert e.trace.steps == ["whole trace"] and e.trace.step_ms == [0.05]
    assert e.trace.exclusive_ms["idle"] == pytest.approx(0.01)


def test_golden_values_as_a_list(tmp_path):
    p = tmp_path / "golden_values.json"
    p.write_text(json.dumps({"iteration-time": {"start_step": 1, "end_step": 16, "step_interval": 5,
                                                "values": [50.0, 2.0, 2.2, 2.1]}}))
    e = read_file(p)
    assert e.steps.warmup_dropped == 1 and e.steps.step_time_s.median == pytest.approx(2.1)


def test_sampled_memory_timeline(tmp_path):
    p = tmp_path / "timeline.json"
    p.write_text(json.dumps([[1, 2, 3], [[1, 0, 0, 0, 5, 0, 0, 0], [1, 0, 0, 0, 9, 2, 0, 0],
                                         [1, 0, 0, 0, 1, 0, 0, 0]]]))
    m = read_file(p).memory
    assert m.peak_allocated_bytes == 12 and m.by_category_bytes["activation"] == 9


def test_nemo2_line_and_collector_timestamps(tmp_path):
    p = tmp_path / "nemo2.log"
    p.write_text("".join(f"Training epoch 0, iteration {i}/99 | lr: 1e-05 | global_batch_size: 32 |"
                         f" global_step: {i} | reduced_train_loss: 9.1 | train_step_timing in s: "
                         f"{t} | consumed_samples: {32 * (i + 1)}\n"
                         for i, t in ((0, 9.5), (1, 1.25), (2, 1.5), (3, 1.75))))
    e = read_file(p)
    assert e.format == "nemo" and e.steps.step_time_s.median == 1.5
    q = tmp_path / "all_gather_perf.log"
    q.write_text("2026-01-05T10:00:00.000Z #       size         count      type     time   algbw"
                 "   busbw  error     time   algbw   busbw  error\n"
                 "2026-01-05T10:00:00.001Z      1048576         32768     float    72.95   14.37"
                 "   12.58    N/A    73.07   14.35   12.56    N/A\n"
                 "2026-01-05T10:00:00.002Z      2097152         65536     float    77.28   27.14"
                 "   23.75    N/A    75.84   27.65   24.20    N/A\n")
    t = read_file(q).nccl
    assert t.collective == "all_gather" and t.largest.busbw_gbps == 23.75


def test_two_nccl_runs_in_one_file_refused(tmp_path):
    row = "     1048576        262144     float     sum      -1    74.78   14.02   24.54      0    76.17   13.77   24.09      0\n"
    head = "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5\n"
    p = tmp_path / "all_reduce_perf.txt"
    p.write_text(head + row + head + row)
    with pytest.raises(Exception) as e:
        read_file(p)
    assert f"{p}:3:" in str(e.value) and "second nccl-tests run" in str(e.value)


def test_deepspeed_pipeline_engine_lines(tmp_path):
    p = tmp_path / "ds_pipe.log"
    p.write_text("".join(f"[2026-01-05 10:00:0{i},000] [INFO] [engine.py:2000:_exec] steps: {10 * i} "
                         f"loss: 2.{i}000 iter time (s): {t} samples/sec: {64 / t:.3f}\n"
                         for i, t in ((1, 9.0), (2, 2.0), (3, 2.5), (4, 2.25))))
    st = read_file(p).steps
    assert st.warmup_dropped == 1 and st.step_time_s.median == 2.25
    assert st.samples_per_s.median == pytest.approx(64 / 2.25, rel=1e-3)


def test_older_torchtitan_wps(tmp_path):
    p = tmp_path / "titan_2024.log"
    p.write_text("".join(f"[rank0]:2024-05-01 10:00:0{i},000 - root - INFO - step: {i * 10}  "
                         f"loss: 9.{i}  memory: 30.00GiB(31.58%)  wps: {w:,}  mfu: 40.0%\n"
                         for i, w in ((1, 1000), (2, 5000), (3, 5200))))
    st = read_file(p).steps
    assert st.tokens_per_s_per_gpu.median == 5100 and st.warmup_dropped == 1


def test_log_cut_mid_line_is_forgiven_only_at_the_end(tmp_path):
    good = "".join(f" iteration {i}/ 100 | elapsed time per iteration (ms): {t} | global batch size: 8 |\n"
                   for i, t in ((1, 900.0), (2, 100.0), (3, 110.0)))
    cut = tmp_path / "killed.log"
    cut.write_text(good + " iteration 4/ 100 | elapsed time per iteration (ms): 1x")
    e = read_file(cut)
    assert e.steps.step_time_s.median == pytest.approx(0.105) and "line 4" in e.notes[-1]
    bad = tmp_path / "corrupt.log"
    bad.write_text(" iteration 1/ 100 | elapsed time per iteration (ms): 1x |\n" + good)
    with pytest.raises(Exception) as err:
        read_file(bad)
    assert f"{bad}:1:" in str(err.value)
