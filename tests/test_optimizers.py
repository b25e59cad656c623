"""Optimizers people fine-tune with: bitsandbytes 8-bit and paged AdamW, Muon, Adafactor."""

from __future__ import annotations

import pytest

import planner
from planner.engine import memory
from planner.engine.optimizer import newton_schulz_flops
from planner.specs.knobs import Layout


def test_8bit_states_count_their_block_scales():
    # bitsandbytes 0.50.2 optim/optimizer.py:514-529: uint8 state + fp32 absmax per 256 elements
    assert memory.OPTIMIZER_STATE_BYTES["adam-8bit"] == pytest.approx(2.03125)
    # paged: the same bytes, in CUDA managed memory (priced as resident)
    assert memory.OPTIMIZER_STATE_BYTES["paged-adamw-8bit"] == \
        memory.OPTIMIZER_STATE_BYTES["adam-8bit"]
    assert memory.OPTIMIZER_STATE_BYTES["paged-adamw"] == memory.OPTIMIZER_STATE_BYTES["adamw"]


def test_newton_schulz_flops():
    # five iterations of X Xᵀ, A², B X on a square m × m matrix: 5 · (4m³ + 2m³)
    assert newton_schulz_flops(4096, 4096) == 5 * 6 * 4096 ** 3
    assert newton_schulz_flops(14336, 4096) == newton_schulz_flops(4096, 14336)


def _run(optimizer: str):
    return planner.estimate(planner.get_preset("llama3-8b"), planner.load_profile("h100"), 8,
                            Layout(dp=8, zero=1, optimizer=optimizer), seq_len=4096,
                            global_batch=64)


def test_muon_holds_one_momentum_and_adamw_for_embeddings_and_head():
    model = planner.get_preset("llama3-8b")
    adam, muon = _run("adam"), _run("muon")
    edges = model.embedding_params() + model.head_params()
    # mixed precision, ZeRO-1 over 8: fp32 master + momentum (8 B), + AdamW's v on the edges
    assert muon.stages[0].items["optimizer"] == pytest.approx(
        (8.0 * model.param_count() + 4.0 * edges) / 8, rel=1e-6)
    assert muon.stages[0].items["optimizer"] < adam.stages[0].items["optimizer"]
    # and pays its Newton–Schulz iterations on the optimizer step
    assert muon.breakdown["optimizer"] > 2 * adam.breakdown["optimizer"]


def test_lighter_states_never_need_more_memory():
    peaks = {o: _run(o).peak_memory_bytes for o in ("adam", "muon", "adam-8bit", "adafactor")}
    assert peaks["adafactor"] <= peaks["adam-8bit"] <= peaks["muon"] <= peaks["adam"]
