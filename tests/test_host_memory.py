"""The fits-in-host-memory rule (planner.evaluation.host): offloaded states, paged states and
offloaded activations against a node's host memory less the profile's reserve."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import problem
from planner.errors import InputError
from planner.evaluation import host
from planner.evaluation.candidates import Candidates
from planner.evaluation.estimate import estimate
from planner.evaluation.evaluate import evaluate
from planner.specs.finetune import Tuning
from planner.specs.framework import load_framework
from planner.specs.hardware import GIB, HOST_RESERVE_GB
from planner.specs.hardware_toml import bundled_dir, load_profile, profile_from_text
from planner.specs.knobs import Layout
from planner.specs.presets import get_preset

M8 = get_preset("llama3-8b")
TUNE = load_framework("torchtune")
# llama3-8b, 4096 tokens: one layer's input (what full recompute keeps) is 2·s·h bytes in bf16
LAYER_INPUT = 2 * 4096 * 4096


def _host_gib(gib: float, hw: str = "rtx4090"):
    prof = load_profile(hw)
    return dataclasses.replace(prof, host=dataclasses.replace(
        prof.host, host_memory_bytes=gib * GIB))


def _rule(e, name: str):
    return next(r for r in e.rules if r.name == name)


def _qlora(gib: float, offload: bool):
    lay = Layout(micro_batch=4, finetune="qlora", activation_offload=offload)
    return estimate(M8, _host_gib(gib), 1, lay, seq_len=4096, global_batch=4, framework=TUNE)


def test_offloading_fits_the_gpu_and_a_small_host_refuses_it():
    """QLoRA of llama3-8b at 4 × 4096 tokens on one RTX 4090: 124 GB without offload, 21 GB
    with the activations on the host, which then holds 85.5 GB of them: a 128 GiB host
    (less 16 GiB reserved) takes them, a 64 GiB one refuses the layout."""
    off = _qlora(128, False)
    assert _rule(off, "fits-in-memory").status == "fail"
    big, small = _qlora(128, True), _qlora(64, True)
    for e in (big, small):
        assert _rule(e, "fits-in-memory").status == "pass"
    assert _rule(big, "fits-in-host-memory").status == "pass"
    refused = _rule(small, "fits-in-host-memory")
    assert refused.status == "fail"
    assert refused.measured == "85.5 GB a node (offloaded activations 85.5)"
    assert refused.limit == "≤ 51.5 GB (68.7 less 17.2 reserved)"
    assert small.fits and big.fits  # the GPU verdict: the host rule refuses it apart


def _p(gpus: int, fw: str = "torchtune", hw=None, **tuning):
    p = problem(M8, hw or load_profile("h100"), gpus, seq_len=4096, global_batch=16,
                tuning=Tuning.of(Layout(**{"activation_offload": True, **tuning})))
    return dataclasses.replace(p, framework=load_framework(fw))


def _parts(p, lay: Layout) -> dict[str, float]:
    return {k: float(v[0]) for k, v in host.parts_per_node(p, Candidates.from_layouts([lay])).items()}


def test_offloaded_activation_bytes_exactly():
    """Full recompute keeps each layer's input: 31 of the 32 go to the host (one stays, its
    copy in flight); a node of 8 data-parallel GPUs holds 8 such; under PP 2 the busiest
    stage's 16 layers, 15 offloaded, for min(PP, m) = 2 micro-batches."""
    one = _parts(_p(1), Layout(recompute="full", micro_batch=1))
    assert one == {"offloaded states": 0.0, "paged states": 0.0,
                   "offloaded activations": 31 * LAYER_INPUT}
    dp8 = _parts(_p(8), Layout(dp=8, recompute="full", micro_batch=1))
    assert dp8["offloaded activations"] == 8 * 31 * LAYER_INPUT
    pp2 = _parts(_p(8, "torchtitan"), Layout(dp=4, pp=2, recompute="full", micro_batch=1))
    assert pp2["offloaded activations"] == 8 * 15 * 2 * LAYER_INPUT


def test_offloaded_states_and_activations_add_up():
    """ZeRO-3 with the optimizer and parameters offloaded (DeepSpeed: 12 B of Adam state, 4 of
    fp32 gradients, 2 of bf16 weights a parameter) beside the offloaded activations: the
    host bytes are their sum, and the rule compares it with host memory less the reserve."""
    p = _p(1, "deepspeed")
    lay = Layout(zero=3, offload_optimizer="cpu", offload_params="cpu", recompute="full",
                 micro_batch=1)
    parts = _parts(p, lay)
    assert parts["offloaded states"] == M8.param_count() * (12 + 4 + 2)
    assert parts["offloaded activations"] == 31 * LAYER_INPUT
    c = Candidates.from_layouts([lay])
    assert float(host.bytes_per_node(p, c)[0]) == sum(parts.values())
    assert host.limit(p) == p.hardware.host.host_memory_bytes - HOST_RESERVE_GB * GIB
    just = dataclasses.replace(p, hardware=_host_gib(
        (sum(parts.values()) / GIB) + HOST_RESERVE_GB, "h100"))
    assert host.fits(just, c)[0] and host.state_fits(just, c)[0]
    short = dataclasses.replace(p, hardware=_host_gib(
        (sum(parts.values()) - 1.0) / GIB + HOST_RESERVE_GB, "h100"))
    assert not host.fits(short, c)[0] and host.state_fits(short, c)[0]
    assert not evaluate(short, c).rules.passes["fits-in-host-memory"][0]


layouts = st.builds(
    lambda dp, pp, mb, rec, zero, opt: Layout(dp=dp, pp=pp, micro_batch=mb, recompute=rec,
                                              zero=zero if pp == 1 else 0,
                                              offload_optimizer="cpu" if opt and zero and pp == 1
                                              else "none"),
    st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
    st.sampled_from(["none", "selective", "full"]), st.sampled_from([0, 1, 3]), st.booleans())


@settings(max_examples=30, deadline=None)
@given(layouts, st.sampled_from(["full", "lora"]), st.sampled_from(["megatron", "deepspeed"]))
def test_offloading_activations_never_lowers_host_bytes_nor_raises_gpu_bytes(lay, ft, fw):
    gpus = lay.dp * lay.pp
    on, off = (_p(gpus, fw, finetune=ft, activation_offload=o) for o in (True, False))
    c = Candidates.from_layouts([lay])
    assert host.bytes_per_node(on, c)[0] >= host.bytes_per_node(off, c)[0]
    assert host.bytes_per_node(on, c)[0] > host.bytes_per_node(off, c)[0] or gpus > 1 or \
        lay.recompute == "full"
    assert evaluate(on, c).memory.peak[0] <= evaluate(off, c).memory.peak[0] * (1 + 1e-12)


def _h100_text() -> str:
    return (bundled_dir("hardware_profiles") / "h100.toml").read_text()


def test_the_profile_sets_its_host_reserve_with_a_source():
    text = _h100_text().replace("[host]\n", '[host]\nreserve_gb = { value = 64, kind = '
                                '"judgement", source = "a site\'s own daemons" }\n', 1)
    prof = profile_from_text(text, "h100.toml")
    assert prof.host.reserve_bytes == 64 * GIB
    assert prof.provenance["host.reserve_gb"].source == "a site's own daemons"
    assert load_profile("h100").host.reserve_bytes == HOST_RESERVE_GB * GIB
    bare = _h100_text().replace("[host]\n", "[host]\nreserve_gb = 64\n", 1)
    with pytest.raises(InputError, match="host.reserve_gb"):
        profile_from_text(bare, "h100.toml")


def test_the_rule_is_read_before_fits_in_memory_in_every_search_row():
    """evaluate's host verdict is the whole rule: never looser than the states alone."""
    p = dataclasses.replace(_p(1), hardware=_host_gib(20, "h100"))
    c = Candidates.from_layouts([Layout(micro_batch=m, recompute=r) for m in (1, 2)
                                 for r in ("none", "full")])
    whole = evaluate(p, c).rules.passes["fits-in-host-memory"]
    assert np.array_equal(whole, host.fits(p, c))
    assert np.all(host.state_fits(p, c)) and not np.all(whole)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.integers(1, 31))
def test_recomputing_more_layers_never_raises_the_host_bytes(pp, mb, k):
    """Why the partial-recompute solve needs no host check: k recomputed layers offload
    (n − k) layers' saved tensors and k inputs, never more than none recomputed (the row
    whose host verdict the solve starts from), and never less than k + 1."""
    p = _p(pp, "torchtitan" if pp > 1 else "torchtune")
    rows = Candidates.from_layouts([
        Layout(pp=pp, micro_batch=mb, recompute="none"),
        Layout(pp=pp, micro_batch=mb, recompute="full", recompute_layers=k),
        Layout(pp=pp, micro_batch=mb, recompute="full", recompute_layers=min(k + 1, 32 // pp)),
        Layout(pp=pp, micro_batch=mb, recompute="full")])
    b = host.bytes_per_node(p, rows)
    assert b[0] >= b[1] >= b[2] >= b[3] > 0
    assert b[0] > b[3]


ASK_70B = ("estimate", "--model", "llama3-70b", "--gpus", "64", "--seq-len", "8192",
           "--global-batch", "512", "--zero", "3", "--recompute", "none", "--activation-offload",
           "--format", "json")


def test_estimate_refuses_what_the_host_cannot_hold(dtplan):
    """70B on 64 H100s, ZeRO-3, activations offloaded: at micro-batch 4 each GPU sends 711 GB
    to the host, 5.7 TB a node of 2.2 TB (the layout `fit` ranked first before the rule
    counted them); at micro-batch 1 a quarter of that fits."""
    r = dtplan(*ASK_70B, "--micro-batch", "4")
    rule = next(x for x in r.json()["rules"] if x["name"] == "fits-in-host-memory")
    assert r.code == 1 and rule["status"] == "fail"
    assert rule["measured"] == "5,688.6 GB a node (offloaded activations 5,688.6)"
    assert rule["limit"] == "≤ 2,181.8 GB (2,199.0 less 17.2 reserved)"
    ok = dtplan(*ASK_70B, "--micro-batch", "1")
    rule = next(x for x in ok.json()["rules"] if x["name"] == "fits-in-host-memory")
    assert ok.code == 0 and rule["measured"] == "1,422.2 GB a node (offloaded activations 1,422.2)"


def test_the_rule_names_the_plan_key_that_put_bytes_on_the_host():
    from planner.evaluation.rules import config_keys
    key = {lay: config_keys("plan", lay)["fits-in-host-memory"] for lay in (
        Layout(activation_offload=True), Layout(), Layout(zero=1, offload_optimizer="cpu",
                                                          activation_offload=True))}
    assert list(key.values()) == ["layout.activation_offload", "layout.offload_optimizer",
                                  "layout.offload_optimizer"]
