"""Published QLoRA peak-memory figures (issue 28, must-show 3), within ±10%, priced with the fsdp
profile's litgpt variant of the run's era (framework_profiles/fsdp.toml [variants]); and each
mechanism of those variants exact against its formula.

The rows are litgpt's (torch.cuda.max_memory_allocated, one GPU, --precision bf16-true,
--quantize bnb.nf4 / bnb.nf4-dq, LoRA dropout 0.05, q and v adapted, bitsandbytes PagedAdamW);
none is in reference/RESERVED.md:
- TABLE: Lightning-AI/litgpt tutorials/resource-tables.md as added in 0cc02afa (lit-gpt 8641822,
  Lightning 2.1.0rc0, bitsandbytes 0.41.1, 1 x A100 40GB, Alpaca: longest Llama 2 sample 1304
  tokens, micro-batch 1, LoRA r 8);
- HUB: Lightning-AI/litgpt config_hub/finetune/README.md as of 5895df10 (litgpt 0.4,
  lightning 2.3.0.dev20240328, bitsandbytes 0.42.0, 1 x A10G, Alpaca2k cut to 512 tokens,
  settings in config_hub/finetune/<model>/qlora.yaml there: r 32, q and v).

Residuals (python benchmarks/finetune_memory.py prints them): before the variants −13.5..−22.8%
(bitsandbytes < 0.43.2 alone); with them −0.1..−0.7% (table) and −4.8..−7.5% (hub). Caveat on
the table rows: the planner prices every micro-batch at the sequence length, so the held
previous graph is a full 1,304-token one; lit-gpt's run put the longest Alpaca sample first and
drew the rest at random (finetune/lora.py get_batch), so the graph it held was most likely
shorter. Without the held graph the table rows are −13.4..−15.0%; the same page's LoRA rows are
−5% under this profile, so part of the table rows' agreement is that shared under-count.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.errors import InputError
from planner.specs.framework import FrameworkProfile, load_framework, variant_names, with_variant
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec

TABLE = "Lightning-AI/litgpt@0cc02afa tutorials/resource-tables.md (lit-gpt 8641822), A100 40GB"
HUB = "Lightning-AI/litgpt@5895df10 config_hub/finetune/README.md, 1 x A10G"
# litgpt's Mistral-7B-v0.1 (litgpt@5895df10 litgpt/config.py:1426-1439): Mistral 7B v0.3's
# shapes with a 32,000-token vocabulary
MISTRAL_V01 = ModelSpec.with_defaults(**{**planner.get_preset("mistral-7b-v0.3").__dict__,
                                         "name": "Mistral-7B-v0.1", "vocab": 32000})
ROWS = [
    # id, source, model, targets, rank, seq, micro-batch, base format, GB
    ("lt-7b-nf4", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "nf4", 14.14),
    ("lt-7b-nf4-dq", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "nf4-dq", 13.84),
    ("lt-13b-nf4", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "nf4", 23.14),
    ("lt-13b-nf4-dq", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "nf4-dq", 22.55),
    ("hub-llama2-7b-qlora", HUB, "llama2-7b", "q,v", 32, 512, 2, "nf4", 13.68),
    ("hub-llama3-8b-qlora", HUB, "llama3-8b", "q,v", 32, 512, 2, "nf4", 17.41),
    ("hub-mistral-7b-qlora", HUB, MISTRAL_V01, "q,v", 32, 512, 2, "nf4", 14.29),
]


def era_variant(source: str) -> str:
    """The fsdp variant of the run's litgpt release."""
    return "litgpt-2023" if source == TABLE else "litgpt-2024"


def allocated_gb(row: tuple, fw: FrameworkProfile) -> float:
    _id, _src, model, targets, rank, seq, mb, fmt, _gb = row
    lay = Layout(finetune="lora" if fmt == "bf16" else "qlora", base_format=fmt,
                 lora_targets=targets, lora_rank=rank, lora_dropout=True, precision="bf16-pure",
                 optimizer="adamw", micro_batch=mb, recompute="none")
    spec = planner.get_preset(model) if isinstance(model, str) else model
    e = planner.estimate(spec, planner.load_profile("a100-80g"), 1, lay, seq_len=seq,
                         global_batch=mb, framework=fw)
    return e.stages[0].allocated_bytes / 1e9


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_published_qlora_memory_within_10_percent(row):
    fw = with_variant(load_framework("fsdp"), era_variant(row[1]))
    got = allocated_gb(row, fw)
    assert got == pytest.approx(row[-1], rel=0.10), (row[0], got, row[-1])


# --- the variants' mechanisms, one at a time, exact -------------------------------------------

LLAMA2 = planner.get_preset("llama2-7b")


def _with(fw: FrameworkProfile, **memory: object) -> FrameworkProfile:
    return dataclasses.replace(fw, memory=dataclasses.replace(fw.memory, **memory))


def _stage(fw: FrameworkProfile, finetune: str = "qlora", seq: int = 1024, mb: int = 1):
    lay = Layout(finetune=finetune, lora_targets="q,v", lora_rank=8, lora_dropout=True,
                 precision="bf16-pure", optimizer="adamw", micro_batch=mb, recompute="none")
    return planner.estimate(LLAMA2, planner.load_profile("a100-80g"), 1, lay, seq_len=seq,
                            global_batch=mb, framework=fw).stages[0]


def test_variants_are_named_and_leave_the_bundled_profile_alone():
    fsdp = load_framework("fsdp")
    assert variant_names(fsdp) == ["litgpt-2023", "litgpt-2024"]
    assert not fsdp.memory.quantised_head and fsdp.memory.dequant_bytes == 2.0
    assert not fsdp.memory.previous_graph_held_in_forward and fsdp.memory.norm_saved_bytes is None
    v = with_variant(fsdp, "litgpt-2024")
    assert v.name == "fsdp" and v.time == fsdp.time and v.variants == {}
    assert v.description.endswith("variant litgpt-2024") and "5895df10" in v.source
    assert v.memory.norm_saved_bytes == 4.0
    assert with_variant(fsdp, "litgpt-2023").memory.norm_saved_bytes is None
    with pytest.raises(InputError, match="no variant 'litgpt-1999'; known: litgpt-2023"):
        with_variant(fsdp, "litgpt-1999")


def test_an_nf4_output_layer_is_stored_in_nf4():
    # Fabric's class replacement quantises lm_head (32,000 × 4,096) too: in NF4 with double
    # quantisation (the recipe's default) instead of bf16
    from planner.engine.finetune import base_weight_bytes_per_param
    base = _with(load_framework("fsdp"), quantised_base_rest_fp32=False)
    diff = _stage(base).items["frozen_weights"] - _stage(_with(base, quantised_head=True)).items[
        "frozen_weights"]
    assert diff == pytest.approx(32000 * 4096 * (2.0 - base_weight_bytes_per_param("nf4-dq")),
                                 rel=1e-9)
    assert _stage(base, "lora").items["frozen_weights"] == \
        _stage(_with(base, quantised_head=True), "lora").items["frozen_weights"]


def test_the_dequantised_working_copy_is_the_largest_quantised_linear():
    """HF/PEFT: the MLP's 4,096 × 11,008, one bf16 copy. Fabric: the NF4 head, 32,000 × 4,096
    padded to 32,000 (a multiple of 128), dequantised to fp16 and cast to bf16: 4 bytes."""
    import numpy as np
    from types import SimpleNamespace

    from planner.evaluation.tuning import dequant_working
    from planner.specs.finetune import Tuning

    def working(fw: FrameworkProfile, has_head: bool) -> float:
        p = SimpleNamespace(model=LLAMA2, fw=fw, tuning=Tuning.of(Layout(finetune="qlora")))
        return float(dequant_working(p, np.ones(1), np.array([has_head]))[0])
    fsdp, lit = load_framework("fsdp"), with_variant(load_framework("fsdp"), "litgpt-2023")
    assert working(fsdp, True) == 4096 * 11008 * 2.0
    assert working(lit, True) == 32000 * 4096 * 4.0
    assert working(lit, False) == 4096 * 11008 * 4.0   # a stage without the head


def test_previous_graph_held_through_the_next_forward():
    """bitsandbytes < 0.43.2 keeps each 4-bit linear's input on ctx; litgpt's loop keeps the
    last logits, and through them that graph: per layer the QKV input, the attention output,
    the MLP input and the SwiGLU product (h + h + h + f, 2 bytes), plus the logits (V, 2 bytes),
    per token, held while the next forward runs (the forward moment is the peak here)."""
    old = _with(load_framework("fsdp"), quantised_linear_saves_input=True,
                quantised_base_rest_fp32=False)
    held = _with(old, previous_graph_held_in_forward=True)
    b = _stage(held)
    tokens, m = 1024, LLAMA2
    per_layer = tokens * (3 * m.hidden + m.ffn) * 2.0
    # the forward working set besides: the MLP's f-wide transient and one bf16 dequantised MLP
    # weight (the largest linear; the head stays bf16 here)
    rest = tokens * m.ffn * 2.0 + m.hidden * m.ffn * 2.0
    assert b.items["working"] == pytest.approx(
        m.layers * per_layer + tokens * m.vocab * 2.0 + rest, rel=1e-9)
    a = _stage(old)
    assert "(forward)" in b.moment and "(loss)" in a.moment   # the peak moves to the forward
    assert b.allocated_bytes > a.allocated_bytes
    # a current bitsandbytes keeps no input: only the logits are held
    new = _with(held, quantised_linear_saves_input=False)
    assert _stage(new).allocated_bytes <= _stage(held).allocated_bytes
    lora = _stage(held, "lora")
    assert lora.allocated_bytes == pytest.approx(_stage(old, "lora").allocated_bytes, rel=0.02)


def test_an_upcasting_rmsnorm_saves_its_input_in_fp32():
    """litgpt 0.4's RMSNorm (x.float()) keeps 4 bytes an element of each norm's input where the
    profile counted 2: 2 norms · 2 bytes · h more per token and layer."""
    fw = _with(load_framework("fsdp"), quantised_base_rest_fp32=False)
    a, b = _stage(fw, "lora"), _stage(_with(fw, norm_saved_bytes=4.0), "lora")
    assert b.items["activations"] - a.items["activations"] == pytest.approx(
        LLAMA2.layers * 1024 * 2 * 2.0 * LLAMA2.hidden, rel=1e-9)
    full = Layout(finetune="lora", recompute="full", micro_batch=1)
    kept = [planner.estimate(LLAMA2, planner.load_profile("a100-80g"), 1, full, seq_len=1024,
                             global_batch=1, framework=f).stages[0].items["activations"]
            for f in (fw, _with(fw, norm_saved_bytes=4.0))]
    assert kept[0] == kept[1]   # a checkpointed layer keeps its bf16 input, not the norm's copy


@settings(max_examples=15, deadline=None)
@given(st.fixed_dictionaries(dict(
    model=st.sampled_from(("llama2-7b", "llama3-8b", "llama2-13b")), tp=st.sampled_from((1, 2)),
    zero=st.integers(0, 3), mb=st.sampled_from((1, 2)), seq=st.sampled_from((512, 2048)),
    recompute=st.sampled_from(("none", "full")), targets=st.sampled_from(("q,v", "all-linear")),
    variant=st.sampled_from(("litgpt-2023", "litgpt-2024")))))
def test_litgpt_variants_keep_the_issue_28_invariants(d):
    """Under either variant a 4-bit base never stores more than the bf16 one, the adapters are
    the same, and the mechanisms only add memory to what the bundled profile prices for the same
    4-bit storage (the head aside, which they quantise)."""
    fw = with_variant(load_framework("fsdp"), d["variant"])

    def stage(finetune: str, f: FrameworkProfile):
        lay = Layout(tp=d["tp"], dp=8 // d["tp"], zero=d["zero"], micro_batch=d["mb"],
                     recompute=d["recompute"], finetune=finetune, lora_targets=d["targets"])
        return planner.estimate(planner.get_preset(d["model"]), planner.load_profile("h100"), 8,
                                lay, seq_len=d["seq"], global_batch=64, framework=f).stages
    for lo, q in zip(stage("lora", fw), stage("qlora", fw)):
        assert q.items["frozen_weights"] <= lo.items["frozen_weights"]
        assert q.items["weights"] == lo.items["weights"]
    same_head = _with(fw, quantised_head=False)
    plain = _with(load_framework("fsdp"), quantised_base_rest_fp32=False)
    for a, b in zip(stage("qlora", plain), stage("qlora", same_head)):
        assert b.allocated_bytes >= a.allocated_bytes


def test_a_variant_is_chosen_on_the_command_line(dtplan):
    """--framework fsdp:litgpt-2023 prices the resource table's 7B nf4 row as the test above does
    (max allocated, GB), and an unknown variant is one line naming the option, exit 2."""
    args = ("memory", "--model", "llama2-7b", "--gpus", "1", "--hardware", "a100-80g",
            "--finetune", "qlora", "--base-format", "nf4", "--lora-targets", "q,v",
            "--lora-rank", "8", "--lora-dropout", "--seq-len", "1304", "--global-batch", "1",
            "--micro-batch", "1", "--precision", "bf16-pure", "--optimizer", "adamw",
            "--recompute", "none", "--format", "json")
    r = dtplan(*args, "--framework", "fsdp:litgpt-2023")
    assert r.code == 0, r
    allocated = r.json()["stages"][0]["allocated_bytes"] / 1e9
    assert allocated == pytest.approx(14.14, rel=0.01)   # published 14.14 GB (ROWS[0])
    plain = dtplan(*args, "--framework", "fsdp").json()["stages"][0]["allocated_bytes"] / 1e9
    assert plain < allocated - 2.0                        # the variant's mechanisms, not noise
    bad = dtplan(*args, "--framework", "fsdp:litgpt-1999")
    assert bad.code == 2 and bad.out == ""
    assert bad.err.strip() == ("dtplan: error: --framework: fsdp has no variant 'litgpt-1999'; "
                               "known: litgpt-2023, litgpt-2024")
