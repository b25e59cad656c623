"""dtplan's step-time model against published Megatron-LM runs on A100 (Selene).

Cases come from ``planner/data/calibration_cases.json`` (Korthikanti et al. 2022 Table 5;
Narayanan et al. SC21 Table 1; each case cites its source). Every published *throughput* case
with complete inputs becomes one or two
rows: the published figure, dtplan's prediction and the error.

- Korthikanti et al. 2022 Table 5: iteration time, two columns per model: full recompute
  without sequence parallelism, and "present work" = sequence parallel + selective recompute.
  Micro-batch, interleave degree (m = 3 for 175B and 530B) and batch are printed (Table 3).
- Korthikanti Sec. 6.3: 530B on 2240 GPUs (DP = 8), 39.15 s, SP + selective, with the gradient
  all-reduce *not* overlapped with the backward pass (stated by the paper).
- Narayanan et al. 2021 Table 1: hardware TFLOP/s per GPU with full recompute, interleaved
  schedule with scatter/gather, no sequence parallelism (it did not exist yet). Micro-batch and
  interleave degree v are not published, so they are chosen "auto": every micro-batch dividing
  the per-replica batch and every v (1, or 2..4 when the layers divide) is evaluated in one
  vectorised call, and the fastest candidate that fits in memory is kept.

- torchtitan docs/performance.md: Llama 3 (8B, 70B; seq 8192) and Llama 2 (13B, 70B; seq 4096)
  with FSDP2 (ZeRO-3, TP 1) on 64 A100 80GB, tokens/s per GPU, under the torchtitan framework
  profile (eager kernels). Activation checkpointing as published: "full" = full recompute of
  every layer; "selective layer" = full recompute of every second layer (torchtitan's
  selective_ac_option = '2' of the configs of that era); "selective op" is the torchtitan
  profile's own selective recompute (its op save list: every second matmul redone).
- calibration_modern.json (calibration_modern.py): torchtitan on 500 W H100s, tokens/s per GPU.

Megatron-LM of 2021-22 reduced gradients after the backward pass (Korthikanti Sec. 6.3), while
`evaluate` assumes a modern overlapped reduction. For these cases the hidden part of the
data-parallel reduction is added back: step = step_time + (t.dp_total − t.dp_exposed).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import load_profile
from planner.specs.knobs import Layout, Recompute
from planner.specs.model import ModelSpec
from planner.specs.presets import PRESETS, get_preset
from planner.calibration.modern import (MODERN_PROFILE, MODERN_TOLERANCE_PCT,
                                        modern_calibration_rows, regimes)
from planner.calibration.report import CalibrationReport, CalibrationRow, Metric
from planner.errors import InputError, named
from planner.evaluation.error_band import family, generation
from planner.evaluation.timing_terms import KERNEL_MEMORY_FACTOR
from planner.specs.framework import FrameworkProfile, load_framework

CASES_FILE = "calibration_cases.json"
# The cases' hardware: DGX A100 80GB on Selene (Korthikanti et al. 2022; Narayanan et al.
# SC21), and torchtitan's 64 A100 80GB.
DEFAULT_PROFILE = "a100-80g"
TOLERANCE_PCT = 10.0           # the Megatron-LM rows (the constants were fitted on them)
# The torchtitan FSDP rows on A100 under the torchtitan profile (achieved: worst 10.7 %).
FSDP_TOLERANCE_PCT = 15.0

@lru_cache(maxsize=1)
def load_cases() -> tuple[dict, ...]:
    """Every case of the shipped calibration file (a tuple of dicts, as in the JSON)."""
    # `planner` is a namespace package (no __init__), so read beside this module rather than
    # through importlib.resources; pyproject ships planner/data/*.json.
    text = (Path(__file__).parents[1] / "data" / CASES_FILE).read_text(encoding="utf-8")
    return tuple(json.loads(text))


def case_by_id(case_id: str) -> dict:
    for c in load_cases():
        if c["id"] == case_id:
            return c
    raise KeyError(case_id)


def _model_for(arch: dict) -> ModelSpec:
    """The Megatron GPT preset with the case's layers, hidden size and heads."""
    for name, spec in PRESETS.items():
        if name.startswith("megatron-gpt-") and (spec.layers, spec.hidden, spec.heads) == (
                arch["layers"], arch["hidden"], arch["heads"]):
            if arch.get("vocab", spec.vocab) != spec.vocab:
                continue
            return spec
    raise LookupError(f"no megatron-gpt preset with L={arch['layers']} h={arch['hidden']} "
                      f"a={arch['heads']}")


def _describe(lay: Layout) -> str:
    sched = f"interleaved v={lay.chunks}" if lay.schedule == "interleaved" else lay.schedule
    k = f"×{lay.recompute_layers} layers" if lay.recompute_layers is not None else ""
    zero = f"ZeRO-{lay.zero} " if lay.zero else ""
    return (f"TP{lay.tp} PP{lay.pp} DP{lay.dp} {zero}mb={lay.micro_batch} {sched} "
            f"{'SP ' if lay.sequence_parallel else ''}recompute={lay.recompute}{k}")


def megatron_2021() -> FrameworkProfile:
    """Megatron-LM as the 2021-22 Selene runs used it: fp16 (Narayanan Sec. 5.1 "mixed
    precision"), and fp32 gradient all-reduce is only forced for bf16 (arguments.py), so the
    gradients were reduced in fp16. No host time per step: the profile's step_host_s is fitted
    on Megatron-Core / NeMo MLPerf runs (2023-25), and the A100 constants were fitted on these
    rows without one."""
    fw = load_framework("megatron")
    return replace(fw, time=replace(fw.time, reduce_dtype="fp16", step_host_s=0.0))


def torchtitan_eager() -> FrameworkProfile:
    """torchtitan without torch.compile (its default, compile.enable = False)."""
    fw = load_framework("torchtitan")
    return replace(fw, time=replace(fw.time, kernel_class="eager"))


class NoValidLayout(ValueError):
    """A published case whose layout cannot run on the chosen hardware (e.g. TP 8 on a profile
    whose NVLink domain is smaller): the case is skipped with this reason."""


def _run(model: ModelSpec, hw: HardwareProfile, gpus: int, global_batch: int, seq_len: int,
         layouts: list[Layout], overlap_dp: bool, framework: Optional[FrameworkProfile] = None,
         precision: str = "mixed") -> tuple[Layout, "_Figures"]:
    """Evaluate the layouts in one vectorised call; keep the fastest valid one (or, if none is
    valid, the fastest that only fails memory, so an over-full case still gets a figure)."""
    p = Problem(model=model, hardware=hw, gpus=gpus, seq_len=seq_len, global_batch=global_batch,
                framework=framework or megatron_2021(), precision=precision,
                optimizer=layouts[0].optimizer)
    r = evaluate(p, Candidates.from_layouts(layouts))
    t = r.time
    step = t.step if overlap_dp else t.step + t.dp_total - t.dp_exposed
    structural = np.ones(len(layouts), dtype=bool)
    for k, v in r.rules.passes.items():
        if k != "fits-in-memory":
            structural &= v
    ok = r.rules.valid if r.rules.valid.any() else structural
    if not ok.any():
        failed = sorted(k for k, v in r.rules.passes.items()
                        if k != "fits-in-memory" and not v.any())
        raise NoValidLayout(f"no layout of the published shape passes {', '.join(failed)} on "
                            f"{hw.name}")
    i = int(np.argmin(np.where(ok, step, np.inf)))
    return layouts[i], _Figures(step=float(step[i]), step_time=float(t.step[i]),
                                mfu=float(r.throughput.mfu[i]), hfu=float(r.throughput.hfu[i]),
                                hardware_flops=float(r.throughput.hardware_flops[i]),
                                fits=bool(r.rules.passes["fits-in-memory"][i]))


@dataclass(frozen=True)
class _Figures:
    """One evaluated case: step (with or without the DP overlap the run had), the model's own
    step time, utilisation and FLOPs."""

    step: float
    step_time: float
    mfu: float
    hfu: float
    hardware_flops: float
    fits: bool


def _auto_layouts(model: ModelSpec, tp: int, pp: int, dp: int, global_batch: int,
                  recompute: Recompute, sp: bool) -> list[Layout]:
    """Every micro-batch dividing the per-replica batch × every interleave degree v (1, or
    2..4 when PP > 1 and the layers divide into PP·v chunks)."""
    per_replica = global_batch // dp
    out = []
    for mb in (d for d in range(1, per_replica + 1) if per_replica % d == 0):
        for v in [1] + ([2, 3, 4] if pp > 1 else []):
            if model.layers % (pp * v):
                continue
            out.append(Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, chunks=v, sp=sp,
                              schedule="interleaved" if v > 1 else "1f1b", recompute=recompute))
    return out


def _row(case: dict, suffix: str, metric: Metric, published: float, predicted: float,
         lay: Layout, r: _Figures, framework: str = "megatron") -> CalibrationRow:
    return CalibrationRow(regime=f"{framework}/A100/{family(lay)}", hardware=DEFAULT_PROFILE,
                          case=case["id"] + suffix, source=case["source"].split(",")[0],
                          metric=metric, published=float(published), predicted=predicted,
                          error_pct=(predicted / published - 1.0) * 100.0, layout=_describe(lay),
                          step_time_s=r.step, mfu=r.mfu * r.step_time / r.step,
                          hfu=r.hfu * r.step_time / r.step, fits=r.fits)


def _korthikanti_rows(case: dict, hw: HardwareProfile) -> list[CalibrationRow]:
    inp, exp = case["inputs"], case["expected"]
    arch, lo = inp["arch"], inp["layout"]
    model = _model_for(arch)
    v = lo.get("interleave_stages_m") or 1
    common = dict(tp=lo["tp"], pp=lo["pp"], dp=lo["dp"], micro_batch=lo["micro_batch"],
                  chunks=v, schedule="interleaved" if v > 1 else "1f1b")
    columns = []
    if "iter_time_s_full_recompute" in exp:
        columns.append(("/full-recompute", Layout(**common, sp=False, recompute="full"),
                        exp["iter_time_s_full_recompute"]))
        columns.append(("/sp+selective", Layout(**common, sp=True, recompute="selective"),
                        exp["iter_time_s_present_work"]))
    else:  # the DP = 8 run: SP + selective as stated in its inputs
        columns.append(("", Layout(**common, sp=bool(lo.get("sequence_parallel", True)),
                                   recompute=lo.get("recompute", "selective")), exp["iter_time_s"]))
    rows = []
    for suffix, lay, published in columns:
        lay_, r = _run(model, hw, lo["gpus"], lo["global_batch_seqs"], arch["seq_len"], [lay],
                       overlap_dp=bool(lo.get("grad_allreduce_overlap", False)))
        rows.append(_row(case, suffix, "iteration_time_s", published, r.step, lay_, r))
    return rows


def _narayanan_row(case: dict, hw: HardwareProfile) -> CalibrationRow:
    inp, exp = case["inputs"], case["expected"]
    arch, lo = inp["arch"], inp["layout"]
    model = _model_for(arch)
    lays = _auto_layouts(model, lo["tp"], lo["pp"], lo["dp"], lo["global_batch_seqs"],
                         recompute="full", sp=False)
    lay, r = _run(model, hw, lo["gpus"], lo["global_batch_seqs"], arch["seq_len"], lays,
                  overlap_dp=False)
    tflops = r.hardware_flops / (r.step * lo["gpus"]) / 1e12
    return _row(case, "", "hardware_tflops_per_gpu", exp["achieved_tflops_per_gpu"], tflops,
                lay, r)


# torchtitan's activation-checkpointing modes → (dtplan recompute mode, every second layer only):
# "selective op" is the torchtitan profile's selective recompute (its op save list).
_TORCHTITAN_AC: dict[str, tuple[Recompute, bool]] = {
    "none": ("none", False), "full": ("full", False), "selective layer": ("full", True),
    "selective op": ("selective", False)}


def torchtitan_layout(case: dict) -> Layout:
    """The published FSDP2 layout and activation checkpointing of a torchtitan case."""
    inp = case["inputs"]
    lo, model = inp["layout"], get_preset(inp["preset"])
    recompute, every_second = _TORCHTITAN_AC[lo["activation_checkpointing"]]
    return Layout(tp=lo["tp"], pp=lo["pp"], dp=lo["dp"], zero=lo["zero"],
                  micro_batch=lo["micro_batch"], recompute=recompute,
                  recompute_layers=model.layers // 2 if every_second else None)


def _torchtitan_row(case: dict, hw: HardwareProfile) -> CalibrationRow:
    inp, exp = case["inputs"], case["expected"]
    lo, model = inp["layout"], get_preset(inp["preset"])
    lay = torchtitan_layout(case)
    lay, r = _run(model, hw, lo["gpus"], lo["global_batch_seqs"], inp["seq_len"], [lay],
                  overlap_dp=True, framework=torchtitan_eager())
    wps = lo["global_batch_seqs"] * inp["seq_len"] / r.step / lo["gpus"]
    suffix = f" ({lo['activation_checkpointing']})"
    row = _row(case, "", "tokens_per_s_per_gpu", exp["tokens_per_s_per_gpu"], wps, lay, r,
               framework="torchtitan")
    return replace(row, layout=row.layout + suffix)


def _evaluable(case: dict) -> Optional[str]:
    """None if the case can be evaluated, else why not."""
    cid = case["id"]
    if cid.startswith("korthikanti-table5-") or cid == "korthikanti-530B-dp8-2240gpu":
        return None
    if cid.startswith("narayanan-table1-") or cid.startswith("torchtitan-"):
        return None
    if cid == "korthikanti-table4-22B-layer-times":
        return "per-layer kernel times, not an end-to-end step (no per-layer output in dtplan)"
    if cid == "korthikanti-microbatch-level-recompute":
        return "microbatch-level recomputation is not modelled"
    return "inputs incomplete for an end-to-end step"


def efficiency_constants(hw: HardwareProfile) -> dict[str, float]:
    """The fitted per-generation constants (and the measured ones they sit on)."""
    e = hw.efficiency
    return {"matmul_ceiling_fraction": hw.gpu.matmul_ceiling_fraction,
            "matmul_half_hidden": e.matmul_half_hidden,
            "matmul_half_tokens": e.matmul_half_tokens,
            "memory_passes": e.memory_passes,
            "tp_exposed_fraction": e.tp_exposed_fraction,
            "sustained_matmul_fraction": e.sustained_matmul_fraction,
            "flash_attention_fraction": e.flash_attention_fraction,
            "nvlink_bus_efficiency": hw.scale_up.bus_efficiency,
            "network_bus_efficiency": hw.scale_out.bus_efficiency}


def bar(case: str) -> float:
    """The tolerance a row is held to: ±10 % for Megatron-LM rows, ±15 % for FSDP rows."""
    return FSDP_TOLERANCE_PCT if case.startswith("torchtitan-") else TOLERANCE_PCT


def paper_rows(hw: HardwareProfile) -> tuple[list[CalibrationRow], dict[str, str]]:
    """The shipped cases (Megatron-LM papers, torchtitan A100) evaluated on `hw`."""
    rows: list[CalibrationRow] = []
    skipped: dict[str, str] = {}
    for case in load_cases():
        if case.get("kind") != "throughput":
            continue
        why = _evaluable(case)
        if why is not None:
            skipped[case["id"]] = why
            continue
        try:
            if case["id"].startswith("narayanan-"):
                rows.append(_narayanan_row(case, hw))
            elif case["id"].startswith("torchtitan-"):
                rows.append(_torchtitan_row(case, hw))
            else:
                rows.extend(_korthikanti_rows(case, hw))
        except NoValidLayout as e:  # e.g. TP 8 where the NVLink domain is smaller
            skipped[case["id"]] = str(e)
    if hw.name != DEFAULT_PROFILE:
        rows = [replace(r, hardware=hw.name, regime=r.regime.replace(
            "/A100/", f"/{generation(hw)}/")) for r in rows]
    return rows, skipped


def calibrate(hardware: HardwareProfile | str | None = None,
              framework: Optional[str] = None) -> CalibrationReport:
    """Every evaluable published throughput case: published vs predicted, per regime, and a
    summary. Each family runs on the GPU it ran on (the A100 papers' and torchtitan A100 rows on
    a100-80g, the modern torchtitan rows on h100-96gb-500w). `hardware` naming one of those two
    keeps that family; any other profile runs every row on it (a what-if). `framework` keeps the
    rows that ran on that framework."""
    given = None if hardware is None else (hardware if isinstance(hardware, HardwareProfile)
                                           else load_profile(hardware))
    own = given is None or given.name in (DEFAULT_PROFILE, MODERN_PROFILE)
    rows: list[CalibrationRow] = []
    skipped: dict[str, str] = {}
    memory: list[CalibrationRow] = []
    if given is None or not own or given.name == DEFAULT_PROFILE:
        rows, skipped = paper_rows(given if given is not None else load_profile(DEFAULT_PROFILE))
    if given is None or not own or given.name == MODERN_PROFILE:
        modern, memory = modern_calibration_rows(given, _describe)
        rows += modern
    if framework is not None:
        fw = load_framework(framework).name
        rows = [r for r in rows if r.regime.startswith(fw + "/")]
        memory = [r for r in memory if r.regime.startswith(fw + "/")]
        if not rows:
            raise InputError(named("framework"), f"no calibration row ran on {fw}; rows exist for "
                             "megatron and torchtitan")
    hw = given or load_profile(DEFAULT_PROFILE)
    if not rows:
        raise InputError(named("hardware"), f"no published case can be laid out on {hw.name} "
                                       "(each one's layout fails a structural rule there)")
    errs = [abs(r.error_pct) for r in rows]
    worst = max(rows, key=lambda r: abs(r.error_pct))
    notes = [
        "Korthikanti rows compare iteration time (s); Narayanan rows compare hardware TFLOP/s "
        "per GPU (FLOPs incl. the recompute forward, Narayanan Eq. 3).",
        "Narayanan micro-batch and interleave degree are unpublished: dtplan picks the fastest "
        "that fits among every micro-batch dividing the per-replica batch and v in 1..4.",
        "Megatron-LM 2021-22 reduced gradients after the backward pass (Korthikanti Sec. 6.3): "
        "the data-parallel reduction is counted in full, not overlapped.",
        "torchtitan rows compare tokens/s per GPU under the torchtitan framework profile (FSDP2 "
        "per-block gathers hidden layer by layer, fp32 reduce-scatter, its op-level selective "
        "recompute; eager unless the run used torch.compile). Bars: Megatron-LM ±10%, FSDP ±15%.",
        "Modern rows (torchtitan's published H100 benchmarks, pytorch/torchtitan benchmarks/): "
        "torchtitan on the 500 W 96 GB H100 "
        "(h100-96gb-500w), bar ±15%. Its sustained_matmul_fraction and matmul_half_hidden, and "
        "the eager kernel-class factor, are fitted on these rows plus torchtitan's compile row of "
        "the same 8B job (6,667 tokens/s); FlashAttention and fp8 MAMF shares are published "
        "microbenchmarks.",
        "A100 constants fitted on the Megatron-LM and A100 torchtitan rows: matmul_half_hidden, "
        "matmul_half_tokens, sustained_matmul_fraction, memory_passes, tp_exposed_fraction; "
        "flash_attention_fraction at the low end of FlashAttention-2's published A100 range; the "
        "matmul ceiling, link efficiencies and NCCL step latencies are measured (public MAMF and "
        "nccl-tests figures; see the hardware profiles).",
    ]
    if any(r.hardware == MODERN_PROFILE for r in rows):
        h = load_profile(MODERN_PROFILE)
        notes.append(f"Constants ({h.name}; {h.efficiency.calibrated_on}): " + ", ".join(
            f"{k} = {v:g}" for k, v in efficiency_constants(h).items())
            + f", fa3_attention_fraction = {h.efficiency.fa3_attention_fraction:g}, "
            f"fp8_matmul_ceiling_fraction = {h.efficiency.fp8_matmul_ceiling_fraction:g}; "
            f"eager kernel-class factor {KERNEL_MEMORY_FACTOR['eager']:g} (timing_terms.py).")
    return CalibrationReport(
        hardware=hw.name, rows=rows, median_abs_error_pct=statistics.median(errs),
        worst_abs_error_pct=max(errs), worst_case=worst.case,
        within_tolerance=sum(abs(r.error_pct) <= (MODERN_TOLERANCE_PCT if r.hardware ==
                                                  MODERN_PROFILE else bar(r.case)) for r in rows),
        tolerance_pct=TOLERANCE_PCT, fsdp_tolerance_pct=FSDP_TOLERANCE_PCT,
        constants=efficiency_constants(hw), skipped=skipped, notes=notes,
        regimes=regimes(rows), memory_rows=memory)
