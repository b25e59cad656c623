"""Issue 30: TP communication overlap (Transformer Engine userbuffers, Megatron-Core
--tp-comm-overlap) priced as a framework capability, off by default, and the MLPerf rows that
set it (and bf16 gradient reduction) reading it from their own configs."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.calibration.runs import load_runs, run_framework
from planner.engine.overlap import split_exposed
from planner.evaluation.candidates import Candidates
from planner.evaluation.evaluate import evaluate
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset


def test_a_split_collective_exposes_its_first_chunk_and_each_chunks_excess():
    # g = 4, k = 4, c = 2, σ = 0: chunk 1 s waits; each of the other 3 exceeds its 0.5 s by 0.5
    assert float(split_exposed(4.0, 2.0, 4, 0.0)) == pytest.approx(1.0 + 3 * 0.5, abs=1e-15)
    # plenty of GEMM: the first chunk, and each other one slows the GEMM beside it by σ·1 s
    assert float(split_exposed(4.0, 100.0, 4, 0.2)) == pytest.approx(1.0 + 3 * 0.2, abs=1e-15)
    assert float(split_exposed(4.0, 100.0, 1, 0.2)) == 4.0    # one chunk: nothing runs beside


@settings(max_examples=80, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.integers(1, 16), st.floats(0.0, 0.99))
def test_split_exposure_lies_between_one_chunk_and_the_whole(g, c, k, sigma):
    e = float(split_exposed(g, c, k, sigma))
    assert g / k - 1e-12 <= e <= g + 1e-12
    assert e >= float(split_exposed(g, c + 1.0, k, sigma)) - 1e-12   # more GEMM hides more
    assert e <= float(split_exposed(g, c, k, min(sigma + 0.01, 0.99))) + 1e-12  # more slowdown


def _time(tp_overlap: bool, sp: bool):
    fw = load_framework("megatron")
    fw = dataclasses.replace(fw, time=dataclasses.replace(fw.time, tp_comm_overlap=tp_overlap))
    p = problem(get_preset("llama3-70b"), load_profile("h100"), 64, seq_len=4096,
                global_batch=256, framework=fw).resolved()
    lay = Layout(tp=8, pp=2, dp=4, zero=1, micro_batch=1, sp=sp, recompute="selective")
    return evaluate(p, Candidates.from_layouts([lay])).time


def test_megatron_prices_no_tp_overlap_by_default():
    assert load_framework("megatron").time.tp_comm_overlap is False
    off = _time(False, True)
    frac = load_profile("h100").efficiency.tp_exposed_fraction
    assert float(off.tp_exposed[0]) == pytest.approx(frac * float(off.tp_total[0]), rel=1e-12)


def test_tp_overlap_hides_tp_time_under_sequence_parallel_only():
    off, on = _time(False, True), _time(True, True)
    assert float(on.tp_total[0]) == pytest.approx(float(off.tp_total[0]), rel=1e-12)
    assert 0.0 < float(on.tp_exposed[0]) < float(off.tp_exposed[0])
    hidden = float(off.tp_exposed[0] - on.tp_exposed[0])
    # the step sheds the hidden time and the bubble's share of it ((p − 1) slots of t_mb)
    assert float(off.step[0] - on.step[0]) == pytest.approx(
        hidden + float(off.bubble[0] - on.bubble[0]), rel=1e-9)
    assert float(off.bubble[0]) > float(on.bubble[0])
    no_sp_off, no_sp_on = _time(False, False), _time(True, False)
    assert float(no_sp_on.tp_exposed[0]) == float(no_sp_off.tp_exposed[0])


CITE = re.compile(r"[\w+./-]+\.(sh|yaml|py):\d+")


def test_every_mlperf_row_states_its_tp_overlap_and_reduce_dtype_with_file_and_line():
    rows = [r for r in load_runs().runs if r.id.startswith("mlperf-")]
    assert len(rows) >= 40
    for r in rows:
        assert "time.tp_comm_overlap" in r.settings, r.id
        assert CITE.search(r.assumed["settings"]), r.id


def test_a_run_is_priced_with_what_its_config_sets():
    runs = {r.id: r for r in load_runs().runs}
    gpt3 = run_framework(runs["mlperf-v4.0-nvidia-eos-dfw-n1452-ngc24.04-nemo-gpt3"]).time
    assert gpt3.tp_comm_overlap and gpt3.reduce_dtype == "bf16"
    # University of Florida's 8B: TP_COMM_OVERLAP=False; its implementation folder's pretrain.py
    # sets grad_reduce_in_fp32=False (bf16, not the profile's fp32)
    uf = run_framework(runs["mlperf-v5.1-university-of-florida-hpg.dgxb200x8.n1-llama31-8b"]).time
    assert not uf.tp_comm_overlap and uf.reduce_dtype == "bf16"
    assert load_framework("megatron").time.reduce_dtype == "fp32"


DENSE = ("name: d\nmodel: llama3-70b\nhardware: h100\ngpus: 64\nseq_len: 4096\n"
         "layout: {tp: 8, pp: 2, zero: 1, micro_batch: 1, recompute: selective}\n"
         "batch: {global_batch: 256}\n")


def test_megatron_arguments_with_tp_comm_overlap_are_priced_with_it(dtplan, tmp_path):
    plan = tmp_path / "d.yaml"
    plan.write_text(DENSE)
    out = tmp_path / "launch.sh"
    assert dtplan("export", plan, "--to", "megatron", "-o", out).code == 0
    text = out.read_text()
    assert "--sequence-parallel" in text and "--tp-comm-overlap" not in text
    plain = dtplan("check", out, "--engine", "megatron", "--hardware", "h100", "-f", "json")
    assert plain.code == 0, plain.out + plain.err
    out.write_text(text.replace("--sequence-parallel", "--sequence-parallel --tp-comm-overlap"))
    on = dtplan("check", out, "--engine", "megatron", "--hardware", "h100", "-f", "json")
    assert on.code == 0, on.out + on.err
    step = on.json()["files"][0]["summary"]["step_time_s"]
    assert step < plain.json()["files"][0]["summary"]["step_time_s"]
