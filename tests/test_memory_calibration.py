"""Memory against measured peaks: calibration_modern.json (torchtitan, max reserved) and the
Megatron-LM CI Mixtral runs (max allocated on the last pipeline stage).

Both files are read in place from shared/ beside the repository (or /work/shared); the tests
skip with the reason when they are absent. `python tests/test_memory_calibration.py` prints the
residual table.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from evidence_paths import real, shared_dir

from planner.evaluation.candidates import Problem
from planner.evaluation.estimate import estimate_problem
from planner.specs.hf_config import load_hf_config
from planner.specs.budget import MemoryBudget
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile, with_overrides
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

GIB = 2.0**30


def memory_cases() -> list[dict]:
    base = shared_dir()
    path = base / "reference" / "calibration_modern.json" if base else None
    if path is None or not path.exists():
        return []
    return [c for c in json.loads(path.read_text())["cases"] if c["set"] == "memory"]


def _model(inputs: dict, tmp: Path):
    spec = inputs["model"]
    if "preset" in spec:
        return get_preset(spec["preset"])
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(spec["hf_config"]))
    return load_hf_config(cfg)


def predict_case(case: dict, tmp: Path) -> float:
    """Predicted max reserved (GiB) on the fullest stage, as the case measures it."""
    i = case["inputs"]
    hw = with_overrides(load_profile(i["hardware_profile"]), gpu_memory_gb=i["gpu_memory_gb"])
    lay = Layout(tp=i["tp"], pp=i["pp"], dp=i["dp"], cp=i["cp"], ep=i.get("ep", 1),
                 zero=i["zero"], micro_batch=i["micro_batch"],
                 schedule=i.get("schedule") or "1f1b", chunks=i.get("chunks") or 1,
                 recompute=i["recompute"], precision=i["precision"],
                 optimizer=i.get("optimizer", "adamw"))
    p = Problem(model=_model(i, tmp), hardware=hw, gpus=i["gpus"], seq_len=i["seq_len"],
                global_batch=i["global_batch"], precision=lay.precision,
                optimizer=lay.optimizer, budget=MemoryBudget(),
                framework=load_framework(case.get("framework_name", "torchtitan")))
    e = estimate_problem(p, lay)
    return max(s.reserved_bytes for s in e.stages) / GIB


CASES = memory_cases()
# Rows the model misses, with the mechanism suspected (strict: a fix makes the test fail until
# the row is taken off). The CP 8 run at 262144 peaks 9.6 GiB above the CP 1 run at 32768 on the
# same per-rank tokens; torch's ring attention working set (engine/ring_attention.py: all-gathered
# K/V, fp32 merges and rotating dK/dV, 4 GiB at a 405B layer's backward) brought it from
# -11.2 % to -5.6 %.
KNOWN_MISSES: dict[str, str] = {}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[c["id"]]))
    if c["id"] in KNOWN_MISSES else c for c in CASES], ids=[c["id"] for c in CASES])
def test_calibration_modern_memory_within_10_percent(case, tmp_path):
    assert case["published"]["measure"] == "max_reserved"
    measured = case["published"]["value"]
    predicted = predict_case(case, tmp_path)
    assert abs(predicted / measured - 1.0) <= 0.10, \
        f"{case['id']}: predicted {predicted:.1f} GiB vs measured {measured} GiB"


def test_calibration_modern_has_memory_rows():
    if shared_dir() is None:
        pytest.skip("shared/ absent")
    assert len(CASES) >= 10


# Megatron-LM CI release tests (fixtures/real/training, SOURCES.md): Mixtral 8x7B, seq 4096,
# micro-batch 1, TP 2 + SP, PP 4, distributed optimizer, bf16, flash attention, no recompute.
# Not in model_config.yaml: the vocabulary (the tokenizer's: Llama-2 32000, NeMo's 256k
# SentencePiece 256000) and the world size, which the CI does not publish: it is taken as the
# power of two whose steady allocated states (weights + main grads + optimizer shard, i.e.
# `mem-allocated-bytes` between steps) come nearest the logged value. Megatron's expert grid
# EP × ETP is dtplan's EP × TP, so EP 8 with ETP 1 at TP 2 is dtplan EP 4.
MIXTRAL = {
    "tp2-pp4-vpp-ep8": ("Llama2Tokenizer", 32000),
    "tp2-pp4-ep4-alltoall": ("GPTSentencePieceTokenizer", 256000),
}


def _mixtral_run(tag: str, gpus: int):
    import yaml
    base = "training/megatron-lm-ci_mixtral-8x7b_" + tag
    cfg = yaml.safe_load(real(f"{base}_model_config.yaml").read_text())["MODEL_ARGS"]
    tokenizer, vocab = MIXTRAL[tag]
    assert cfg["--tokenizer-type"] == tokenizer
    tp, pp = cfg["--tensor-model-parallel-size"], cfg["--pipeline-model-parallel-size"]
    etp = cfg.get("--expert-tensor-parallel-size", tp)
    ep = cfg["--expert-model-parallel-size"] * etp // tp
    vpp = cfg.get("--num-layers-per-virtual-pipeline-stage")
    chunks = cfg["--num-layers"] // (pp * vpp) if vpp else 1
    model = dataclasses.replace(get_preset("mixtral-8x7b"), vocab=vocab)
    lay = Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), ep=ep, zero=1,
                 micro_batch=cfg["--micro-batch-size"],
                 schedule="interleaved" if vpp else "1f1b", chunks=chunks,
                 sp=cfg["--sequence-parallel"], recompute="none", precision="mixed")
    p = Problem(model=model, hardware=load_profile("h100"), gpus=gpus,
                seq_len=cfg["--seq-length"], global_batch=cfg["--global-batch-size"],
                precision="mixed", optimizer="adam", framework=load_framework("megatron"))
    return estimate_problem(p, lay).stages[-1]


def _golden(tag: str, metric: str) -> float:
    path = real(f"training/megatron-lm-ci_mixtral-8x7b_{tag}_dgx-h100_golden-values.json")
    values = json.loads(path.read_text())[metric]["values"].values()
    return max(float(v) for v in values if v != "nan")


@pytest.mark.parametrize("tag", sorted(MIXTRAL))
def test_megatron_mixtral_ci_max_allocated_within_10_percent(tag):
    steady = _golden(tag, "mem-allocated-bytes")
    states = {}
    for gpus in (32, 64, 128, 256):
        it = _mixtral_run(tag, gpus).items
        states[gpus] = it["weights"] + it["gradients"] + it["optimizer"]
    gpus = min(states, key=lambda g: abs(states[g] - steady))
    assert abs(states[gpus] / steady - 1.0) <= 0.10
    last = _mixtral_run(tag, gpus)
    measured = _golden(tag, "mem-max-allocated-bytes")
    assert abs(last.allocated_bytes / measured - 1.0) <= 0.10, \
        f"{tag} on {gpus} GPUs: {last.allocated_bytes / 1e9:.2f} GB vs {measured / 1e9:.2f} GB"
    assert last.moment.startswith("last stage, ") and " in flight" in last.moment


def test_dtplan_memory_megatron_mixtral_vpp_through_the_cli(dtplan):
    # EP 8 × ETP 1 at TP 2 is dtplan's EP 4 (above)
    measured = _golden("tp2-pp4-vpp-ep8", "mem-max-allocated-bytes")
    j = dtplan("memory", "--framework", "megatron", "--model", "mixtral-8x7b", "--gpus", "64",
               "--tp", "2", "--pp", "4",
               "--ep", "4", "--zero", "1", "--micro-batch", "1", "--schedule", "interleaved",
               "--chunks", "8", "--seq-len", "4096", "--global-batch", "256",
               "--format", "json").json()
    last = j["stages"][-1]
    assert last["name"] == "last"
    assert abs(last["allocated_bytes"] / measured - 1.0) <= 0.10
    assert last["moment"].startswith("last stage, loss and its gradient, 3.625 forwards in flight")


def test_meta_405b_layout_is_admitted_with_the_default_allocator():
    # Llama 3.1 405B as Meta ran it (Dubey et al. 2024 Sec. 3.3.2): TP 8, PP 16 (first and last
    # stage one layer short), DP 128, interleaved, 8K sequences, 16M-token batches, 80 GB H100;
    # FSDP without resharding after forward: gradients and optimizer sharded (ZeRO-2 states).
    # It was rejected by the fragmentation term alone while that term grew with the in-flight
    # micro-batches; the blocks of the micro-batches held in flight are recycled whole
    # (allocator.steady_bytes), so it fits without expandable segments, and what fragmentation
    # remains is one micro-batch's churn plus the 2 MiB rounding of the live tensors.
    m = get_preset("llama3.1-405b")
    lay = Layout(tp=8, pp=16, dp=128, zero=2, micro_batch=1, schedule="interleaved", chunks=2)
    fw = load_framework("megatron")
    p = Problem(model=m, hardware=load_profile("h100"), gpus=16384, seq_len=8192,
                global_batch=2048, framework=fw)
    e = estimate_problem(p, lay)
    assert e.fits and not any("fragmentation alone" in n for n in e.notes)
    for s in e.stages:
        it = s.items
        churn = it["activations"] / 16 + it["working"] + it["gathered_params"] \
            + it["grad_buffers"] + it["loss"]   # one of at most 16 in flight, and the transients
        assert it["fragmentation"] < 0.2 * churn + 0.05 * it["activations"]


if __name__ == "__main__":  # the residual table for the note
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for c in CASES:
            pred = predict_case(c, Path(d))
            meas = c["published"]["value"]
            print(f"| {c['id']} | {meas:.1f} | {pred:.1f} | {100 * (pred / meas - 1):+.1f}% |")
