"""On a failing `dtplan check`: the cheapest change that passes the estimate's rules, tried in
order of what it costs the team:

1. tune: the same TP/PP/CP/EP/ZeRO split with another micro-batch and/or recompute — a config
   edit, expressible as check's own ``--micro-batch`` / ``--recompute`` (rerun to confirm); the
   figures are the estimate of exactly that layout;
2. relayout: the search's best layout on the same GPUs (``api.fit``: converting the checkpoint);
3. more nodes: the fewest added nodes (up to ``MAX_EXTRA_NODES``, then doubling like fit's
   "what would fit") with a layout that fits (``search.any_fits``), at the same global batch.

Only the estimate's rules (rules.RULES: layout and memory) are searched; a failure of an engine
assertion or a threshold is fixed in the file, as that rule's message says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from planner.evaluation.estimate import Estimate
from planner.evaluation.rules import RULE_NAMES
from planner.specs.job import Job
from planner.specs.knobs import Recompute
from planner.specs.records import dump
from planner.specs.verdict import Fix, GateRule

MAX_EXTRA_NODES = 8          # added one node at a time, then doubling
MAX_DOUBLINGS = 6            # up to 64× the GPUs, as far as fit's "what would fit" looks
# cheapest first (less recomputation)
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")


def cheapest_fix(job: Job, rules: list[GateRule]) -> Optional[Fix]:
    """The first rung that passes, or a Fix of kind "none"; None when no estimate rule failed."""
    failed = {r.name for r in rules if r.status == "fail"} & set(RULE_NAMES)
    if not failed:
        return None
    return (_tune(job) or _relayout(job) or _more_nodes(job)
            or Fix(kind="none", summary="nothing tried passes: no micro-batch or recompute, no "
                   f"layout on {job.gpus} GPUs and no count up to {_largest(job)} GPUs fits "
                   "this model, batch and sequence"))


def _passes(est: Estimate) -> bool:
    return all(r.status != "fail" for r in est.rules)


def _tune(job: Job) -> Optional[Fix]:
    """The fastest micro-batch × recompute of the same split that passes every rule."""
    from planner.evaluation.estimate import estimate

    lay = job.layout
    per_dp = job.global_batch // lay.dp if job.global_batch % lay.dp == 0 else 0
    micro = [m for m in range(1, min(per_dp, 64) + 1) if per_dp % m == 0] or [lay.micro_batch]
    best = None
    for m in micro:
        for rc in RECOMPUTES:
            cand = replace(lay, micro_batch=m, recompute=rc, recompute_layers=None)
            if (m, rc) == (lay.micro_batch, lay.recompute) and lay.recompute_layers is None:
                continue   # the failing layout itself
            est = estimate(job.model, job.hardware, job.gpus, cand, seq_len=job.seq_len,
                           global_batch=job.global_batch, budget=job.budget,
                           framework=job.framework)
            if _passes(est) and (best is None or est.step_time_s < best[1].step_time_s):
                best = (cand, est)
    if best is None:
        return None
    cand, est = best
    # a new micro-batch keeps the global batch (more accumulation): say it, for files that
    # derive the batch from the micro-batch (a plan without one, DeepSpeed "auto")
    opts = ([f"--micro-batch {cand.micro_batch}", f"--global-batch {job.global_batch}"]
            if cand.micro_batch != lay.micro_batch else [])
    if cand.recompute != lay.recompute or lay.recompute_layers is not None:
        opts.append(f"--recompute {cand.recompute}")
    said = " and ".join(o.replace("--recompute ", "recompute ") for o in opts
                        if not o.startswith("--global-batch"))
    return Fix(kind="tune", summary=f"fits with {said}: the same split, {est.step_time_s:.2f} s "
               f"per step, peak {est.peak_memory_bytes / 1e9:.1f} GB of "
               f"{est.usable_memory_bytes / 1e9:.1f} GB usable (rerun check with "
               f"{' '.join(opts)})", options=opts, layout=dump(cand), gpus=job.gpus,
               step_time_s=est.step_time_s, peak_memory_bytes=est.peak_memory_bytes)


def _relayout(job: Job) -> Optional[Fix]:
    """The search's best layout on the same GPU count (a checkpoint conversion away)."""
    from planner.search.fit import short_label, fit

    lay = job.layout
    res = fit(job.model, job.hardware, job.gpus, seq_len=job.seq_len,
              global_batch=job.global_batch, precision=lay.precision, optimizer=lay.optimizer,
              budget=job.budget, top=1, suggest=False, framework=job.framework)
    if not res.layouts:
        return None
    best = res.layouts[0]
    return Fix(kind="relayout", summary=f"fits as {short_label(best.layout)} on the same {job.gpus} "
               f"GPUs: {best.step_time_s:.2f} s per step, peak "
               f"{best.peak_memory_bytes / 1e9:.1f} GB (another split: convert the checkpoint; "
               "`dtplan fit` lists the alternatives)", layout=dump(best.layout),
               gpus=job.gpus, step_time_s=best.step_time_s,
               peak_memory_bytes=best.peak_memory_bytes)


def _counts(job: Job) -> list[tuple[int, int]]:
    """(extra nodes, GPU count) to try: one node at a time, then doubling; none above
    validate.MAX_GPUS, the most any command allows (a plan at 10^7 GPUs gets its verdict and no
    count it could not pass back to --gpus)."""
    from planner.io.validate import MAX_GPUS
    node = job.hardware.scale_up.gpus_per_node
    out = [(k, job.gpus + k * node) for k in range(1, MAX_EXTRA_NODES + 1)]
    n = out[-1][1]
    for _ in range(MAX_DOUBLINGS):
        n *= 2
        out.append((-(-(n - job.gpus) // node), n))
    return [(k, n) for k, n in out if n <= MAX_GPUS]


def _largest(job: Job) -> int:
    return max((n for _, n in _counts(job)), default=job.gpus)


def _more_nodes(job: Job) -> Optional[Fix]:
    """The fewest added nodes with some layout that fits (search.any_fits), same batch; the
    counts tried price at most blocks.MAX_PRICED layouts together (a count past it: not tried)."""
    from planner.evaluation.train import problem
    from planner.search.blocks import MAX_PRICED, Budget
    from planner.search.would_fit import any_fits

    lay, left = job.layout, Budget(MAX_PRICED)
    for extra, n in _counts(job):
        p = problem(job.model, job.hardware, n, seq_len=job.seq_len,
                    global_batch=job.global_batch, precision=lay.precision,
                    optimizer=lay.optimizer, budget=job.budget, framework=job.framework)
        if any_fits(p, budget=left):
            return Fix(kind="more-nodes", summary=f"needs {extra} more node"
                       f"{'s' if extra > 1 else ''} ({n} GPUs): the smallest count tried with a "
                       "layout that fits (`dtplan fit --gpus "
                       f"{n}` ranks them)", options=[f"--gpus {n}"], gpus=n, extra_nodes=extra)
    return None

