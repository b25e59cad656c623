"""Context parallel memory: torch's ring attention working set (engine/ring_attention.py) and
how the estimate carries it (a working set of the layer that runs, not a per-micro-batch term)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine.ring_attention import ring_attention_working
from planner.evaluation.candidates import Problem
from planner.evaluation.estimate import estimate_problem
from planner.specs.budget import MemoryBudget
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile, with_overrides
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

GIB = 2.0**30


def test_405b_stage_layer_exact():
    """Llama 3.1 405B under TP 8, CP 8 at 262144: 32768 tokens a rank, 128/8 = 16 heads, d 128,
    E = 2^26; all-gather: forward (8·4 + 4 + 16)·E = 52·2^26 B, backward (32 + 4 + 28)·E = 4 GiB."""
    fwd, bwd = ring_attention_working(32768, 16, 128, 8, rotate="allgather")
    assert float(bwd) == 4.0 * GIB
    assert float(fwd) == 52.0 * 2**26


def test_8b_layer_exact():
    """Llama 3.1 8B under CP 8 without TP: 32 heads, E = 2^27, backward 64·2^27 B = 8 GiB."""
    assert float(ring_attention_working(32768, 32, 128, 8, rotate="allgather")[1]) == 8.0 * GIB


def test_alltoall_exact():
    """All-to-all holds two K|V chunks, not c: backward (8 + 4 + 28)·E at any c > 1."""
    e = 1024 * 8 * 64
    assert float(ring_attention_working(1024, 8, 64, 16, rotate="alltoall")[1]) == 40.0 * e


def test_unknown_rotate_is_refused():
    with pytest.raises(ValueError, match="rotate"):
        ring_attention_working(1024, 8, 64, 2, rotate="ring")  # type: ignore[arg-type]


dims = dict(tokens=st.integers(1, 1 << 18), heads=st.integers(1, 128),
            head_dim=st.sampled_from([64, 96, 128, 192, 256]))


@settings(max_examples=60, deadline=None)
@given(**dims, method=st.sampled_from(["allgather", "alltoall", "none"]))
def test_no_cp_no_ring(tokens, heads, head_dim, method):
    """c = 1 runs no ring, and a framework whose CP is not this ring ("none") adds nothing."""
    assert ring_attention_working(tokens, heads, head_dim, 1, rotate=method) == (0.0, 0.0)
    assert ring_attention_working(tokens, heads, head_dim, 4, rotate="none") == (0.0, 0.0)


@settings(max_examples=60, deadline=None)
@given(**dims, cp=st.integers(2, 64))
def test_allgather_grows_by_one_kv_chunk_per_rank(tokens, heads, head_dim, cp):
    """All-gather holds every rank's K|V: one more rank, one more 2wE chunk, in both passes; the
    backward holds 3aE more than the forward; at c = 2 it equals the all-to-all ring, above it
    holds more."""
    e = float(tokens * heads * head_dim)
    f1, b1 = ring_attention_working(tokens, heads, head_dim, cp, rotate="allgather")
    f2, b2 = ring_attention_working(tokens, heads, head_dim, cp + 1, rotate="allgather")
    assert float(f2) - float(f1) == pytest.approx(4.0 * e)
    assert float(b2) - float(b1) == pytest.approx(4.0 * e)
    assert float(b1) - float(f1) == pytest.approx(12.0 * e)
    _, b_a2a = ring_attention_working(tokens, heads, head_dim, cp, rotate="alltoall")
    assert float(b1) >= float(b_a2a) and (float(b1) == float(b_a2a)) == (cp == 2)


def test_vectorised_matches_scalar():
    cps = np.array([1.0, 2.0, 8.0, 16.0])
    fwd, bwd = ring_attention_working(4096, 8, 128, cps, rotate="allgather")
    for i, c in enumerate(cps):
        f, b = ring_attention_working(4096, 8, 128, c, rotate="allgather")
        assert (float(np.asarray(fwd)[i]), float(np.asarray(bwd)[i])) == (float(f), float(b))


def test_profiles_state_their_cp():
    """torchtitan runs torch's ring attention with the all-gather rotater and fp32 merges;
    Megatron's CP (Transformer Engine's p2p ring) is not this term."""
    tt = load_framework("torchtitan").memory
    assert (tt.cp_rotate, tt.cp_accum_bytes) == ("allgather", 4.0)
    assert load_framework("megatron").memory.cp_rotate == "none"


def _stage_items(framework: str, cp: int, seq: int) -> list:
    """The 405B CP row's layout (TP 8, PP 8, FSDP over dp·cp = 8) at one CP degree."""
    hw = with_overrides(load_profile("h100"), gpu_memory_gb=95)
    lay = Layout(tp=8, pp=8, dp=8 // cp, cp=cp, zero=2, micro_batch=1, schedule="1f1b",
                 recompute="full", precision="fp8", optimizer="adamw")
    p = Problem(model=get_preset("llama3.1-405b"), hardware=hw, gpus=512, seq_len=seq,
                global_batch=8 * (8 // cp), precision="fp8", optimizer="adamw",
                budget=MemoryBudget(), framework=load_framework(framework))
    return list(estimate_problem(p, lay).stages)


def test_ring_is_a_working_set_at_the_backward_peak():
    """Same tokens a rank (32768): CP 8 at 262144 against CP 1 at 32768. Under torchtitan the
    middle stage's peak (a layer's backward) holds the ring's 4 GiB in its working set and
    nothing else it allocates changes; under Megatron's profile nothing changes."""
    cp8, cp1 = _stage_items("torchtitan", 8, 262144), _stage_items("torchtitan", 1, 32768)
    mid8, mid1 = (next(s for s in st_ if s.name == "middle") for st_ in (cp8, cp1))
    assert "backward" in mid8.moment and mid8.moment == mid1.moment
    assert mid8.items["working"] - mid1.items["working"] == pytest.approx(4.0 * GIB)
    # the allocator's fragmentation (reserved - allocated) grows with the transient, not below
    same = lambda s: {k: v for k, v in s.items.items() if k not in ("working", "fragmentation")}  # noqa: E731
    assert same(mid8) == pytest.approx(same(mid1))
    assert mid8.allocated_bytes - mid1.allocated_bytes == pytest.approx(4.0 * GIB)
    assert mid8.reserved_bytes - mid1.reserved_bytes >= 4.0 * GIB
    m8, m1 = _stage_items("megatron", 8, 262144), _stage_items("megatron", 1, 32768)
    assert [dataclasses.astuple(s) for s in m8] == [dataclasses.astuple(s) for s in m1]
