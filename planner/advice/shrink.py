"""Elastic shrink: "we lost two nodes, what now". The running split on fewer replicas, the
search's layouts at the plan's batch and at the nearby batch the new DP degrees divide, and the
fastest option within a batch tolerance beside the fastest that keeps the batch exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from planner.io import validate as v
from planner.search.fit import FitResult, fit
from planner.evaluation.train import problem
from planner.search.fast import SearchSpace, search
from planner.specs.budget import MemoryBudget
from planner.specs.finetune import Tuning
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import Layout
from planner.specs.model import ModelSpec



@dataclass(frozen=True, kw_only=True)
class ShrinkOption:
    """A layout for the smaller cluster and what resuming into it takes."""

    layout: Layout
    fits: bool
    step_time_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    accumulation: Optional[float] = None
    resume: str  # how the checkpoint gets there
    global_batch: Optional[int] = None  # the batch this option runs (may differ from the plan's)

    def batch(self, plan_batch: int) -> int:
        """The global batch this option runs: its own, else the plan's."""
        return plan_batch if self.global_batch is None else self.global_batch

    @property
    def step_s(self) -> float:
        """The step time, infinite when the option has none (it sorts last)."""
        return math.inf if self.step_time_s is None else self.step_time_s


@dataclass(frozen=True, kw_only=True)
class ShrinkResult:
    from_gpus: int
    to_gpus: int
    plan_layout: Layout
    global_batch: int
    keep_split: list[ShrinkOption]   # the running TP×PP×CP split on the smaller cluster
    fit: FitResult
    options: list[ShrinkOption]      # the best layouts for all of the smaller cluster
    batch_tolerance: float = 0.01    # the batch change a recommendation may make (fraction)
    recommended: Optional[ShrinkOption] = None   # fastest within the tolerance
    exact_batch: Optional[ShrinkOption] = None   # fastest that keeps the batch exactly

    def batch_change(self, option: ShrinkOption) -> float:
        """The option's global batch against the plan's, as a fraction (+ larger)."""
        return (option.batch(self.global_batch) - self.global_batch) / self.global_batch

    @property
    def exact_batch_slowdown(self) -> float | None:
        """Step time keeping the batch exactly ÷ the recommendation's, − 1 (None: not both)."""
        if self.exact_batch is None or self.recommended is None:
            return None
        return self.exact_batch.step_s / self.recommended.step_s - 1


def resume_kind(old: Layout, new: Layout) -> str:
    """ZeRO/FSDP shards re-partition over a new data-parallel size on load (DeepSpeed universal
    checkpoints, torch.distributed.checkpoint); a changed TP, PP, CP or EP split needs the
    checkpoint converted (re-slicing weight matrices and layer ranges)."""
    if (old.tp, old.pp, old.cp, old.ep) == (new.tp, new.pp, new.cp, new.ep):
        same_dp = old.dp == new.dp and old.zero == new.zero
        return "resume as is" if same_dp else "reshard on load (data-parallel / ZeRO shards only)"
    changed = [n for n, a, b in (("TP", old.tp, new.tp), ("PP", old.pp, new.pp),
                                 ("CP", old.cp, new.cp), ("EP", old.ep, new.ep)) if a != b]
    return f"convert the checkpoint ({', '.join(changed)} changed)"


def shrink(model: ModelSpec, hardware: HardwareProfile, plan_layout: Layout, from_gpus: int,
           to_gpus: int, *, seq_len: int, global_batch: int, budget: MemoryBudget | None = None,
           top: int = 10, batch_tolerance: float = 0.01) -> ShrinkResult:
    """After losing GPUs: the running TP×PP split (a reshard, not a conversion) and the search's
    layouts, at the plan's batch and at the nearby batch the new DP degrees divide (within
    `batch_tolerance`); recommends the fastest within the tolerance, beside the fastest that
    keeps the batch exactly."""
    to_gpus = v.positive_int("to_gpus", to_gpus)
    tol = v.positive("batch_tolerance", batch_tolerance, upper=0.5) if batch_tolerance else 0.0
    # No "what would fit" search for the smaller cluster (~30 feasibility searches, ~7 s for
    # 70B on 240 GPUs): the shrink's own options answer that question.
    result = fit(model, hardware, to_gpus, seq_len=seq_len, global_batch=global_batch,
                 precision=plan_layout.precision, optimizer=plan_layout.optimizer, budget=budget,
                 top=top, suggest=False)
    keep = _keep_split(model, hardware, plan_layout, to_gpus, seq_len=seq_len,
                       global_batch=global_batch, budget=budget)
    options = _options(result, plan_layout, global_batch, global_batch)
    from planner.engine.batch import dp_friendly_batch
    near = dp_friendly_batch(global_batch, to_gpus, tol) if tol else global_batch
    if near != global_batch:
        near_fit = fit(model, hardware, to_gpus, seq_len=seq_len, global_batch=near,
                       precision=plan_layout.precision, optimizer=plan_layout.optimizer,
                       budget=budget, top=3, suggest=False, explain=False)
        options += _options(near_fit, plan_layout, global_batch, near)
    if not result.layouts:  # no layout of all the GPUs keeps the batch: fewer GPUs may
        options += _exact_on_fewer(model, hardware, plan_layout, to_gpus, seq_len=seq_len,
                                   global_batch=global_batch, budget=budget)
    options.sort(key=lambda o: o.step_s)
    every = keep + options
    within = [o for o in every if abs(o.batch(global_batch) - global_batch) <= tol * global_batch]
    exact = [o for o in every if o.global_batch == global_batch]
    return ShrinkResult(from_gpus=from_gpus, to_gpus=to_gpus, plan_layout=plan_layout,
                        global_batch=global_batch, keep_split=keep, fit=result,
                        options=options[:top], batch_tolerance=tol,
                        recommended=min(within, key=lambda o: o.step_s, default=None),
                        exact_batch=min(exact, key=lambda o: o.step_s, default=None))


def _exact_on_fewer(model: ModelSpec, hardware: HardwareProfile, old: Layout, to_gpus: int, *,
                    seq_len: int, global_batch: int, budget: MemoryBudget | None,
                    tries: int = 2) -> list[ShrinkOption]:
    """The plan's batch exactly on the most whole nodes of the smaller cluster that can run it,
    the rest idle: B = b × a × DP, so DP divides B and TP × PP × CP takes the rest of the count,
    m / gcd(m, B). Counts whose rest exceeds a node (the NVLink domain that bounds TP) are
    skipped; of the others, the largest `tries` down to half the cluster are searched, and the
    first with a fitting layout gives its best three."""
    node = hardware.scale_up.gpus_per_node
    counts = [m for m in range(to_gpus - to_gpus % node, to_gpus // 2 - 1, -node)
              if 0 < m < to_gpus and m // math.gcd(m, global_batch) <= node][:tries]
    for m in counts:
        r = fit(model, hardware, m, seq_len=seq_len, global_batch=global_batch,
                precision=old.precision, optimizer=old.optimizer, budget=budget, top=3,
                suggest=False, explain=False)
        if r.layouts:
            note = f"; {to_gpus - m} GPUs idle"
            return [replace(o, resume=o.resume + note)
                    for o in _options(r, old, global_batch, global_batch)]
    return []


def _options(result: FitResult, old: Layout, plan_batch: int, batch: int) -> list[ShrinkOption]:
    note = "" if batch == plan_batch else \
        f"; global batch {plan_batch} → {batch} ({(batch - plan_batch) / plan_batch:+.1%})"
    return [ShrinkOption(layout=x.layout, fits=True, step_time_s=x.step_time_s,
                         tokens_per_s=x.tokens_per_s, accumulation=x.accumulation,
                         resume=resume_kind(old, x.layout) + note, global_batch=batch)
            for x in result.layouts]


def _keep_split(model: ModelSpec, hardware: HardwareProfile, old: Layout, to_gpus: int, *,
                seq_len: int, global_batch: int, budget: MemoryBudget | None) -> list[ShrinkOption]:
    """The running split on fewer replicas, two ways: (1) the largest DP that still divides the
    global batch (some GPUs may idle), (2) every replica that fits, with the global batch
    rounded to a multiple of DP (a small change of batch the team must accept)."""
    split = old.tp * old.pp * old.cp
    dp_max = to_gpus // split
    out: list[ShrinkOption] = []

    def best(dp: int, batch: int, note: str) -> Optional[ShrinkOption]:
        p = problem(model, hardware, dp * split, seq_len=seq_len, global_batch=batch,
                    precision=old.precision, optimizer=old.optimizer, budget=budget)
        res = search(p, SearchSpace(tp=old.tp, pp=old.pp, cp=old.cp, ep=old.ep, zero=old.zero,
                                    recompute=old.recompute, schedule=old.schedule,
                                    chunks=old.chunks))
        if not len(res.order):
            return None
        i = int(res.order[0])
        lay = res.candidates.layout(i, old.precision, old.optimizer, Tuning.of(old))
        return ShrinkOption(layout=lay, fits=True, step_time_s=float(res.results.time.step[i]),
                            tokens_per_s=float(res.results.throughput.tokens_per_s[i]),
                            accumulation=float(res.results.micro_batches[i]),
                            resume=f"{resume_kind(old, lay)}; {note}", global_batch=batch)

    for dp in range(dp_max, 0, -1):
        if global_batch % dp == 0:
            o = best(dp, global_batch, f"global batch kept at {global_batch}"
                     + (f"; {to_gpus - dp * split} GPUs idle" if dp * split < to_gpus else ""))
            if o:
                out.append(o)
                break
    if dp_max >= 1 and global_batch % dp_max:
        batch = max(dp_max, round(global_batch / dp_max) * dp_max)
        o = best(dp_max, batch, f"global batch {global_batch} → {batch} "
                 f"({(batch - global_batch) / global_batch:+.1%})")
        if o:
            out.append(o)
    return out
