"""Documents for the quick calculators (memory states, comm, bubble, batch, checkpoint,
scaling, layout). Formatting only."""

from __future__ import annotations

from planner.evaluation.calculators import (BatchResult, BubbleResult, CheckpointResult, CommResult,
                           ScalingResult, StateMemoryResult)
from planner.specs.layout import LayoutResult
from planner.resilience.contents import CheckpointContents
from planner.resilience.planning import (DEFAULT_DETECT_S, DEFAULT_RESCHEDULE_S, DEFAULT_WARMUP_S,
                          DEFAULT_RESTART_S, CheckpointWrite, FailureRate, IntervalOptimum,
                          ResiliencePlan, RestartCost, TrainingTime)
from planner.resilience.straggler import Straggler
from planner.render.document import Document, Table
from planner.io.units import capacity, count, duration, gb, ms, pct
from planner.specs.records import dump

ZERO_NAMES = {0: "0 (DDP, replicated)", 1: "1 (optimizer sharded)", 2: "2 (+ gradients)",
              3: "3 (+ parameters, FSDP)"}


def state_memory_doc(r: StateMemoryResult, chosen: int | None, *, gib: bool = False) -> Document:
    unit, cap_s = ("GiB" if gib else "GB"), capacity(r.gpu_memory_bytes, gib=gib)
    # One verdict rule for every command: capacity minus the margin, as the full budget uses.
    usable_s = f"{gb(r.usable_bytes, gib=gib)} {unit} usable of {cap_s}"
    rows = [[ZERO_NAMES[x.zero_stage], gb(x.weights_bytes, gib=gib), gb(x.gradients_bytes, gib=gib),
             gb(x.optimizer_bytes, gib=gib), gb(x.total_bytes, gib=gib),
             "fits" if x.fits else "does not fit"] for x in r.rows]
    fitting = [x.zero_stage for x in r.rows if x.fits]
    if chosen is not None:
        ok = r.rows[chosen].fits
        verdict = (f"ZeRO-{chosen}: {gb(r.rows[chosen].total_bytes, gib=gib)} {unit} of model state "
                   f"per GPU {'fits' if ok else 'does not fit'} in {usable_s}")
    else:
        ok = bool(fitting)
        verdict = (f"Model states fit in {usable_s} with ZeRO stage "
                   f"{', '.join(map(str, fitting))}" if fitting else
                   f"No ZeRO stage fits the model states in {usable_s} on {r.shard_degree} GPUs")
    notes = [f"{r.precision} precision with {r.optimizer}: {r.bytes_per_param:g} bytes/parameter "
             f"(K = {r.k_bytes_per_param:g} optimizer bytes, ZeRO's notation)",
             f"Usable = capacity minus the {r.margin_fraction:.0%} margin (--margin), the rule "
             "every memory verdict uses",
             "Model states only: activations, buffers, CUDA context and fragmentation come on top "
             "(add --seq-len or a layout such as --tp 2 for the full per-stage budget). An "
             "estimate, not a promise."]
    return Document(command="memory", title=f"Model-state memory per GPU: {count(r.params)} "
                    f"parameters over {r.shard_degree} data-parallel GPUs",
                    tables=[Table(f"Per GPU ({unit}) against {usable_s}",
                                  ["ZeRO stage", "weights", "gradients", "optimizer", "total",
                                   "verdict"], rows, bars=[x.total_bytes for x in r.rows])],
                    notes=notes, verdict=verdict, ok=ok, data=dump(r), mode="states")


def comm_doc(r: CommResult) -> Document:
    bw = r.bandwidth_bytes_per_s   # None on a hardware profile's topology (one of the two given)
    topo = bw is None
    sizes = len({x.message_bytes for x in r.rows}) > 1
    rows = [([gb(x.message_bytes)] if sizes else []) + [str(x.gpus), x.collective,
            gb(x.bytes_per_gpu), ms(x.time_s)]
            + ([x.link, x.algorithm, gb(x.busbw_bytes_per_s, 1)] if topo else []) for x in r.rows]
    if bw is None:
        how = (f"on the {r.hardware} profile's topology as NCCL runs it: NVLink inside a domain, "
               "the NICs across; ring, tree or NVLS-Tree per collective (all-gather and "
               "reduce-scatter are ring-only), NCCL's per-step latencies and the profile's bus "
               "efficiencies; busbw as nccl-tests reports it")
    else:
        how = (f"time = steps × α + bytes / bandwidth with α = {r.latency_s * 1e6:g} µs, "
               f"bandwidth = {gb(bw, 0)} GB/s")
    notes = ["Ring algorithms: all-reduce moves 2(n−1)/n × message per GPU, all-gather and "
             f"reduce-scatter (n−1)/n; {how}"]
    title = ("Collective cost by message size" if sizes
             else f"Collective cost of a {gb(r.message_bytes)} GB message")
    return Document(command="comm", title=title,
                    tables=[Table("Per GPU", (["message (GB)"] if sizes else [])
                                  + ["GPUs", "collective", "GB moved", "time (ms)"]
                                  + (["link", "algorithm", "busbw (GB/s)"] if topo else []), rows)],
                    notes=notes, data=dump(r))


def bubble_doc(r: BubbleResult) -> Document:
    rows = [[str(x.micro_batches), pct(x.bubble_fraction), pct(x.efficiency),
             pct(x.overhead_vs_ideal)] for x in r.rows]
    formula = {"interleaved": "(p−1)/(v·m + p−1) (Narayanan et al. 2021, Sec. 2.2)",
               "zb-h1": "s/(m + s), s = (p−1)/3 idle micro-batch slots: the weight gradient W "
                        "(half the backward, t_b = 2·t_f) deferred into the cool-down (Qi et al. "
                        "2023, Sec. 3.1)",
               "dualpipe": "s/(m + s), s = (p−2)/3 idle slots: (p/2 − 1)(F&B + B − 3W) with "
                           "F&B = F + B, W = B/2 = F (deepseek-ai/DualPipe README)",
               "dualpipev": "s/(m + s), s = (p−1)/3 idle slots: DualPipe's on 2p half stages "
                            "(deepseek-ai/DualPipe README)"}.get(r.schedule,
                                               "(p−1)/(m + p−1) (Narayanan et al. 2021, Sec. 2.2)")
    notes = [f"Bubble share of the step = {formula}; idealised: "
             "equal stage costs, no communication. More micro-batches shrink it but, under GPipe, "
             "hold more activations; 1F1B and ZB-H1 cap in-flight micro-batches at p."]
    return Document(command="bubble", title=f"Pipeline bubble, {r.stages} stages, {r.schedule}"
                    + (f" (v = {r.chunks})" if r.chunks > 1 else ""),
                    tables=[Table("By micro-batches per step", ["micro-batches", "bubble",
                                  "efficiency", "overhead vs ideal"], rows)],
                    notes=notes, data=dump(r))


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
             f"{r.model_parallel}×."]
    if r.solved_for:
        notes.append(f"Solved for accumulation: a = {r.global_batch} / ({r.micro_batch} × "
                     f"{r.data_parallel}) = {r.accumulation}")
    return Document(command="batch", title=f"Global batch = {r.global_batch}",
                    tables=[Table("Batch arithmetic", ["quantity", "value"], rows)],
                    notes=notes, data=dump(r))


def checkpoint_doc(r: CheckpointResult | ResiliencePlan,
                   table: CheckpointResult | None = None) -> Document:
    """Simple form (δ and M given): waste by interval and the optima. Derived form (a
    ResiliencePlan): contents, write, failures, optimum, waste, goodput, time to train;
    `table` adds the waste at chosen intervals."""
    if isinstance(r, ResiliencePlan):
        return _resilience_doc(r, table)
    o = r.optimum
    rows = [[f"{x.interval_s / 60:g}", pct(x.overhead_fraction, 2), pct(x.lost_work_fraction, 2)]
            + ([pct(x.restart_fraction, 2)] if o.restart_s else []) + [pct(x.waste_fraction, 2)]
            for x in r.rows]
    cols = ["interval (min)", "checkpointing", "lost work"] + (["restarts"] if o.restart_s else []) \
        + ["wasted"]
    notes = [f"Checkpoint cost δ = {o.cost_s / 60:g} min, mean time between failures "
             f"M = {duration(o.mtbf_s)}; wasted = δ/τ + τ/(2M)"
             + (f" + R/M with restart R = {o.restart_s / 60:g} min" if o.restart_s else "")]
    return Document(command="checkpoint", title="Checkpoint interval and wasted time",
                    tables=[Table("Waste by interval", cols, rows), _optimum_table(o)],
                    notes=notes, data=dump(r))


def _optimum_table(o: IntervalOptimum) -> Table:
    return Table("Optimum interval", ["rule", "interval (min)", "wasted"],
                 [["Young √(2δM)", f"{o.young_interval_s / 60:.1f}", pct(o.young_waste_fraction, 2)],
                  ["Daly (2006, Eq. 37)", f"{o.daly_interval_s / 60:.1f}", pct(o.daly_waste_fraction, 2)]])

def _size(n_bytes: float) -> str:
    """Decimal bytes with the unit that keeps 1–999 before the point: 16 B, 10.0 kB, 5.68 TB."""
    for div, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n_bytes >= div:
            return f"{n_bytes / div:,.{2 if div >= 1e9 else 1}f} {unit}"
    return f"{n_bytes:g} B"


def _rate(bytes_per_s: float) -> str:
    for div, unit in ((1e12, "TB/s"), (1e9, "GB/s")):
        if bytes_per_s >= div:
            return f"{bytes_per_s / div:,.{1 if div > 1e9 else 0}f} {unit}"
    return f"{bytes_per_s / 1e6:,.0f} MB/s"


def _days(seconds: float) -> str:
    return f"{seconds / 86400:,.1f}" if seconds != float("inf") else "never"


def _contents_table(c: CheckpointContents) -> Table:
    # Small items carry their scope as the rule ("per rank"); show it with the size.
    rows = [[x.name, f"{_size(x.per_rank_bytes)} {x.rule}" if x.basis else x.rule,
             _size(x.total_bytes), _size(x.per_rank_bytes), f"{x.writers:,}"] for x in c.items]
    rows.append(["total", f"{c.bytes_per_param:g} B/param + small items", _size(c.total_bytes),
                 _size(c.busiest_rank_bytes) + " (rank 0)", f"≈{c.effective_writers:,.0f}"])
    return Table(f"Checkpoint contents (TP {c.tp} × PP {c.pp} × DP {c.dp}, "
                 f"ZeRO-{c.zero_stage}, {c.precision} {c.optimizer})",
                 ["item", "size", "total", "per rank", "ranks writing"], rows,
                 bars=[0.0 if x.basis else x.total_bytes for x in c.items] + [0.0])


def _write_table(c: CheckpointContents, w: CheckpointWrite) -> Table:
    link = (f"≈{w.writers:,.0f} writing GPUs × {_rate(w.link_bytes_per_s)} NIC = "
            f"{_rate(w.links_bytes_per_s)}")
    rows = [["checkpoint size", _size(w.size_bytes)],
            ["storage write bandwidth (aggregate)", _rate(w.storage_write_bytes_per_s)],
            ["writers' network links", link],
            ["write time", f"{duration(w.write_s)}, bound by "
             + ("the file system" if w.binds == "storage" else "the writers' NICs")]]
    if w.async_checkpoint:
        rows.append(["async: GPU → host copy (blocks)",
                     f"{_size(c.busiest_rank_bytes)} at {_rate(w.pcie_bytes_per_s)} PCIe = "
                     f"{ms(w.stall_s)} ms"])
    rows.append(["checkpoint cost δ (training stalls)",
                 f"{ms(w.blocking_s)} ms" if w.blocking_s < 1 else duration(w.blocking_s)])
    return Table("Checkpoint write", ["quantity", "value"], rows)


def _failure_source(f: FailureRate) -> str:
    """Where the job MTBF came from: a per-GPU or per-node MTBF, a count over days, or given."""
    if f.component_mtbf_s is not None:   # source "gpu" or "node"
        what = f"{f.gpus:,} GPUs" if f.source == "gpu" else f"{f.nodes:,} nodes"
        return f"per-{f.source.upper() if f.source == 'gpu' else 'node'} MTBF " \
               f"{duration(f.component_mtbf_s)} ÷ {what}"
    if f.interruptions is not None and f.period_s is not None:   # source "interruptions"
        return f"{f.interruptions:g} interruptions in {_days(f.period_s)} days"
    return "given"


def _failures_table(f: FailureRate, rs: RestartCost, c: CheckpointContents) -> Table:
    src = _failure_source(f)
    default = "" if rs.overridden else " (default)"
    rows = [["job MTBF M", f"{duration(f.job_mtbf_s)} ({src}); "
             f"{f.failures_per_day:.1f} failures/day"]]
    if not rs.overridden:
        rows += [["detect and diagnose", f"{duration(rs.detect_s)}{default}"],
                 ["reschedule and relaunch", f"{duration(rs.reschedule_s)}{default}"],
                 ["reload checkpoint", f"{duration(rs.reload_s)} ({_size(c.total_bytes)} read)"],
                 ["warm-up", f"{duration(rs.warmup_s)}{default}"]]
    rows.append(["restart cost R", duration(rs.total_s) + (" (given)" if rs.overridden else "")])
    return Table("Failures and restart", ["quantity", "value"], rows)


def _waste_table(o: IntervalOptimum) -> Table:
    return Table(f"Waste at τ = {o.interval_s / 60:.1f} min "
                 f"({'async-write floor' if o.floored else 'Daly'})",
                 ["term", "formula", "fraction"],
                 [["checkpointing", "δ/τ", pct(o.overhead_fraction, 2)],
                  ["lost work", "τ/(2M)", pct(o.lost_work_fraction, 2)],
                  ["restarts", "R/M", pct(o.restart_fraction, 2)],
                  ["wasted", "sum", pct(o.waste_fraction, 2)],
                  ["goodput", "1 − wasted", pct(o.goodput_fraction, 2)]])


def _straggler_runs(s: Straggler | None) -> list[tuple[str, float, float]]:
    """(run, seconds, GPU-hours) with the straggler kept and after evicting its node; none
    without a straggler or a run time to slow down."""
    if s is None:
        return []
    kept_s, kept_h = s.run_with_straggler_s, s.gpu_hours_with_straggler
    evicted_s, evicted_h = s.run_after_eviction_s, s.gpu_hours_after_eviction
    if kept_s is None or kept_h is None or evicted_s is None or evicted_h is None:
        return []
    return [(f"with one GPU ×{s.slowdown:g} (straggler kept)", kept_s, kept_h),
            (f"after evicting its node (−{s.gpus_lost_on_eviction} GPUs)", evicted_s, evicted_h)]


def _training_table(t: TrainingTime, s: Straggler | None) -> Table:
    """Days and GPU-hours to train, with failures, and with a straggler kept or evicted."""
    price = t.price_per_gpu_hour is not None
    runs = [("without failures", t.ideal_s, t.ideal_gpu_hours),
            (f"with failures (goodput {pct(t.goodput_fraction)})", t.with_failures_s, t.gpu_hours)]
    runs += _straggler_runs(s)
    rows = [[label, _days(secs), f"{hours / 1e6:,.2f}"]
            + ([f"{t.cost_of(hours):,.0f}"] if price else []) for label, secs, hours in runs]
    return Table(f"Time to train {count(t.tokens)} tokens at {count(t.tokens_per_s)} tokens/s",
                 ["run", "days", "M GPU-hours"] + (["cost"] if price else []), rows)


def _straggler_table(s: Straggler) -> Table:
    return Table(f"Straggler: one GPU ×{s.slowdown:g}", ["quantity", "value"],
                 [["throughput with the straggler", pct(s.throughput_fraction_with_straggler)],
                  [f"throughput after evicting its node ({s.gpus_lost_on_eviction} GPUs)",
                   pct(s.throughput_fraction_after_eviction, 2)],
                  ["evict when slowdown exceeds", f"×{s.break_even_slowdown:.4f}"],
                  ["verdict", "evict" if s.evict else "keep"]])


def _resilience_notes(p: ResiliencePlan) -> list[str]:
    """How each figure of the plan is computed, and the defaults it used."""
    c, w, rs, o = p.contents, p.write, p.restart, p.optimum
    notes = [f"Checkpoint = model states without gradients, {c.bytes_per_param:g} B/param; the "
             "small items are estimates (JSON: items[].basis). Narayanan et al. (SC21) wrote "
             "13.8 TB for 1.008T parameters; 14 B/param predicts 14.1 TB (+2%).",
             "Write time = size ÷ min(storage write bandwidth, writers × NIC per GPU); "
             "a replicated state is written by one data-parallel replica only.",
             "Waste = δ/τ + τ/(2M) + R/M (first order; Young 1974); goodput = 1 − waste. "
             "Young's interval minimises this sum exactly; Daly's (2006, Eq. 37, ≈ 2δ/3 "
             "shorter) minimises his higher-order model and is the one recommended."]
    if not rs.overridden:
        notes.append(f"Restart defaults: detect {DEFAULT_DETECT_S / 60:g} min, reschedule "
                     f"{DEFAULT_RESCHEDULE_S / 60:g} min, warm-up {DEFAULT_WARMUP_S / 60:g} min "
                     f"({DEFAULT_RESTART_S / 60:g} min "
                     "plus reload, as MegaScale reports: diagnosis < 10 min, training back within "
                     "15 min); give --restart-min to use a measured R.")
    if w.async_checkpoint:
        notes.append(f"Asynchronous: only the GPU → host copy blocks; the background write "
                     f"({duration(w.write_s)}) must end before the next checkpoint"
                     + (f", so it floors the interval at {duration(o.interval_s)} (Daly's "
                        f"{duration(o.daly_interval_s)} is shorter)" if o.floored else "")
                     + f". Host staging: {_size(p.host_bytes_per_node)} per node of "
                     f"{_size(p.host_memory_bytes)}."
                     + " A failure during the write falls back to the previous checkpoint, "
                       "which the τ/(2M) term does not count.")
    if not o.first_order_valid:
        notes.append("δ, τ or R exceed 30% of M: the first-order waste understates the loss "
                     "(Daly 2006 Sec. 3); treat the goodput as optimistic.")
    if p.training is not None:
        notes.append("tokens/s is an input (from a performance model or a measurement); "
                     "time = tokens ÷ tokens/s ÷ goodput.")
    if p.straggler is not None:
        notes.append("A synchronous step runs at its slowest rank's pace. After eviction DP "
                     "shrinks by the replicas on that node and throughput is assumed to scale "
                     "linearly; the evicted run includes one restart. A hot spare node would "
                     "restore full speed.")
    return notes


def _resilience_verdict(o: IntervalOptimum, t: TrainingTime | None) -> str:
    if o.goodput_fraction <= 0:
        return (f"Failures waste {pct(o.waste_fraction)} of the time: the job cannot make "
                "progress; checkpoint faster, restart faster or fail less")
    verdict = f"Checkpoint every {o.interval_s / 60:.1f} min; goodput {pct(o.goodput_fraction)}"
    if t is not None:
        verdict += (f"; {_days(t.with_failures_s)} days to train {count(t.tokens)} tokens "
                    f"({_days(t.ideal_s)} without failures)")
    return verdict


def _resilience_doc(p: ResiliencePlan, table: CheckpointResult | None) -> Document:
    c, o, t, s = p.contents, p.optimum, p.training, p.straggler
    tables = [_contents_table(c), _write_table(c, p.write),
              _failures_table(p.failures, p.restart, c), _optimum_table(o), _waste_table(o)]
    if table is not None:
        tables.append(checkpoint_doc(table).tables[0])
    if t is not None:
        tables.append(_training_table(t, s))
    if s is not None:
        tables.append(_straggler_table(s))
    data = dump(p)
    if table is not None:
        data["rows"] = dump(table)["rows"]
    name = p.model or count(c.params) + " parameters"
    return Document(command="checkpoint",
                    title=f"Checkpoint and failure plan: {name} on {p.gpus:,} GPUs ({p.hardware})",
                    tables=tables, notes=_resilience_notes(p), verdict=_resilience_verdict(o, t),
                    ok=o.goodput_fraction > 0, data=data, mode="plan")


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
                    notes=[note], data=dump(r))


def layout_doc(r: LayoutResult) -> Document:
    lay = r.layout
    rows = [[x.name, x.status, x.measured, x.limit] for x in r.rules]
    groups = [[x.axis.upper(), str(x.size), str(x.count), x.link,
               str(x.max_nodes_spanned), " ".join(map(str, x.example[:16]))
               + (" …" if len(x.example) > 16 else "")] for x in r.groups]
    tables = [Table("Rules", ["rule", "status", "measured", "limit"], rows),
              Table("Rank groups (Megatron order: TP fastest, then CP, DP, PP)",
                    ["axis", "size", "groups", "link", "nodes spanned", "first group"], groups)]
    notes = []
    for x in (x for x in r.groups if x.axis in r.members):
        listed = r.members[x.axis]
        shown = f" (first {len(listed)} of {x.count:,} groups)" if len(listed) < x.count else ""
        # the count sits in the header, not the title: a title wider than its narrow table
        # wraps one word per line, and "TP group" + "ranks" is always wider than "TP groups"
        tables.append(Table(f"{x.axis.upper()} groups", [f"{x.axis.upper()} group", f"ranks{shown}"],
                            [[str(i), " ".join(map(str, m))] for i, m in enumerate(listed)]))
        if len(listed[0]) < x.size:
            notes.append(f"{x.axis.upper()} groups: each listed with its first {len(listed[0]):,} "
                         f"of {x.size:,} ranks")
    verdict = (f"TP={lay.tp} PP={lay.pp} CP={lay.cp} DP={lay.dp}: valid, {r.replica_gpus} GPUs "
               f"per model replica" if r.ok else
               "Invalid layout: " + "; ".join(f"{x.name} ({x.message})" for x in r.rules
                                              if x.status == "fail"))
    data = dump(r)
    data["ok"] = r.ok
    return Document(command="layout", title=f"Layout of {r.gpus} GPUs ({r.gpus_per_node} per node)",
                    tables=tables, notes=notes, verdict=verdict, ok=r.ok, data=data)
