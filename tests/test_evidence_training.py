"""Training logs from real clusters: the figures their sources state."""

from __future__ import annotations

import pytest

from planner.evidence import read_file
from evidence_paths import DATA, real

MIB = 2**20


def test_bloom_176b_iteration_time_and_tflops():
    e = read_file(real("training/bigscience_bloom-176b_megatron-deepspeed_a100-80gb_48x8_"
                       "tp4-pp12-dp8.log"))
    st = e.steps
    assert 105 <= st.step_time_s.median <= 106.5 and st.step_time_s.n == 12   # "~105-106 s"
    assert 147 <= st.tflops_per_gpu.median <= 149                             # "147-149 TFLOPs"
    assert st.tflops_per_gpu.max == 149.02 and st.samples_per_s.median == pytest.approx(19.263)
    assert e.config["global_batch_size"] == 2048


@pytest.mark.parametrize("name,world,tp,pp,median_s", [
    ("bigscience_megatron-lm_gpt-18b_v100-32gb_4x4_tp4-pp4.log", 16, 4, 4, 1.3806),
    ("bigscience_megatron-lm_gpt-65b_v100-32gb_16x4_tp4-pp16.log", 64, 4, 16, 2.74005),
])
def test_megatron_v100_pp_pair(name, world, tp, pp, median_s):
    e = read_file(real("training/" + name))
    assert (e.ranks, e.config["tp"], e.config["pp"], e.config["dp"]) == (world, tp, pp, 1)
    assert e.config["seq_length"] == 1024 and e.gpu.startswith("Tesla V100-SXM2")
    assert e.steps.warmup_dropped == 1                     # iteration 10 averages steps 1-10
    assert e.steps.step_time_s.median == pytest.approx(median_s)
    assert "backward-params-all-reduce" in e.steps.timers_ms
    tok = 4 * 1024 / median_s / world                      # gbs 4 x seq 1024
    assert e.steps.tokens_per_s_per_gpu.median == pytest.approx(tok)
    assert len(e.memory.per_rank) == world                  # a memory line per rank


def test_megatron_18b_memory_per_stage():
    e = read_file(real("training/bigscience_megatron-lm_gpt-18b_v100-32gb_4x4_tp4-pp4.log"))
    assert e.memory.per_rank[0] == pytest.approx(26204.5595703125 * MIB)   # first stage
    assert e.memory.per_rank[8] == pytest.approx(24299.009765625 * MIB)
    assert e.memory.peak_reserved_bytes == pytest.approx(30806.0 * MIB)


def test_oldest_megatron_zero3():
    e = read_file(real("training/bigscience_megatron-lm-v1.1.5-deepspeed-zero3_gpt-52b_"
                       "v100-32gb_16x4_tp4-dp16.log"))
    assert (e.ranks, e.config["tp"]) == (64, 4)             # "world size: 64 and model-parallel size: 4"
    assert e.steps.step_time_s.median == pytest.approx((125.9124 + 123.9078) / 2)
    assert e.steps.tflops_per_gpu.median == pytest.approx((40.6 + 41.26) / 2)
    assert e.memory.peak_allocated_bytes == pytest.approx(26118.2294921875 * MIB)
    assert e.memory.per_rank == {}                          # the line has no rank tag


def test_hf_trainer_zero3_offload():
    e = read_file(real("training/bigscience_hf-trainer-deepspeed-zero3_gpt-25b_v100-32gb_4x4.log"))
    st = e.steps
    assert st.steps_read == 16 and st.warmup_dropped == 1
    assert e.config["train_runtime"] == pytest.approx(919.0933)   # the last rank's metrics line
    assert st.samples_per_s.median == 1.088
    assert 55 <= st.step_time_s.median <= 60                 # 919 s / 16 steps = 57 s


def test_megatron_mixtral_h100_issue():
    e = read_file(real("training/megatron-lm-issue756_mixtral-8x7b_h100-16gpu_EXCERPT.log"))
    st = e.steps
    assert st.tflops_per_gpu.min == 220.4 and st.tflops_per_gpu.max == 243.6   # 220-244
    assert st.step_time_s.n == 8 and e.config["ep"] == 8
    assert e.memory.per_rank[1] == pytest.approx(54250.98583984375 * MIB)


def test_torchtitan_qwen3_32b():
    e = read_file(real("training/torchtitan-pr1690_qwen3-32b_h100-8gpu-fsdp8_EXCERPT.log"))
    st = e.steps
    assert (st.tokens_per_s_per_gpu.median, st.tflops_per_gpu.median, st.mfu_pct.median) == (
        1874, 389.87, 39.42)
    assert e.memory.peak_reserved_bytes == pytest.approx(81.85 * 2**30)
    assert e.memory.capacity_bytes / 2**30 == pytest.approx(95.0, abs=0.1)   # H100 96 GB


def test_torchtitan_debug_model_with_warning_line():
    e = read_file(real("training/torchtitan-pr950_llama3-debugmodel_h100_EXCERPT.log"))
    st = e.steps
    assert st.steps_read == 8 and st.warmup_dropped == 0    # steps 22-29: past warm-up
    assert st.tokens_per_s_per_gpu.min == 169197 and st.tokens_per_s_per_gpu.max == 212462
    assert e.memory.capacity_bytes / 2**30 == pytest.approx(78.8, abs=0.2)   # 1.41 GiB = 1.79 %


def test_nemo_progress_bar():
    e = read_file(real("training/nemo-issue7957_megatron-gpt-7b_ptl-progress_EXCERPT.log"))
    assert e.format == "nemo" and e.steps.step_time_s.median == 0.615


def test_deepspeed_flops_profiler():
    e = read_file(real("training/deepspeed-docs_flops-profiler_bert-large_a100-1gpu_bs80.txt"))
    assert e.steps.step_time_s.median == pytest.approx(0.18473)
    assert e.steps.samples_per_s.median == 433.07
    assert e.config["batch_size_per_gpu"] == 80 and e.ranks == 1


@pytest.mark.parametrize("name,median_s,peak_gb,alloc_gb", [
    ("tp2-pp4-vpp-ep8_dgx-h100", 3.30, 35.51, 19.74),
    ("tp2-pp4-vpp-ep8_dgx-a100", 3.76, None, None),
    ("tp2-pp4-ep4-alltoall_dgx-h100", 8.96, 25.4, None),
    ("tp2-pp4-ep4-alltoall_dgx-a100", 22.23, 25.4, None),
])
def test_megatron_ci_golden_values(name, median_s, peak_gb, alloc_gb):
    e = read_file(real(f"training/megatron-lm-ci_mixtral-8x7b_{name}_golden-values.json"))
    assert e.steps.step_time_s.median == pytest.approx(median_s, abs=0.01)
    if peak_gb:
        assert e.memory.peak_allocated_bytes / 1e9 == pytest.approx(peak_gb, abs=0.05)
    if alloc_gb:
        assert e.memory.allocated_bytes / 1e9 == pytest.approx(alloc_gb, abs=0.01)


def test_golden_a100_first_step_is_warmup():
    e = read_file(real("training/megatron-lm-ci_mixtral-8x7b_tp2-pp4-vpp-ep8_dgx-a100_"
                       "golden-values.json"))
    assert e.steps.warmup_dropped == 1 and e.steps.step_time_s.max < 179   # step 1 = 179 s


@pytest.mark.parametrize("name,tp,pp,ep,gbs", [("tp2-pp4-vpp-ep8", 2, 4, 8, 256),
                                               ("tp2-pp4-ep4-alltoall", 2, 4, 4, 1024)])
def test_megatron_ci_model_config(name, tp, pp, ep, gbs):
    e = read_file(real(f"training/megatron-lm-ci_mixtral-8x7b_{name}_model_config.yaml"))
    c = e.config
    assert e.kind == "job-config" and (c["tp"], c["pp"], c["ep"], c["global_batch_size"]) == (
        tp, pp, ep, gbs)
    assert c["seq_length"] == 4096 and c["sequence_parallel"] is True


def test_our_deepspeed_and_coloured_torchtitan_logs():
    ds = read_file(DATA / "deepspeed_throughput.log")
    assert ds.steps.samples_per_s.median == 40.0 and ds.steps.warmup_dropped == 1
    assert ds.memory.peak_allocated_bytes == pytest.approx(30.5 * 2**30)
    tt = read_file(DATA / "torchtitan_colour.log")
    assert tt.steps.tokens_per_s_per_gpu.median == 3000 and tt.steps.warmup_dropped == 1
    assert tt.gpu == "NVIDIA H100" and tt.memory.capacity_bytes == pytest.approx(79.1 * 2**30)
