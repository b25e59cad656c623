"""A sequence shorter than two flash-attention tiles still has its CP = 1 layouts."""

from __future__ import annotations

from planner.api import problem
from planner.search.fast import SearchSpace
from planner.search.space import CP_MIN_CHUNK_TOKENS, splits
from planner.specs.hardware_toml import load_profile
from planner.specs.presets import get_preset


def test_short_sequences_enumerate_cp_1():
    for seq in (1, 4 * CP_MIN_CHUNK_TOKENS - 1):
        p = problem(get_preset("llama3-8b"), load_profile("h100"), 8, seq_len=seq,
                    global_batch=64)
        got = splits(p, SearchSpace())
        assert got and {cp for _, cp, _, _, _ in got} == {1}
    p = problem(get_preset("llama3-8b"), load_profile("h100"), 8,
                seq_len=4 * CP_MIN_CHUNK_TOKENS, global_batch=64)
    assert {cp for _, cp, _, _, _ in splits(p, SearchSpace())} == {1, 2}  # ... then CP 2
