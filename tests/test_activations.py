"""Activation memory: Korthikanti et al. 2022 (arXiv 2205.05198) reproduced from the per-op table.

Expected numbers are the calibration cases `korthikanti-actmem-{22B,175B,530B,1T}`,
`korthikanti-selective-savings` and `korthikanti-530B-output-dealloc-saving`
(shared/reference/calibration_cases.json), copied here so the tests stand alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engine.activations import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    embedding_activation_bytes,
    layer_activation_bytes,
    layer_activation_terms,
    logits_bytes,
    output_layer_bytes,
    stage_activation_bytes,
)
from planner.engine.pipeline import micro_batches_in_flight

GiB = 2.0**30

# Table 3 of the paper: heads, hidden, layers, micro-batch, pp, interleave chunks, micro-batches
# per pipeline (global batch / micro-batch, DP = 1). s = 2048, t = 8 throughout.
MODELS = {
    "22B": dict(a=64, h=6144, L=48, b=4, p=1, v=None, m=1),
    "175B": dict(a=96, h=12288, L=96, b=1, p=8, v=3, m=64),
    "530B": dict(a=128, h=20480, L=105, b=1, p=35, v=3, m=280),
    "1T": dict(a=160, h=25600, L=128, b=1, p=64, v=None, m=512),
}

# mode → (tp, sp, recompute); "full" in the cases is 2sbh with TP but no SP (not ÷t).
MODES = {
    "none": (1, 0, RECOMPUTE_NONE),
    "tp": (8, 0, RECOMPUTE_NONE),
    "tp+sp": (8, 1, RECOMPUTE_NONE),
    "tp+selective": (8, 0, RECOMPUTE_SELECTIVE),
    "tp+sp+selective": (8, 1, RECOMPUTE_SELECTIVE),
    "full": (8, 0, RECOMPUTE_FULL),
}

# calibration_cases.json "expected": per-layer bytes and first-stage GiB (rounded to 3 places).
EXPECTED = {
    "22B": {
        "none": (7079985152, 316.5), "tp": (1325400064, 59.25),
        "tp+sp": (884998144, 39.563), "tp+selective": (654311424, 29.25),
        "tp+sp+selective": (213909504, 9.562), "full": (100663296, 4.5),
    },
    "175B": {
        "none": (2868903936, 331.312), "tp": (578813952, 66.844),
        "tp+sp": (358612992, 41.414), "tp+selective": (327155712, 37.781),
        "tp+sp+selective": (106954752, 12.352), "full": (50331648, 5.812),
    },
    "530B": {
        "none": (4110417920, 532.109), "tp": (880803840, 114.023),
        "tp+sp": (513802240, 66.514), "tp+selective": (545259520, 70.586),
        "tp+sp+selective": (178257920, 23.076), "full": (83886080, 10.859),
    },
    "1T": {
        "none": (5138022400, 612.5), "tp": (1101004800, 131.25),
        "tp+sp": (642252800, 76.562), "tp+selective": (681574400, 81.25),
        "tp+sp+selective": (222822400, 26.562), "full": (104857600, 12.5),
    },
}
INTERLEAVE = {"22B": 1.0, "175B": 1.29167, "530B": 1.32381, "1T": 1.0}

S = 2048


def gpt_layer(a, h, b, s=S, **kw):
    """A GPT layer: MHA (k = a, d = h/a), GeLU MLP f = 4h, dropout, no flash, 16-bit."""
    return layer_activation_bytes(s, b, h, a, a, h // a, 4 * h, mlp="gelu", dropout=True,
                                  flash=False, **kw)


def gpt_terms(a, h, b, s=S, **kw):
    return layer_activation_terms(s, b, h, a, a, h // a, 4 * h, mlp="gelu", dropout=True,
                                  flash=False, **kw)


def first_stage_in_flight(cfg):
    if cfg["v"]:
        return micro_batches_in_flight("interleaved", cfg["p"], cfg["m"], 0, cfg["v"])
    return micro_batches_in_flight("1f1b", cfg["p"], cfg["m"], 0)


# --- Korthikanti Table 2 / Eq. 1-6 -------------------------------------------------------------

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", MODES)
def test_per_layer_bytes_match_calibration(model, mode):
    cfg, (tp, sp, rc) = MODELS[model], MODES[mode]
    got = gpt_layer(cfg["a"], cfg["h"], cfg["b"], tp=tp, sp=sp, recompute=rc)
    assert got == EXPECTED[model][mode][0]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", MODES)
def test_first_stage_gib_match_calibration(model, mode):
    """First stage: p micro-batches × L/p layers = L layers, × (1 + (p−1)/(pv)) interleaved."""
    cfg, (tp, sp, rc) = MODELS[model], MODES[mode]
    per_layer = gpt_layer(cfg["a"], cfg["h"], cfg["b"], tp=tp, sp=sp, recompute=rc)
    in_flight = first_stage_in_flight(cfg)
    assert in_flight / cfg["p"] == pytest.approx(INTERLEAVE[model], abs=5e-6)
    total = stage_activation_bytes(per_layer, cfg["L"] / cfg["p"], in_flight)
    assert total / GiB == pytest.approx(EXPECTED[model][mode][1], abs=6e-4)


@pytest.mark.parametrize("model", MODELS)
def test_closed_forms_of_table_2(model):
    cfg = MODELS[model]
    a, h, b, t = cfg["a"], cfg["h"], cfg["b"], 8
    sbh = S * b * h
    att = 5 * a * S / h
    assert gpt_layer(a, h, b) == pytest.approx(sbh * (34 + att), rel=1e-15)
    assert gpt_layer(a, h, b, tp=t) == pytest.approx(sbh * (10 + 24 / t + att / t), rel=1e-15)
    assert gpt_layer(a, h, b, tp=t, sp=1) == pytest.approx(sbh * (34 + att) / t, rel=1e-15)
    assert gpt_layer(a, h, b, tp=t, recompute=RECOMPUTE_SELECTIVE) == sbh * (10 + 24 / t)
    assert gpt_layer(a, h, b, tp=t, sp=1, recompute=RECOMPUTE_SELECTIVE) == 34 * sbh / t
    assert gpt_layer(a, h, b, tp=t, recompute=RECOMPUTE_FULL) == 2 * sbh
    assert gpt_layer(a, h, b, tp=t, sp=1, recompute=RECOMPUTE_FULL) == 2 * sbh / t


def test_paper_breakdown_attention_mlp_norms():
    """Sec. 4.1: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh (no parallelism)."""
    a, h, b = 96, 12288, 1
    terms = gpt_terms(a, h, b)
    sbh = S * b * h
    norms = terms["attn_norm_in"] + terms["mlp_norm_in"]
    mlp = terms["fc1_in"] + terms["fc1_out"] + terms["gelu_out"] + terms["mlp_dropout_mask"]
    attention = sum(terms.values()) - norms - mlp
    assert norms == 4 * sbh
    assert mlp == 19 * sbh
    assert attention == 11 * sbh + 5 * a * S * S * b


@pytest.mark.parametrize("kw", [{}, {"tp": 8}, {"tp": 8, "sp": 1}, {"tp": 4, "cp": 2},
                                {"tp": 8, "recompute": RECOMPUTE_SELECTIVE},
                                {"tp": 8, "sp": 1, "recompute": RECOMPUTE_FULL}])
def test_terms_sum_to_total(kw):
    for flash, mlp, dropout in [(False, "gelu", True), (True, "swiglu", False)]:
        args = (8192, 2, 4096, 32, 8, 128, 14336)
        terms = layer_activation_terms(*args, mlp=mlp, dropout=dropout, flash=flash, **kw)
        total = layer_activation_bytes(*args, mlp=mlp, dropout=dropout, flash=flash, **kw)
        assert sum(terms.values()) == total


def test_full_recompute_keeps_only_layer_input():
    terms = gpt_terms(64, 6144, 4, tp=8, sp=1, recompute=RECOMPUTE_FULL)
    assert terms["attn_norm_in"] == 2 * S * 4 * 6144 / 8
    assert all(v == 0 for k, v in terms.items() if k != "attn_norm_in")


# --- Sec. 5 selective recomputation, Appendix B -----------------------------------------------

@pytest.mark.parametrize("a,h,five_as_h,saved_pct", [(96, 12288, 80, 70), (128, 20480, 64, 65)])
def test_selective_savings_sec5(a, h, five_as_h, saved_pct):
    """GPT-3: 5as/h = 80, selective saves 70%; MT-NLG: 64, 65% — of the sbh(34 + 5as/h) total
    (no parallelism, or equally TP+SP, where every term is ÷t)."""
    terms = gpt_terms(a, h, 1)
    scores = terms["scores_softmax"] + terms["scores_dropout_mask"] + terms["scores_dropout_out"]
    assert scores / (S * h) == five_as_h
    for kw in ({}, {"tp": 8, "sp": 1}):
        saved = 1 - gpt_layer(a, h, 1, recompute=RECOMPUTE_SELECTIVE, **kw) / gpt_layer(a, h, 1, **kw)
        assert saved == pytest.approx(five_as_h / (34 + five_as_h), rel=1e-12)
        assert round(100 * saved) == saved_pct


def test_sec43_embedding_and_output_extras():
    """Extra terms (sbhL/t)(p/L + δ_{p=1}(4/L)(1 + v/h)) with SP, for the 22B model (p = 1)."""
    s, b, h, t, vocab, p, L = S, 4, 6144, 8, 51200, 1, 48
    in_flight = 1
    got = (in_flight * embedding_activation_bytes(s, b, h, dropout=True, tp=t, sp=1)
           + output_layer_bytes(s, b, h, tp=t, sp=1)
           + logits_bytes(s, b, vocab, t, copy_bytes_per_elem=0))
    assert got == pytest.approx(s * b * h * L / t * (p / L + 4 / L * (1 + vocab / h)), rel=1e-15)
    assert embedding_activation_bytes(s, b, h, dropout=False, tp=t, sp=1) == 0


def test_logits_fp32_plus_16bit_copy():
    # (s/c)·b·V/t × (4 + 2) bytes.
    assert logits_bytes(8192, 1, 128256, 2) == 8192 * 128256 / 2 * 6
    assert logits_bytes(8192, 1, 128256, 2, cp=4) == 8192 / 4 * 128256 / 2 * 6


# --- Llama-style layer -----------------------------------------------------------------------

LLAMA3_8B = (8192, 1, 4096, 32, 8, 128, 14336)  # s, b, h, a, k, d, f


def llama(**kw):
    return layer_activation_bytes(*LLAMA3_8B, mlp="swiglu", dropout=False, flash=True, **kw)


def test_llama3_8b_coefficient():
    """Per s·b·h, from the op table: norm inputs and matmul inputs outside TP 2+2+2+2 = 8;
    Q 2·ad/h = 2, output-projection input 2, K and V 2·2·kd/h = 1, SwiGLU 3·2·f/h = 21,
    log-sum-exp 4·a/h = 1/32. Total 34 + 1/32 = 34.03125; with TP t: 8 + 26.03125/t."""
    s, b, h = LLAMA3_8B[:3]
    sbh = s * b * h
    assert llama() / sbh == 34.03125
    assert llama() == 1_141_899_264
    for t in (1, 2, 4, 8):
        assert llama(tp=t) / sbh == 8 + 26.03125 / t
        assert llama(tp=t, sp=1) / sbh == 34.03125 / t
    # No s×s term with flash: selective recompute drops only the log-sum-exp.
    assert llama(recompute=RECOMPUTE_SELECTIVE) / sbh == 34.0
    assert llama(recompute=RECOMPUTE_FULL) / sbh == 2.0


def test_llama_logits_dominate_at_large_vocab():
    """Llama-3 vocabulary (128256) at s = 8192: fp32+bf16 logits outweigh five layers."""
    assert logits_bytes(8192, 1, 128256) > 5 * llama()


def test_context_parallel_divides_everything():
    for c in (2, 4, 8):
        assert llama(cp=c) == llama() / c
        # Without flash the local scores are (s/c)×s: still ÷c.
        assert gpt_layer(96, 12288, 1, s=8192, tp=8, cp=c) == gpt_layer(96, 12288, 1, s=8192, tp=8) / c


def test_kv_heads_fewer_than_tp_are_replicated():
    terms = layer_activation_terms(*LLAMA3_8B, mlp="swiglu", dropout=False, flash=True, tp=16)
    assert terms["k"] == 8192 * 128 * 2  # one KV head per rank, not half a head
    assert terms["q"] == 8192 * 2 * 128 * 2  # 32 query heads / 16 = 2 per rank


# --- stage totals -----------------------------------------------------------------------------

def test_stage_with_some_layers_fully_recomputed():
    cfg = MODELS["175B"]
    a, h, b = cfg["a"], cfg["h"], cfg["b"]
    normal = gpt_layer(a, h, b, tp=8, sp=1, recompute=RECOMPUTE_SELECTIVE)
    full = gpt_layer(a, h, b, tp=8, sp=1, recompute=RECOMPUTE_FULL)
    n, k, in_flight = 12, 5, first_stage_in_flight(cfg)
    got = stage_activation_bytes(normal, n, in_flight, full_recompute_layers=k,
                                 full_recompute_layer_bytes=full)
    assert got == pytest.approx(in_flight * ((n - k) * normal + k * full), rel=1e-15)
    # k = n is plain full recompute; k beyond n is capped.
    all_full = stage_activation_bytes(normal, n, in_flight, full_recompute_layers=n + 3,
                                      full_recompute_layer_bytes=full)
    assert all_full == pytest.approx(stage_activation_bytes(full, n, in_flight), rel=1e-15)
    # One-off working set is added once, not per micro-batch.
    assert stage_activation_bytes(normal, n, 4, working_bytes=7.0) == 4 * n * normal + 7.0


def test_gpipe_holds_all_micro_batches():
    per_layer = gpt_layer(64, 6144, 1)
    assert stage_activation_bytes(per_layer, 6, micro_batches_in_flight("gpipe", 8, 32)) == \
        32 * 6 * per_layer


# --- properties -------------------------------------------------------------------------------

ARCH = st.sampled_from([
    # (h, a, k, d, f, mlp, dropout, flash)
    (6144, 64, 64, 96, 24576, "gelu", True, False),
    (4096, 32, 8, 128, 14336, "swiglu", False, True),
    (4096, 32, 8, 128, 14336, "swiglu", False, False),
    (8192, 64, 8, 128, 28672, "swiglu", True, False),
])
TP = st.sampled_from([1, 2, 4, 8, 16])
CP = st.sampled_from([1, 2, 4, 8])
SEQ = st.sampled_from([512, 2048, 4096, 8192, 32768])
MB = st.integers(1, 16)
RC = st.sampled_from([RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL])
SP = st.sampled_from([0, 1])


def _bytes(arch, s, b, **kw):
    h, a, k, d, f, mlp, dropout, flash = arch
    return layer_activation_bytes(s, b, h, a, k, d, f, mlp=mlp, dropout=dropout, flash=flash, **kw)


def _le(x, y):
    return x <= y * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(arch=ARCH, s=SEQ, b=MB, t=TP, sp=SP, c=CP, rc=RC)
def test_more_parallelism_or_recompute_never_raises(arch, s, b, t, sp, c, rc):
    base = _bytes(arch, s, b, tp=t, sp=sp, cp=c, recompute=rc)
    assert _le(_bytes(arch, s, b, tp=2 * t, sp=sp, cp=c, recompute=rc), base)
    assert _le(_bytes(arch, s, b, tp=t, sp=1, cp=c, recompute=rc), base)
    assert _le(_bytes(arch, s, b, tp=t, sp=sp, cp=2 * c, recompute=rc), base)
    for stronger in range(rc, RECOMPUTE_FULL + 1):
        assert _le(_bytes(arch, s, b, tp=t, sp=sp, cp=c, recompute=stronger), base)


@settings(max_examples=200, deadline=None)
@given(arch=ARCH, s=SEQ, b=MB, t=TP, sp=SP, c=CP, rc=RC)
def test_more_tokens_never_lowers(arch, s, b, t, sp, c, rc):
    base = _bytes(arch, s, b, tp=t, sp=sp, cp=c, recompute=rc)
    assert _le(base, _bytes(arch, s, b + 1, tp=t, sp=sp, cp=c, recompute=rc))
    assert _le(base, _bytes(arch, 2 * s, b, tp=t, sp=sp, cp=c, recompute=rc))


@settings(max_examples=50, deadline=None)
@given(arch=ARCH, rows=st.lists(st.tuples(SEQ, MB, TP, SP, CP, RC), min_size=1, max_size=12))
def test_arrays_match_scalar_calls(arch, rows):
    s, b, t, sp, c, rc = (np.array(col) for col in zip(*rows))
    vec = _bytes(arch, s, b, tp=t, sp=sp, cp=c, recompute=rc)
    h, a, k, d, f, mlp, dropout, flash = arch
    terms = layer_activation_terms(s, b, h, a, k, d, f, mlp=mlp, dropout=dropout, flash=flash,
                                   tp=t, sp=sp, cp=c, recompute=rc)
    assert all(np.shape(v) == (len(rows),) for v in terms.values())
    for i, row in enumerate(rows):
        si, bi, ti, spi, ci, rci = (int(x) for x in row)
        scalar = _bytes(arch, si, bi, tp=ti, sp=spi, cp=ci, recompute=rci)
        assert isinstance(scalar, float)
        assert vec[i] == scalar
