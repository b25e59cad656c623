"""Packed documents (the doc_tokens knob): documents of d tokens packed into each s-token
sequence attend only within themselves under variable-length flash attention, so the attention
FLOPs and the kernel's length are a document's, and MFU counts the attention they need; memory
and the other terms stay as they are."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.evaluation.estimate import estimate
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset

A100 = load_profile("a100-80g")
SEQ = 32768


def _est(model: str = "qwen2-7b", doc: int | None = None, flash: bool | None = None,
         seq: int = SEQ):
    lay = Layout(tp=4, dp=1, recompute="full", doc_tokens=doc)
    return estimate(get_preset(model), A100, 4, lay, seq_len=seq, global_batch=8,
                    flash_attention=flash)


def test_attention_flops_scale_with_the_document():
    # full attention: a query's keys are its document's, d/s of a whole sequence's
    whole, docs = _est(), _est(doc=4096)
    f_whole = whole.hardware_flops_per_step - _est(seq=SEQ, doc=1).hardware_flops_per_step
    f_docs = docs.hardware_flops_per_step - _est(seq=SEQ, doc=1).hardware_flops_per_step
    assert f_docs / f_whole == pytest.approx((4096 - 1) / (SEQ - 1), rel=1e-9)
    assert docs.step_time_s < whole.step_time_s
    # memory does not move; MFU's model FLOPs count each document's attention (the paper's
    # 12·L·s·a·d with s the document)
    assert docs.peak_memory_bytes == whole.peak_memory_bytes
    m = get_preset("qwen2-7b")
    assert docs.model_flops_per_step == pytest.approx(
        m.training_flops_per_token(4096) * 8 * SEQ, rel=1e-12)


def test_a_document_as_long_as_the_sequence_changes_nothing():
    for doc in (SEQ, 2 * SEQ):
        assert _est(doc=doc).step_time_s == _est().step_time_s


def test_unfused_attention_computes_the_whole_scores_anyway():
    # without flash attention the s×s scores are computed before the mask: no saving
    assert _est(doc=1024, flash=False).step_time_s == _est(flash=False).step_time_s


def test_a_window_inside_a_document():
    # Gemma 3 1B's local layers see 512 keys: a document of 512 or less sees no window at all,
    # a longer one the window within it (the score term takes the document as its sequence)
    g = get_preset("gemma3-1b")
    assert g.window == 512
    assert g.score_dim(256.0, True) == g.attn_dim
    assert g.score_dim(4096.0, True) < g.attn_dim
    assert _est("gemma3-1b", doc=2048).step_time_s < _est("gemma3-1b").step_time_s


@settings(max_examples=20, deadline=None)
@given(d1=st.integers(64, SEQ), d2=st.integers(64, SEQ))
def test_shorter_documents_never_take_longer(d1, d2):
    lo, hi = sorted((d1, d2))
    assert _est(doc=lo).step_time_s <= _est(doc=hi).step_time_s


def test_doc_tokens_through_the_cli_fit_and_a_plan(dtplan, tmp_path):
    args = ("--model", "qwen2-7b", "--hardware", "a100-80g", "--gpus", "4", "--seq-len",
            str(SEQ), "--global-batch", "8")
    lay = ("--tp", "4", "--sp", "--recompute", "full")
    base = dtplan("estimate", *args, *lay, "--format", "json").json()
    run = dtplan("estimate", *args, *lay, "--doc-tokens", "4096", "--format", "json")
    assert run.code == 0, run.stderr
    docs = run.json()
    assert docs["step_time_s"] < base["step_time_s"]
    assert any(n.startswith("Packed documents of 4,096 tokens") for n in docs["notes"])
    fit = dtplan("fit", *args, "--doc-tokens", "4096", "--top", "1", "--format", "json").json()
    best = fit["layouts"][0]
    assert best["layout"]["doc_tokens"] == 4096
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"model: qwen2-7b\nhardware: a100-80g\ngpus: 4\nseq_len: {SEQ}\n"
                    "layout:\n  tp: 4\n  pp: 1\n  sp: true\n  micro_batch: 1\n"
                    "  recompute: full\n  doc_tokens: 4096\nbatch:\n  global_batch: 8\n",
                    encoding="utf-8")
    checked = dtplan("check", str(plan), "--format", "json")
    assert checked.code == 0, checked.stderr
    summary = json.loads(checked.stdout)["files"][0]["summary"]
    assert summary["step_time_s"] == pytest.approx(docs["step_time_s"], rel=1e-12)
    bad = dtplan("estimate", *args, *lay, "--doc-tokens", "0")
    assert bad.code == 2 and "--doc-tokens" in bad.err and "Traceback" not in bad.err
