"""Documents for the quick calculators (memory states, comm, bubble, batch, checkpoint,
scaling, layout). Formatting only."""

from __future__ import annotations

from ..calculators import (BatchResult, BubbleResult, CheckpointResult, CommResult,
                           ScalingResult, StateMemoryResult)
from ..layout import LayoutResult
from .document import Document, Table
from .units import count, duration, gb, ms, pct

ZERO_NAMES = {0: "0 (DDP, replicated)", 1: "1 (optimizer sharded)", 2: "2 (+ gradients)",
              3: "3 (+ parameters, FSDP)"}


def state_memory_doc(r: StateMemoryResult, chosen: int | None) -> Document:
    cap = r.gpu_memory_bytes
    rows = [[ZERO_NAMES[x.zero_stage], gb(x.weights_bytes), gb(x.gradients_bytes),
             gb(x.optimizer_bytes), gb(x.total_bytes), "fits" if x.fits else "does not fit"]
            for x in r.rows]
    fitting = [x.zero_stage for x in r.rows if x.fits]
    if chosen is not None:
        ok = r.rows[chosen].fits
        verdict = (f"ZeRO-{chosen}: {gb(r.rows[chosen].total_bytes)} GB of model state per GPU "
                   f"{'fits' if ok else 'does not fit'} in {gb(cap, 0)} GB")
    else:
        ok = bool(fitting)
        verdict = (f"Model states fit in {gb(cap, 0)} GB with ZeRO stage "
                   f"{', '.join(map(str, fitting))}" if fitting else
                   f"No ZeRO stage fits the model states in {gb(cap, 0)} GB on {r.shard_degree} GPUs")
    notes = [f"{r.precision} precision with {r.optimizer}: {r.bytes_per_param:g} bytes/parameter "
             f"(K = {r.k_bytes_per_param:g} optimizer bytes, ZeRO's notation)",
             "Model states only: activations, buffers, CUDA context and fragmentation come on top "
             "(give a model and layout for the full budget). An estimate, not a promise."]
    return Document(command="memory", title=f"Model-state memory per GPU: {count(r.params)} "
                    f"parameters over {r.shard_degree} data-parallel GPUs",
                    tables=[Table("Per GPU (GB)", ["ZeRO stage", "weights", "gradients",
                                  "optimizer", "total", f"vs {gb(cap, 0)} GB"], rows,
                                  bars=[x.total_bytes for x in r.rows])],
                    notes=notes, verdict=verdict, ok=ok, data=r.model_dump())


def comm_doc(r: CommResult) -> Document:
    rows = [[str(x.gpus), x.collective, gb(x.bytes_per_gpu), ms(x.time_s)] for x in r.rows]
    notes = [f"Ring algorithms: all-reduce moves 2(n−1)/n × message per GPU, all-gather and "
             f"reduce-scatter (n−1)/n; time = steps × α + bytes / bandwidth with "
             f"α = {r.latency_s * 1e6:g} µs, bandwidth = {gb(r.bandwidth_bytes_per_s, 0)} GB/s"]
    return Document(command="comm", title=f"Collective cost of a {gb(r.message_bytes)} GB message",
                    tables=[Table("Per GPU", ["GPUs", "collective", "GB moved", "time (ms)"], rows)],
                    notes=notes, data=r.model_dump())


def bubble_doc(r: BubbleResult) -> Document:
    rows = [[str(x.micro_batches), pct(x.bubble_fraction), pct(x.efficiency),
             pct(x.overhead_vs_ideal)] for x in r.rows]
    formula = "(p−1)/(v·m + p−1)" if r.schedule == "interleaved" else "(p−1)/(m + p−1)"
    notes = [f"Bubble share of the step = {formula} (Narayanan et al. 2021, Sec. 2.2); idealised: "
             "equal stage costs, no communication. More micro-batches shrink it but, under GPipe, "
             "hold more activations; 1F1B caps in-flight micro-batches at p."]
    return Document(command="bubble", title=f"Pipeline bubble, {r.stages} stages, {r.schedule}"
                    + (f" (v = {r.chunks})" if r.chunks > 1 else ""),
                    tables=[Table("By micro-batches per step", ["micro-batches", "bubble",
                                  "efficiency", "overhead vs ideal"], rows)],
                    notes=notes, data=r.model_dump())


def batch_doc(r: BatchResult) -> Document:
    rows = [["micro-batch (b)", str(r.micro_batch)], ["accumulation steps (a)", str(r.accumulation)],
            ["data parallel (N_dp)", str(r.data_parallel)],
            ["global batch b × a × N_dp", f"{r.micro_batch} × {r.accumulation} × "
             f"{r.data_parallel} = {r.global_batch}"],
            ["TP × PP × CP", f"{r.tensor_parallel} × {r.pipeline_parallel} × {r.context_parallel}"
             " (do not multiply the batch)"],
            ["GPUs", str(r.gpus)]]
    if r.tokens_per_step:
        rows.append(["tokens per step", f"{r.tokens_per_step:,}"])
    notes = ["B_global = b × a × N_dp. TP, PP and CP ranks work on the same samples, so they never "
             "multiply the batch; counting them would inflate it by "
             f"{r.tensor_parallel * r.pipeline_parallel * r.context_parallel}×."]
    if r.solved_for:
        notes.append(f"Solved for accumulation: a = {r.global_batch} / ({r.micro_batch} × "
                     f"{r.data_parallel}) = {r.accumulation}")
    return Document(command="batch", title=f"Global batch = {r.global_batch}",
                    tables=[Table("Batch arithmetic", ["quantity", "value"], rows)],
                    notes=notes, data=r.model_dump())


def checkpoint_doc(r: CheckpointResult) -> Document:
    rows = [[f"{x.interval_s / 60:g}", pct(x.overhead_fraction, 2), pct(x.lost_work_fraction, 2)]
            + ([pct(x.restart_fraction, 2)] if r.restart_s else []) + [pct(x.waste_fraction, 2)]
            for x in r.rows]
    cols = ["interval (min)", "checkpointing", "lost work"] + (["restarts"] if r.restart_s else []) \
        + ["wasted"]
    opt = [["Young √(2δM)", f"{r.young_interval_s / 60:.1f}", pct(r.young_waste_fraction, 2)],
           ["Daly (2006, Eq. 37)", f"{r.daly_interval_s / 60:.1f}", pct(r.daly_waste_fraction, 2)]]
    notes = [f"Checkpoint cost δ = {r.cost_s / 60:g} min, mean time between failures "
             f"M = {duration(r.mtbf_s)}; wasted = δ/τ + τ/(2M)"
             + (f" + R/M with restart R = {r.restart_s / 60:g} min" if r.restart_s else "")]
    return Document(command="checkpoint", title="Checkpoint interval and wasted time",
                    tables=[Table("Waste by interval", cols, rows),
                            Table("Optimum interval", ["rule", "interval (min)", "wasted"], opt)],
                    notes=notes, data=r.model_dump())


def scaling_doc(r: ScalingResult) -> Document:
    if r.mode == "strong":
        rows = [["1 GPU", ms(r.baseline_s), "1.00×", "100.0%"],
                [f"{r.gpus} GPUs ideal", ms(r.ideal_s), f"{r.gpus:.2f}×", "100.0%"],
                [f"{r.gpus} GPUs measured", ms(r.measured_s), f"{r.speedup:.2f}×", pct(r.efficiency)]]
        note = "Strong scaling (fixed total work): speedup T1/Tn, efficiency T1/(n·Tn)."
    else:
        rows = [["1 GPU", ms(r.baseline_s), "1.00×", "100.0%"],
                [f"{r.gpus} GPUs measured", ms(r.measured_s), f"{r.speedup:.2f}×", pct(r.efficiency)]]
        note = "Weak scaling (fixed work per GPU): efficiency T1/Tn; speedup n·T1/Tn."
    return Document(command="scaling", title=f"{r.mode.capitalize()} scaling on {r.gpus} GPUs",
                    tables=[Table("Scaling", ["run", "time (ms)", "speedup", "efficiency"], rows)],
                    notes=[note], data=r.model_dump())


def layout_doc(r: LayoutResult) -> Document:
    lay = r.layout
    rows = [[x.name, x.status, x.measured, x.limit] for x in r.rules]
    groups = [[x.axis.upper(), str(x.size), str(x.count), x.link,
               str(x.max_nodes_spanned), " ".join(map(str, x.example[:16]))
               + (" …" if len(x.example) > 16 else "")] for x in r.groups]
    tables = [Table("Rules", ["rule", "status", "measured", "limit"], rows),
              Table("Rank groups (Megatron order: TP fastest, then CP, DP, PP)",
                    ["axis", "size", "groups", "link", "nodes spanned", "first group"], groups)]
    if r.members:
        for axis, members in r.members.items():
            tables.append(Table(f"{axis.upper()} groups", ["#", "ranks"],
                                [[str(i), " ".join(map(str, m))] for i, m in enumerate(members)]))
    verdict = (f"TP={lay.tp} PP={lay.pp} CP={lay.cp} DP={lay.dp}: valid, {r.replica_gpus} GPUs "
               f"per model replica" if r.ok else
               "Invalid layout: " + "; ".join(f"{x.name} ({x.message})" for x in r.rules
                                              if x.status == "fail"))
    data = r.model_dump()
    data["ok"] = r.ok
    return Document(command="layout", title=f"Layout of {r.gpus} GPUs ({r.gpus_per_node} per node)",
                    tables=tables, verdict=verdict, ok=r.ok, data=data)
