"""The rules a plan adds to the layout rules (gate.evaluate_inputs runs them): batch accounting
(B = b × a × DP exactly), one rule per threshold the plan sets, and the checkpoint interval
against Daly's optimum (sizes, write cost and MTBF from planner.resilience.planning; waste δ/τ + τ/2M +
R/M from engine.checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.engine import checkpoint as ckpt
from planner.errors import InputError
from planner.io.units import capacity
from planner.specs.job import Job
from planner.specs.knobs import Layout
from planner.specs.plan import Thresholds
from planner.specs.verdict import GateRule, make_rule


def batch_accounting_rule(g: int, micro: int, accumulation: int, layout: Layout,
                          key: str | None = None) -> GateRule:
    """B = b × a × DP exactly; name the TP/PP/CP inflation when that is what happened."""
    expected = micro * accumulation * layout.dp
    ok = g == expected
    message = "global batch = micro-batch × accumulation × DP; TP, PP and CP never multiply it"
    model_par = layout.tp * layout.pp * layout.cp
    if not ok and model_par > 1 and g == expected * model_par:
        message = (f"global batch is inflated by TP×PP×CP = {model_par}: it counts every GPU as a "
                   "data-parallel rank")
    return make_rule("batch-accounting", ok,
                     f"{g} vs {micro} × {accumulation} × DP {layout.dp} = {expected}",
                     f"= {expected}", message, key=key)


def recompute_rule(layout: Layout, fw: Any, key: str | None = "layout.recompute") -> GateRule:
    """Selective recompute only where the framework has a selective mode (its profile's
    selective_recompute; DeepSpeed and the FSDP trainers checkpoint whole layers only): the
    plan-file side of validate.framework_recompute, which refuses `--recompute selective`."""
    none = not fw.time.has_selective
    ok = not (layout.recompute == "selective" and none)
    return make_rule("recompute-in-framework", ok, f"recompute {layout.recompute} ({fw.name})",
                     "none or full" if none else "none, selective or full",
                     "the framework must have the recompute mode the plan names", key=key)


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def threshold_rules(t: Thresholds, est: Any) -> list[GateRule]:
    out: list[GateRule] = []

    def add(field_: str, ok: bool, measured: str, limit: str, message: str) -> None:
        out.append(make_rule(field_.replace("_", "-"), ok, measured, limit, message,
                             key=f"thresholds.{field_}"))

    if t.max_memory_fraction is not None:
        frac = est.peak_memory_bytes / est.capacity_bytes
        add("max_memory_fraction", frac <= t.max_memory_fraction,
            f"{frac:.1%}: {_gb(est.peak_memory_bytes)} of {capacity(est.capacity_bytes)}",
            f"≤ {t.max_memory_fraction:.1%}", "peak memory as a share of GPU capacity")
    if t.min_headroom_gb is not None:
        head = est.usable_memory_bytes - est.peak_memory_bytes
        add("min_headroom_gb", head >= t.min_headroom_gb * 1e9, _gb(head),
            f"≥ {t.min_headroom_gb:g} GB", "usable memory left after the peak")
    if t.min_mfu is not None:
        add("min_mfu", est.mfu >= t.min_mfu, f"{est.mfu:.1%}", f"≥ {t.min_mfu:.1%}",
            "model FLOPs utilisation (estimated)")
    if t.max_bubble is not None:
        add("max_bubble", est.bubble_fraction <= t.max_bubble, f"{est.bubble_fraction:.1%}",
            f"≤ {t.max_bubble:.1%}", "pipeline bubble share of the step")
    if t.max_step_time_s is not None:
        add("max_step_time_s", est.step_time_s <= t.max_step_time_s, f"{est.step_time_s:.2f} s",
            f"≤ {t.max_step_time_s:g} s", "estimated time per optimizer step")
    if t.min_tokens_per_s_per_gpu is not None:
        add("min_tokens_per_s_per_gpu", est.tokens_per_s_per_gpu >= t.min_tokens_per_s_per_gpu,
            f"{est.tokens_per_s_per_gpu:,.0f}", f"≥ {t.min_tokens_per_s_per_gpu:,.0f}",
            "estimated training throughput per GPU")
    if t.max_collective_fraction is not None:
        add("max_collective_fraction", est.collective_fraction <= t.max_collective_fraction,
            f"{est.collective_fraction:.1%}", f"≤ {t.max_collective_fraction:.1%}",
            "exposed communication share of the step")
    return out


@dataclass
class CheckpointFigures:
    cost_s: float
    mtbf_s: float
    interval_s: float
    waste: float
    optimum_s: float
    optimum_waste: float
    source: str


def checkpoint_figures(inp: Job, where: str) -> CheckpointFigures | None:
    """The plan's checkpoint policy through planner.resilience.planning (size, write cost δ, job MTBF,
    Daly's optimum) and engine.checkpoint (waste δ/τ + τ/2M + R/M at the stated interval)."""
    from planner.resilience.planning import checkpoint_write, failure_rate, interval_optimum, layout_checkpoint

    c = inp.checkpoint
    if c is None:
        return None
    lay, hw = inp.layout, inp.hardware
    try:
        fr = failure_rate(gpus=inp.gpus, gpus_per_node=hw.scale_up.gpus_per_node,
                          gpu_mtbf_s=_hours(c.gpu_mtbf_hours), node_mtbf_s=_hours(c.node_mtbf_hours),
                          job_mtbf_s=_hours(c.mtbf_hours))
    except InputError:
        raise InputError(f"{where}: checkpoint", "give exactly one of mtbf_hours (the job's), "
                         "node_mtbf_hours or gpu_mtbf_hours") from None
    if c.cost_min is not None:
        if c.size_gb is not None or c.write_gbps is not None:
            raise InputError(f"{where}: checkpoint.cost_min", "give cost_min or size_gb/write_gbps,"
                                                              " not both")
        cost, source = c.cost_min * 60, "stated cost"
    else:
        contents = layout_checkpoint(inp.model.param_count(), lay, inp.model.routed_expert_params())
        size = c.size_gb * 1e9 if c.size_gb is not None else contents.total_bytes
        storage = c.write_gbps * 1e9 if c.write_gbps is not None else hw.storage.write_bytes_per_s
        write = checkpoint_write(size, storage, writers=contents.effective_writers,
                                 link_bytes_per_s=hw.scale_out.nic_bytes_per_s,
                                 busiest_rank_bytes=None if c.size_gb else contents.busiest_rank_bytes)
        cost = write.blocking_s
        source = (f"{size / 1e9:,.0f} GB {'(stated)' if c.size_gb else 'of weights and optimizer state'}"
                  f" at {min(storage, write.links_bytes_per_s) / 1e9:,.0f} GB/s, bound by "
                  f"{write.binds}")
    restart = c.restart_min * 60
    opt = interval_optimum(cost, fr.job_mtbf_s, restart)
    tau = c.interval_min * 60
    return CheckpointFigures(cost_s=cost, mtbf_s=fr.job_mtbf_s, interval_s=tau,
                             waste=float(ckpt.waste_fraction(tau, cost, fr.job_mtbf_s, restart)),
                             optimum_s=opt.daly_interval_s, optimum_waste=opt.daly_waste_fraction,
                             source=source)


def _hours(h: float | None) -> float | None:
    return None if h is None else h * 3600.0


def checkpoint_rules(f: CheckpointFigures | None, t: Thresholds) -> list[GateRule]:
    if f is None:
        return []
    far = not (0.5 <= f.interval_s / f.optimum_s <= 2.0)
    out = [make_rule("checkpoint-interval", not far,
                     f"{f.interval_s / 60:.0f} min (waste {f.waste:.1%})",
                     f"within 2× of the optimum {f.optimum_s / 60:.0f} min (Daly; waste "
                     f"{f.optimum_waste:.1%})",
                     f"checkpoint cost δ = {f.cost_s / 60:.1f} min ({f.source}), job MTBF "
                     f"{f.mtbf_s / 3600:.1f} h", key="checkpoint.interval_min", warn=True)]
    if t.max_checkpoint_waste is not None:
        out.append(make_rule("max-checkpoint-waste", f.waste <= t.max_checkpoint_waste,
                             f"{f.waste:.1%}", f"≤ {t.max_checkpoint_waste:.1%}",
                             "time lost to writing checkpoints, redoing work and restarting",
                             key="thresholds.max_checkpoint_waste"))
    return out
