"""One GPU is a cluster of one (issue #26): ZeRO-Offload / ZeRO-Infinity layouts searched with
--allow-offload on any GPU count, 1 included; host memory a limit; the "what would fit" advice
offers offload before more or bigger GPUs."""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.evaluation.candidates import Candidates
from planner.evaluation.host import bytes_per_node as host_bytes_per_node
from planner.evaluation.rules import structural_predicates
from planner.evaluation.train import problem
from planner.search.fast import SearchSpace, search
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset

ASK = ("fit", "--model", "llama2-7b", "--gpus", "1", "--gpu-memory-gib", "24",
       "--global-batch", "8", "--seq-len", "2048")


def test_a_7b_full_fine_tune_fits_one_24_gib_gpu_with_offload(dtplan):
    r = dtplan(*ASK, "--allow-offload", "--format", "json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["ok"] and d["layouts"]
    first = d["layouts"][0]["layout"]
    assert first["offload_optimizer"] == "cpu" and first["dp"] == 1
    assert d["layouts"][0]["peak_memory_bytes"] <= 24 * 2**30 * 0.95
    table = dtplan(*ASK, "--allow-offload").out
    assert "Framework deepspeed: --allow-offload without --framework" in " ".join(table.split())


def test_without_offload_the_advice_offers_it_first(dtplan):
    r = dtplan(*ASK, "--format", "json")
    assert r.code == 1
    tips = r.json()["suggestions"]
    assert tips[0].startswith("--allow-offload --framework deepspeed")
    assert any("GPUs" in t for t in tips[1:])


def test_megatron_named_keeps_its_gradients_on_the_gpu(dtplan):
    """Megatron-LM offloads only the optimizer: its main-grad buffer (fp32, 27 GB for 6.7B
    parameters) stays on the GPU, so a 7B does not fit one 24 GiB GPU on it even offloaded."""
    r = dtplan(*ASK, "--allow-offload", "--framework", "megatron", "--format", "json")
    assert r.code == 1 and not r.json()["layouts"]


def _deepspeed_one_gpu(host_gb: float):
    hw = load_profile("h100")
    hw = dataclasses.replace(hw, host=dataclasses.replace(hw.host, host_memory_bytes=host_gb * 1e9))
    p = problem(get_preset("llama2-7b"), hw, 1, seq_len=2048, global_batch=8)
    return dataclasses.replace(p, framework=load_framework("deepspeed"))


def test_offloaded_bytes_per_node_are_the_states_in_host_memory():
    """ZeRO-3 with the optimizer and parameters offloaded on one GPU: K = 12 bytes of optimizer
    state, 4 of fp32 gradients (DeepSpeed moves them) and 2 of bf16 weights per parameter."""
    p = _deepspeed_one_gpu(2048)
    lay = Layout(zero=3, offload_optimizer="cpu", offload_params="cpu")
    n = get_preset("llama2-7b").param_count()
    assert float(host_bytes_per_node(p, Candidates.from_layouts([lay]))[0]) == n * (12 + 4 + 2)
    none = Layout(zero=0)
    assert float(host_bytes_per_node(p, Candidates.from_layouts([none]))[0]) == 0.0


def test_host_memory_is_a_limit():
    """With 64 GB of host memory the 7B's 121 GB of offloaded states do not fit: every offload
    layout fails fits-in-host-memory, and the search says so."""
    small = _deepspeed_one_gpu(64)
    lay = Layout(zero=3, offload_optimizer="cpu", offload_params="cpu")
    c = Candidates.from_layouts([lay])
    assert not structural_predicates(small, c, np.ones(1))["fits-in-host-memory"][0]
    assert structural_predicates(_deepspeed_one_gpu(2048), c, np.ones(1))["fits-in-host-memory"][0]
    res = search(small, SearchSpace(allow_offload=True))
    assert not len(res.order)
    from planner.evaluation.rules import RULE_NAMES
    assert res.rejected[RULE_NAMES.index("fits-in-host-memory")] > 0
