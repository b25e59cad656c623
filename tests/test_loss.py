"""The loss's peak (engine/loss.py): whole, chunked (torchtitan, torchtune), fused linear-CE."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.engine import loss
from planner.engine.activations import logits_bytes
from planner.specs.framework import load_framework
from planner.specs.knobs import Layout

sizes = st.fixed_dictionaries(dict(
    tokens=st.integers(1, 1 << 20), vocab=st.integers(1000, 300_000), hidden=st.integers(64, 32768),
    bytes_per_logit=st.sampled_from((6.0, 10.0, 12.0, 16.0)), whole=st.sampled_from((0.0, 2.0)),
    acc=st.sampled_from((0.0, 2.0, 4.0))))


@settings(max_examples=200, deadline=None)
@given(sizes, st.integers(2, 512), st.integers(1, 512))
def test_more_chunks_never_raise_the_loss_peak(d, n, m):
    lo, hi = sorted((n, m))
    at = lambda c: loss.loss_peak_bytes(d["tokens"], d["vocab"], d["hidden"],  # noqa: E731
                                        d["bytes_per_logit"], chunks=c, whole_bytes=d["whole"],
                                        accumulator_bytes=d["acc"])
    assert at(hi) <= at(lo) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(sizes, st.integers(1, 64))
def test_chunked_never_above_whole_when_the_chunk_gradient_fits_a_logit_share(d, n):
    """Chunking adds only the wrapper's [T, h] accumulator: it never costs more than the whole
    loss where the logit bytes it frees exceed the accumulator's."""
    whole = loss.loss_peak_bytes(d["tokens"], d["vocab"], d["hidden"], d["bytes_per_logit"])
    if d["vocab"] * (d["bytes_per_logit"] - min(d["whole"], d["bytes_per_logit"])) \
            * (1 - 1 / n) >= d["hidden"] * d["acc"]:
        assert loss.loss_peak_bytes(d["tokens"], d["vocab"], d["hidden"], d["bytes_per_logit"],
                                    chunks=n, whole_bytes=d["whole"],
                                    accumulator_bytes=d["acc"]) <= whole * (1 + 1e-12)


def test_whole_loss_is_the_old_logits_term():
    assert loss.loss_peak_bytes(8192, 128256, 4096, 6.0) == logits_bytes(
        8192, 1, 128256, 1, logits_bytes_per_elem=6.0, copy_bytes_per_elem=0.0)


def test_fused_linear_cross_entropy_holds_a_hidden_sized_chunk_and_gradient():
    # Liger: chunk = next_pow2(ceil(8192 / ceil(128256 / 4096))) = next_pow2(256) = 256 tokens
    got = loss.loss_peak_bytes(8192, 128256, 4096, 4.0, fused=True)
    assert got == 256 * 128256 * 4.0 + 8192 * 4096 * 2.0
    assert got < loss.loss_peak_bytes(8192, 128256, 4096, 4.0, chunks=8)


def test_torchtune_prices_its_chunked_loss_below_the_whole_one():
    """Llama-3-8B, 8K tokens: HF-style whole fp32 loss (fsdp profile) 12 B per logit; torchtune's
    8 chunks keep the bf16 logits whole and one chunk's 10 B: 2 + 10/8 = 3.25 B per logit."""
    lay = Layout(finetune="lora", micro_batch=1, recompute="full")
    runs = {fw: planner.estimate(planner.get_preset("llama3-8b"), planner.load_profile("h100"), 1,
                                 lay, seq_len=8192, global_batch=8,
                                 framework=load_framework(fw)).stages[0].items["loss"]
            for fw in ("fsdp", "torchtune")}
    logits = 8192 * 128256
    assert runs["fsdp"] == pytest.approx(logits * 12.0)
    assert runs["torchtune"] == pytest.approx(logits * (2.0 + 12.0 / 8 - 2.0 / 8))
