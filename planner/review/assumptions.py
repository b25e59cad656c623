"""The review's first section's tables: the job, the hardware profile values, the precision
recipe, the memory margins, the efficiency and time-model constants and the failure-rate
defaults, each quoted from the profile or the named constant the estimate used."""

from __future__ import annotations

from typing import Any

from planner.engine.memory import optimizer_bytes_per_param
from planner.render.document import Table
from planner.io.units import capacity
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.constants import framework_constants, hardware_constants
from planner.specs.hardware import HardwareProfile
from planner.specs.job import Job
from planner.specs.records import descriptions
from planner.evaluation.timing import ASSUMPTIONS as TIME_ASSUMPTIONS


def _gbs(x: float) -> str:
    return f"{x / 1e9:,.0f} GB/s"


# What each efficiency constant of the hardware profile means, in the review's words.
EFFICIENCY_LABELS = {
    "matmul_half_hidden": "GEMM half-efficiency width (hidden per TP rank)",
    "matmul_half_tokens": "GEMM half-efficiency tokens per micro-batch",
    "memory_passes": "memory-bound passes over activations per layer",
    "tp_exposed_fraction": "share of TP communication not hidden",
    "overlap_slowdown": "compute slowdown beside an overlapped collective"}


def constant_rows(hw: HardwareProfile, fw: FrameworkProfile) -> list[list[str]]:
    """Every efficiency constant of the hardware and framework profiles with its value, kind
    and source (specs/constants.py): where each number the time model uses comes from."""
    rows = []
    for dotted, value, prov in hardware_constants(hw) + framework_constants(fw):
        label = EFFICIENCY_LABELS.get(dotted.split(".", 1)[1], dotted)
        rows.append([label if label == dotted else f"{label} ({dotted})", f"{value:g}",
                     prov.kind, prov.source + (f"; fitted on {prov.data}" if prov.data else "")])
    return rows


def hardware_rows(hw: HardwareProfile) -> list[list[str]]:
    """The profile's values the estimate reads: GPU, peaks, NVLink, network, host, storage."""
    g, up, out, host, st = hw.gpu, hw.scale_up, hw.scale_out, hw.host, hw.storage
    peaks = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in g.peak_flops.items())
    return [["profile", f"{hw.name}" + (f" ({hw.description})" if hw.description else "")],
            ["GPU", f"{g.name}, {capacity(g.memory_bytes)} HBM at "
                    f"{g.hbm_bytes_per_s / 1e12:.2f} TB/s"],
            ["peak TFLOP/s (dense)", peaks],
            ["matmul ceiling", f"{g.matmul_ceiling_fraction:.0%} of peak"],
            ["board power", f"{g.power_w:,.0f} W"],
            ["NVLink domain", f"{up.gpus_per_domain} GPUs ({up.gpus_per_node} per node), "
                              f"{_gbs(up.bandwidth_bytes_per_s)} per GPU, latency "
                              f"{up.latency_s * 1e6:.1f} µs, bus efficiency "
                              f"{up.bus_efficiency:.0%}"],
            ["scale-out network", f"{_gbs(out.nic_bytes_per_s)} per GPU, latency "
                                  f"{out.latency_s * 1e6:.1f} µs, bus efficiency "
                                  f"{out.bus_efficiency:.0%}, oversubscription "
                                  f"{out.oversubscription:g}"],
            ["host", f"PCIe {_gbs(host.pcie_bytes_per_s)}, host memory "
                     f"{host.host_memory_bytes / 1e9:,.0f} GB, NVMe {_gbs(host.nvme_bytes_per_s)}"],
            ["storage", f"write {_gbs(st.write_bytes_per_s)}, read {_gbs(st.read_bytes_per_s)}"]]


def job_rows(inp: Job) -> list[list[str]]:
    """Model, parameter count, GPUs, sequence length and global batch."""
    mod = inp.model
    return [["model", mod.describe()],
            ["parameters", f"{mod.param_count():,} ({mod.active_param_count():,} active)"
             if mod.is_moe else f"{mod.param_count():,}"],
            ["GPUs", f"{inp.gpus}"], ["sequence length", f"{inp.seq_len:,}"],
            ["global batch", f"{inp.global_batch:,} sequences "
                             f"({inp.global_batch * inp.seq_len:,} tokens)"]]


def failure_rows() -> list[list[str]]:
    """The failure-rate and restart defaults (``api.DEFAULT_GPU_MTBF_S``, ``resilience``)."""
    from planner.evaluation.train import DEFAULT_GPU_MTBF_S
    from planner.resilience.planning import DEFAULT_DETECT_S, DEFAULT_RESCHEDULE_S, DEFAULT_WARMUP_S
    return [["per-GPU MTBF", f"{DEFAULT_GPU_MTBF_S / 3600:,.0f} h (Llama 3: 419 interruptions in "
                             "54 days on 16,384 GPUs), unless the plan states one"],
            ["restart: detect + reschedule + warm-up",
             f"{DEFAULT_DETECT_S / 60:g} + {DEFAULT_RESCHEDULE_S / 60:g} + "
             f"{DEFAULT_WARMUP_S / 60:g} min, plus reloading the checkpoint"]]


def assumption_tables(inp: Job, budget: Any) -> list[Table]:
    """Every input and constant the estimate used, as the review's first section's tables."""
    lay = inp.layout
    w, gr, k = optimizer_bytes_per_param(lay.precision, lay.optimizer)
    recipe = [["precision", lay.precision], ["optimizer", lay.optimizer],
              ["bytes per parameter", f"weights {w:g} + gradients {gr:g} + optimizer (K) {k:g} = "
                                      f"{w + gr + k:g}"]]
    bud = [[name, (f"{getattr(budget, name) / 1e9:g} GB" if name.endswith("bytes")
                   else f"{getattr(budget, name):.0%}"), description]
           for name, description in descriptions(type(budget)).items()]
    return [Table("Job", ["input", "value"], job_rows(inp)),
            Table("Hardware profile values used", ["quantity", "value"],
                  hardware_rows(inp.hardware)),
            Table("Precision recipe and optimizer", ["quantity", "value"], recipe),
            Table("Memory budget beyond tensors (margins)", ["item", "value", "meaning"], bud),
            Table("Efficiency constants (hardware and framework profiles)",
                  ["constant", "value", "kind", "source"], constant_rows(inp.hardware, inp.framework or load_framework())),
            Table("Time-model constants", ["constant", "value", "meaning"],
                  [[name, f"{value:g}", meaning] for name, value, meaning in TIME_ASSUMPTIONS]),
            Table("Failure-rate defaults", ["quantity", "value"], failure_rows())]
