"""Through the real `dtplan` entry point: every real file read; a corrupted copy of each kind
(made here, in tmp_path) exits 2 with one line naming file and line; a crafted pickle refused."""

from __future__ import annotations

import gzip
import json
import pickle
import re

import pytest

from evidence_paths import real, real_dir


def _two(r, path, line):
    assert r.code == 2, r
    assert r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    assert f"{path}:{line}:" in r.err, r.err


def test_every_real_fixture_is_read_json(dtplan):
    d = real_dir()
    if d is None:
        pytest.skip("shared/fixtures/real not present")
    r = dtplan("calibrate", "--from", d, "-f", "json")
    assert r.code == 0, r
    ev = r.json()["evidence"]
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.suffix != ".md")
    assert len(ev) == len(files)
    kinds = {e["kind"] for e in ev}
    assert kinds == {"nccl-tests", "training-log", "profiler-trace", "memory", "job-config"}
    ar = next(e for e in ev if e["path"].endswith("superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt"))
    assert ar["nccl"]["busbw_at_largest_gbps"] == 235.26 and ar["ranks"] == 8


def test_table_and_markdown(dtplan):
    p = real("training/torchtitan-pr1690_qwen3-32b_h100-8gpu-fsdp8_EXCERPT.log")
    r = dtplan("calibrate", "--from", p)
    assert r.code == 0 and "1,874 tok/s/GPU" in r.out and "389.9 TFLOP/s/GPU" in r.out, r.out
    md = dtplan("calibrate", "--from", real("traces/hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz"),
                "-f", "markdown")
    assert md.code == 0 and "| comm all_reduce |" in md.out and "| sum (= mean step) |" in md.out


def _corrupt_text(src, tmp_path, pattern, repl, name):
    text = src.read_text(encoding="utf-8")
    m = re.search(pattern, text, re.M)
    assert m, pattern
    line = text.count("\n", 0, m.start()) + 1
    out = tmp_path / name
    out.write_text(text[:m.start()] + repl + text[m.end():], encoding="utf-8")
    return out, line


@pytest.mark.parametrize("rel,pattern,repl", [
    ("nccl/superbench_a100-sxm4-40gb-x8_all_reduce_perf.txt", r"132\.44  231\.76", "132.44  23x.76"),
    ("nccl/nccl-tests-issue214_a40-2node-1gpu-each_sendrecv_perf_EXCERPT.txt", r"0\.06    0\.06", "0.06    N/A"),
    ("training/bigscience_megatron-lm_gpt-18b_v100-32gb_4x4_tp4-pp4.log", r"\(ms\): 1377\.4", "(ms): 13#7.4"),
    ("training/torchtitan-pr950_llama3-debugmodel_h100_EXCERPT.log", r"tps: 205,287", "tps: 2o5,287"),
    ("training/megatron-lm-issue756_mixtral-8x7b_h100-16gpu_EXCERPT.log", r"max allocated: 54250\.98583984375", "max allocated: 54250.9x"),
    ("memory/pytorch-issue35901_memory_summary_EXCERPT.txt", r"\| Active memory         \|    1062 MB", "| Active memory         |    lots"),
])
def test_corrupted_text_copy_exit_2(dtplan, tmp_path, rel, pattern, repl):
    bad, line = _corrupt_text(real(rel), tmp_path, pattern, repl, "bad_" + real(rel).name)
    _two(dtplan("calibrate", "--from", bad), bad, line)


def test_corrupted_golden_values(dtplan, tmp_path):
    src = real("training/megatron-lm-ci_mixtral-8x7b_tp2-pp4-vpp-ep8_dgx-h100_golden-values.json")
    text = src.read_text()
    at = text.index('"iteration-time"')
    at = text.index('"25":', at)
    bad = tmp_path / "golden.json"
    bad.write_text(text[:at] + '"25": "fast"' + text[text.index(",", at):])
    _two(dtplan("calibrate", "--from", bad), bad, text.count("\n", 0, at) + 1)


def test_truncated_trace_and_timeline(dtplan, tmp_path):
    raw = gzip.open(real("traces/hta_a100_2rank_ddp_nccl-metadata.pt.trace.json.gz")).read()
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    r = dtplan("calibrate", "--from", bad)
    assert r.code == 2 and f"{bad}:" in r.err and "invalid trace JSON" in r.err, r
    tl = json.loads(gzip.open(real("memory/hta_memory_timeline.raw.gz")).read())
    tl[3][3] = 9                                          # a category the profiler has not
    bad = tmp_path / "timeline.raw.json"
    bad.write_text("[\n" + ",\n".join(json.dumps(e) for e in tl) + "\n]\n")
    _two(dtplan("calibrate", "--from", bad), bad, 5)


def test_broken_yaml_config(dtplan, tmp_path):
    src = real("training/megatron-lm-ci_mixtral-8x7b_tp2-pp4-vpp-ep8_model_config.yaml")
    lines = src.read_text().splitlines()
    lines[5] = "  NCCL: [unclosed"
    bad = tmp_path / "model_config.yaml"
    bad.write_text("\n".join(lines) + "\n")
    r = dtplan("calibrate", "--from", bad)
    assert r.code == 2 and f"{bad}:" in r.err and "invalid YAML" in r.err, r


class _Evil:
    def __reduce__(self):
        import os
        return (os.system, ("echo pwned > /dev/null",))


def test_crafted_pickle_is_refused(dtplan, tmp_path):
    bad = tmp_path / "snapshot.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "x": _Evil()}))
    r = dtplan("calibrate", "--from", bad)
    _two(r, bad, 1)
    assert "refusing to load" in r.err and ("posix.system" in r.err or "os.system" in r.err)


def test_unknown_and_missing_files(dtplan, tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello\nworld\n")
    _two(dtplan("calibrate", "--from", other), other, 1)
    r = dtplan("calibrate", "--from", tmp_path / "absent.log")
    assert r.code == 2 and "--from: " in r.err and "file not found" in r.err
