"""Paged optimizers (issue 28): bitsandbytes PagedAdamW* keep their moments in CUDA managed
memory; a layout that pages them to the host (offload_optimizer cpu, at any ZeRO stage) counts
them in host memory, keeps the master copy and gradients on the GPU and pays their PCIe round
trip each step. The host rule counts a frozen base's adapters, not the model."""

from __future__ import annotations

import pytest

import planner
from planner.engine import memory
from planner.evaluation import host
from planner.evaluation import tuning as tun
from planner.api import problem
from planner.evaluation.candidates import Candidates
from planner.specs.finetune import Tuning
from planner.specs.framework import load_framework
from planner.specs.knobs import Layout

MODEL = "llama3-8b"


def _estimate(hw: str = "rtx4090", **knobs):
    lay = Layout(**{"zero": 0, "micro_batch": 1, "recompute": "full", **knobs})
    return planner.estimate(planner.get_preset(MODEL), planner.load_profile(hw), 1, lay,
                            seq_len=2048, global_batch=8, framework=load_framework("fsdp"))


def _rule(e, name: str) -> str:
    return next(r.status for r in e.rules if r.name == name)


def test_a_paged_optimizer_pages_its_moments_at_zero_0_and_adam_8bit_cannot():
    params = planner.get_preset(MODEL).param_count()
    paged = _estimate(optimizer="paged-adamw-8bit", precision="bf16-pure",
                      offload_optimizer="cpu")
    assert _rule(paged, "offload-valid") == "pass"
    s = paged.stages[0].items
    assert s["optimizer"] == 0.0   # bf16-pure: no master copy, every moment paged
    assert s["gradients"] == pytest.approx(2.0 * params)   # the update runs on the GPU
    moments = params * (2.0 + 8.0 / 256)   # two uint8 moments + fp32 absmax per 256
    pcie = planner.load_profile("rtx4090").host.pcie_bytes_per_s
    assert paged.breakdown["offload"] == pytest.approx(2.0 * moments / pcie, rel=1e-9)
    assert _rule(_estimate(optimizer="adam-8bit", precision="bf16-pure",
                           offload_optimizer="cpu"), "offload-valid") == "fail"


def test_the_master_copy_stays_on_the_gpu_and_resident_states_pay_nothing():
    params = planner.get_preset(MODEL).param_count()
    mixed = _estimate(optimizer="paged-adamw", precision="mixed", offload_optimizer="cpu")
    assert mixed.stages[0].items["optimizer"] == pytest.approx(4.0 * params)   # fp32 master
    resident = _estimate(optimizer="paged-adamw", precision="mixed")
    assert resident.stages[0].items["optimizer"] == pytest.approx(12.0 * params)
    assert resident.breakdown["offload"] == 0.0


def test_the_host_rule_counts_the_paged_moments():
    p = _problem("paged-adamw-8bit", "bf16-pure")
    params = planner.get_preset(MODEL).param_count()
    c = Candidates.from_layouts([Layout(zero=0, optimizer="paged-adamw-8bit",
                                        precision="bf16-pure", offload_optimizer=o)
                                 for o in ("none", "cpu")])
    node = host.bytes_per_node(p, c)
    assert node[0] == 0.0 and node[1] == pytest.approx(params * (2.0 + 8.0 / 256))


def _problem(optimizer: str, precision: str, finetune: str = "full", rank: int = 16):
    tuning = Tuning.of(Layout(finetune=finetune, lora_rank=rank, precision=precision))
    return problem(planner.get_preset(MODEL), planner.load_profile("rtx4090"), 1, seq_len=2048,
                   global_batch=8, precision=precision, optimizer=optimizer, tuning=tuning,
                   framework=load_framework("fsdp")).resolved()


# Σ (d_in + d_out) over Llama-3-8B's seven adapted linears: 81,920; the sides r·d reaches 1e5 on
@pytest.mark.parametrize("rank, paged_sides", [
    (4, 0),                    # 4 × 14,336 = 57,344: nothing
    (16, 3 * 14_336),          # gate and up's B, down's A (r × 14,336); r × 4,096 = 65,536 not
    (32, 81_920 - 2 * 1_024),  # all but k and v's B (1,024 × 32)
])
def test_lora_adapters_are_paged_only_from_1e5_elements(rank, paged_sides):
    # bitsandbytes get_state_buffer: a tensor under 1e5 elements gets an ordinary GPU buffer
    p = _problem("paged-adamw", "bf16-pure", "qlora", rank)
    assert tun.paged_fraction(p) == pytest.approx(paged_sides / 81_920)


def test_the_host_rule_counts_a_frozen_bases_adapters_not_the_model():
    p = _problem("adam", "mixed", "lora", 16)
    c = Candidates.from_layouts([Layout(zero=2, dp=1, optimizer="adam", finetune="lora",
                                        offload_optimizer="cpu")])
    _, _, k_b = memory.optimizer_bytes_per_param("mixed", "adam")
    adapters = tun.trained_param_count(p)
    assert adapters < 1e8
    assert host.bytes_per_node(p, c)[0] == pytest.approx(adapters * (k_b + 4.0))


def test_zero_offload_of_a_frozen_base_moves_the_adapters_alone():
    """ZeRO-Offload's PCIe and host-update time scale with what trains: LoRA's adapters (under
    1% of Llama-3-8B at r 16 on every projection) cost that share of the full fine-tune's."""
    knobs = dict(zero=2, offload_optimizer="cpu", optimizer="adam", precision="mixed")
    full, lora = _estimate(**knobs), _estimate(**knobs, finetune="lora")
    p = _problem("adam", "mixed", "lora", 16)
    share = tun.trained_param_count(p) / planner.get_preset(MODEL).param_count()
    assert 0.0 < share < 0.01
    assert lora.breakdown["offload"] == pytest.approx(full.breakdown["offload"] * share, rel=1e-9)
