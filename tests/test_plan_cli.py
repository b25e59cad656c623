"""memory / estimate / fit / models / profiles through the installed `dtplan` entry point."""

from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA70 = ["--model", "llama3-70b", "--gpus", "256", "--tp", "8", "--pp", "4", "--zero", "1",
           "--micro-batch", "1", "--seq-len", "8192"]


def test_memory_budget_issue_example(dtplan):
    r = dtplan("memory", *LLAMA70)
    assert r.code == 0, r.err
    for line in ("weights", "gradients", "optimizer state", "activations (saved)", "logits + loss",
                 "NCCL buffers", "CUDA context", "allocator fragmentation", "max allocated",
                 "max reserved", "device total", "first", "middle", "last", "FITS",
                 "not a promise", "forwards in flight"):
        assert line in r.out
    j = dtplan("memory", *LLAMA70, "--format", "json").json()
    for s in j["stages"]:
        assert sum(s["items_bytes"].values()) == pytest.approx(s["total_bytes"])
    assert j["fits"] is True and j["peak_stage"] == "first"


def test_memory_gib_display(dtplan):
    gb = dtplan("memory", *LLAMA70, "-f", "json").json()["peak_memory_bytes"]
    r = dtplan("memory", *LLAMA70, "--gib")
    assert f"{gb / 2**30:.2f} GiB" in r.out


def test_memory_from_config_json(dtplan):
    r = dtplan("memory", "--model-config", "examples/models/llama3-8b/config.json", "--gpus", "64",
               "--zero", "3", "-f", "json")
    assert r.code == 0, r.err
    assert r.json()["model"] == "llama3-8b" or "8" in r.json()["model"]


def test_estimate_json_keys(dtplan):
    j = dtplan("estimate", *LLAMA70, "--format", "json").json()
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                "hardware_tflops_per_gpu", "mfu", "hfu", "bubble_fraction", "collective_fraction",
                "peak_memory_bytes", "fits", "breakdown_s", "resilience"):
        assert key in j
    assert 0 < j["mfu"] <= j["hfu"] < 1
    assert j["tokens_per_s"] == pytest.approx(j["tokens_per_step"] / j["step_time_s"])


def test_estimate_time_to_train_and_auto_micro_batch(dtplan):
    j = dtplan("estimate", *LLAMA70[:-4], "--micro-batch", "auto", "--seq-len", "8192",
               "--train-tokens", "15e12", "--gpu-hour-cost", "2", "-f", "json").json()
    t = j["resilience"]["training"]
    assert t["with_failures_s"] > t["ideal_s"] > 0 and t["cost"] == pytest.approx(2 * t["gpu_hours"])
    assert any(n.startswith("auto: micro-batch") for n in j["notes"])


def test_estimate_architecture_flags(dtplan):
    r = dtplan("estimate", "--layers", "96", "--hidden", "12288", "--heads", "96", "--gpus", "64",
               "--tp", "8", "--pp", "8", "--seq-len", "2048", "--global-batch", "64",
               "--hardware", "a100-80g", "--recompute", "selective", "-f", "json")
    assert r.code == 0, r.err


def test_params_only_is_marked_inferred(dtplan):
    for fmt in ("table", "json", "markdown"):
        r = dtplan("estimate", "--params", "70e9", "--gpus", "64", "--tp", "8", "--zero", "1",
                   "-f", fmt)
        assert "INFERRED" in r.out


def test_fit_main_job(dtplan):
    r = dtplan("fit", "--params", "70e9", "--gpus", "256")
    assert r.code == 0 and "FITS" in r.out and "Rejected" in r.out and "INFERRED" in r.out
    j = dtplan("fit", "--params", "70e9", "--gpus", "256", "-f", "json").json()
    assert j["ok"] and j["layouts"][0]["rank"] == 1
    assert j["rejected"] == sum(x["count"] for x in j["rejections"]) == j["enumerated"] - j["valid"]


def test_fit_gpu_range(dtplan):
    j = dtplan("fit", "--model", "llama3-70b", "--gpus", "8..64", "-f", "json").json()
    assert [x["gpus"] for x in j["sweep"]] == [8, 16, 32, 64]


def test_fit_nothing_fits_exit_1(dtplan):
    r = dtplan("fit", "--model", "llama3.1-405b", "--gpus", "8", "--seq-len", "8192")
    assert r.code == 1 and "DOES NOT FIT" in r.out and "What would fit" in r.out


def test_catalogues(dtplan):
    m = dtplan("models", "-f", "json").json()["models"]
    names = {x["preset"] for x in m}
    assert {"llama3-70b", "mixtral-8x7b", "gpt3-175b", "bloom-176b", "megatron-gpt-1t"} <= names
    assert next(x for x in m if x["preset"] == "llama3.1-405b")["params"] == 405_853_388_800
    p = dtplan("profiles", "-f", "json").json()["profiles"]
    assert {x["name"] for x in p} >= {"a100-40g", "a100-80g", "h100", "h200", "b200", "gb200-nvl72",
                                      "mi300x", "l40s"}
    assert dtplan("profiles", "show", "dgx-h100").code == 0
    bad = dtplan("profiles", "show", "h1000")
    assert bad.code == 2 and "did you mean 'h100'" in bad.err


def test_profiles_found_from_root(dtplan):
    r = dtplan("profiles", cwd="/")
    assert r.code == 0 and "gb200-nvl72" in r.out


@pytest.mark.parametrize("args,option", [
    (("estimate", "--model", "llama9-1b", "--gpus", "8"), "--model"),
    (("estimate", "--model", "llama3-8b", "--params", "8e9", "--gpus", "8"), "--model"),
    (("estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "3"), "--gpus"),
    (("estimate", "--model", "llama3-8b", "--gpus", "8", "--recompute", "most"), "--recompute"),
    (("estimate", "--model", "llama3-8b", "--gpus", "8", "--hardware", "tpu9"), "--hardware"),
    (("estimate", "--model-config", "no/such/config.json", "--gpus", "8"), "config.json"),
    (("estimate", "--layers", "32", "--hidden", "4096", "--heads", "30", "--gpus", "8"), "--heads"),
    (("fit", "--model", "llama3-8b", "--gpus", "0"), "--gpus"),
    (("fit", "--model", "llama3-8b", "--gpus", "8", "--objective", "fastest"), "--objective"),
    (("fit", "--model", "llama3-8b", "--gpus", "8", "--tokens-per-batch", "nan"), "--tokens-per-batch"),
])
def test_bad_input(dtplan, args, option):
    r = dtplan(*args)
    assert r.code == 2, (r.out, r.err)
    assert option in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err


@pytest.mark.parametrize("option,value", [("--fragmentation", "2"), ("--margin", "-0.1"),
                                          ("--context-gb", "nan"), ("--comm-buffer-gb", "-1")])
def test_budget_options_are_checked(dtplan, option, value):
    r = dtplan("memory", "--model", "llama3-8b", "--gpus", "8", option, value)
    assert r.code == 2 and option in r.err and "pydantic" not in r.err
