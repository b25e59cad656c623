"""What the layout search answers, written as plain loops: a brute-force search for small
questions that the fast one (planner.search.fast) must equal row for row
(tests/test_search_reference.py).

The question is a Problem (a model, a hardware profile, a GPU count, a sequence length, a
global batch, a precision recipe, an optimizer, a framework) and the knobs the user fixed (a
SearchSpace). The answer:

1. Every layout. A split is TP × CP × PP × DP = GPUs (EP, on a mixture-of-experts model, folded
   over TP × CP × DP). For each split every knob that can change what the layout costs: ZeRO
   stage and hybrid-shard group, offload (when asked), micro-batch, pipeline schedule, its chunks
   and stage split, sequence parallel, expert TP, recompute. Knobs that cannot change the cost
   (sequence parallel at TP 1, ZeRO without a data-parallel group, interleaving without PP, EP
   on a dense model) and what the framework does not run are not crossed; planner.search.space
   says why, bound by bound.
2. Each layout priced by the ordinary evaluation (planner.evaluation.evaluate: memory per
   stage, step time, throughput, rules) and checked against the rules in their order; a layout
   that fails one is counted against the first it fails, and the layout that fits best of those
   too big for memory is kept as the closest miss.
3. Partial recompute. Where a layout does not fit without recompute but fits with full
   recompute of every layer, full recompute of only k layers per stage may fit too, faster:
   the smallest such k is one more layout (counted apart, as `solved`).
4. The exact Pareto front of what fits over step time × peak memory × GPUs (all rows of one
   search share their GPU count): a layout stays unless another is no slower and no fuller
   and better in one (of layouts equal in both, the first stands).
5. The front ranked: first the layouts that leave the budget's headroom (MemoryBudget.
   required_headroom), then those short of it; each group by the objective (fit.OBJECTIVES).
   For time and cost, where the group's fastest layout has an error band, it stays first and
   the rest fall in buckets of (1 + band) from it, more headroom first within a bucket; ties
   go to more headroom, then the simpler layout (smaller TP, PP, ZeRO, less recompute, larger
   micro-batch), then the enumeration order.

Bounded: a space of more than MAX_LAYOUTS layouts is refused (the fast search is for those).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

from planner.engine.divisors import divisors
from planner.engine.memory import PAGED_STATES
from planner.engine.schedules import dualpipe_choices
from planner.engine.stages import MAX_STAGE_DEFICIT, stage_deficit, stage_layers, uneven_splits
from planner.evaluation.candidates import RECOMPUTE_CODES, Candidates, Problem
from planner.evaluation.error_band import ranking_band
from planner.evaluation.evaluate import evaluate
from planner.evaluation.rules import RULE_NAMES
from planner.search.space import CP_MIN_CHUNK_TOKENS, MAX_MICRO_BATCH, SearchSpace
from planner.specs.knobs import Layout, Recompute

MAX_LAYOUTS = 50_000  # layouts (recompute variants included) this search prices at most
FITS = "fits-in-memory"


@dataclass(frozen=True)
class Priced:
    """One layout and the figures the search ranks it by."""

    layout: Layout
    step_time: float          # seconds per optimizer step
    peak: float               # bytes on the fullest GPU
    headroom: float           # usable bytes left (negative: over)
    tokens_per_step: float
    first_failure: str | None  # the first rule (RULE_NAMES) it fails, None when valid


@dataclass
class ReferenceResult:
    """The ranked layouts and the counts over the whole space."""

    ranked: list[Priced]
    enumerated: int = 0   # layouts in the space (partial recompute not included)
    valid: int = 0        # of them, passing every rule
    solved: int = 0       # partial-recompute layouts that fit
    rejected: dict[str, int] = field(default_factory=dict)   # rule → layouts failing it first
    examples: dict[str, Layout] = field(default_factory=dict)  # rule → its first (closest) layout


def splits(p: Problem, space: SearchSpace) -> Iterator[tuple[int, int, int, int, int]]:
    """(TP, CP, PP, DP, EP) with TP·CP·PP·DP = GPUs, ascending TP, then CP, PP and EP. TP up to
    twice the NVLink domain; CP where every one of its 2·CP sequence chunks holds a
    flash-attention tile; PP up to the layer count, and only where the framework runs a pipeline
    schedule; EP dividing the experts and TP·CP·DP on an MoE model where the framework has EP."""
    fw, gpus = p.fw.time, p.gpus
    domain = p.hardware.scale_up.gpus_per_domain
    for tp in divisors(gpus):
        if (space.tp and tp != space.tp) or (not space.tp and tp > 2 * domain):
            continue
        for cp in divisors(gpus // tp):
            if space.cp and cp != space.cp:
                continue
            if not space.cp and cp > 1 and not (
                    2 * cp * CP_MIN_CHUNK_TOKENS <= p.seq_len and fw.context_parallel):
                continue
            for pp in divisors(gpus // (tp * cp)):
                if space.pp and pp != space.pp:
                    continue
                if not space.pp and (pp > p.model.layers or (pp > 1 and not fw.pipeline_schedules)):
                    continue
                dp = gpus // (tp * cp * pp)
                for ep in _expert_degrees(p, space, tp * dp * cp):
                    yield tp, cp, pp, dp, ep


def _expert_degrees(p: Problem, space: SearchSpace, folded: int) -> list[int]:
    """EP dividing the experts and TP·CP·DP (`folded`: the GPUs of a stage EP folds over)."""
    if space.ep or not p.model.is_moe:
        return [space.ep or 1]
    return [e for e in divisors(p.model.experts)
            if folded % e == 0 and (e == 1 or p.fw.time.expert_parallel)]


def state_choices(space: SearchSpace, dp_cp: int, hybrid: bool = True, paged: bool = False,
                  stages: tuple[int, ...] = (0, 1, 2, 3)
                  ) -> Iterator[tuple[int, int | None, str, str]]:
    """(ZeRO stage, shard group, optimizer offload, parameter offload): ZeRO 0-3 where there is a
    data-parallel group; under ZeRO ≥ 1 every hybrid-shard group strictly inside it; offload of
    the optimizer (ZeRO ≥ 1) and of the parameters too (ZeRO-3) when asked. Without a
    data-parallel group, when asked, ZeRO-2 with the optimizer offloaded (ZeRO-Offload) and
    ZeRO-3 with the parameters too (ZeRO-Infinity). A `paged` optimizer pages its states to the
    host at ZeRO-0 too. Only the framework's `stages` (unless the space fixes one)."""
    alone = space.zero is None and dp_cp == 1
    zeros = [space.zero] if space.zero is not None else [
        z for z in ([0, 1, 2, 3] if dp_cp > 1 else [0] + ([2, 3] if space.allow_offload else []))
        if z in stages]   # the framework's zero_stages
    for zero in zeros:
        groups = [None] + ([g for g in divisors(dp_cp) if 1 < g < dp_cp]
                           if zero >= 1 and hybrid else [])   # the framework's hybrid_sharding
        offloads = [("none", "none")]
        if space.allow_offload and (zero >= 1 or paged):
            offloads.append(("cpu", "none"))
        if space.allow_offload and zero == 3:
            offloads.append(("cpu", "cpu"))
        if alone and zero:  # one replica: ZeRO only to offload (ZeRO-Offload, ZeRO-Infinity)
            offloads = [("cpu", "none")] if zero == 2 else [("cpu", "cpu")]
        for group in groups:
            for opt, par in offloads:
                yield zero, group, opt, par


def micro_batch_choices(p: Problem, space: SearchSpace, dp: int) -> list[int]:
    """Every divisor of the per-replica batch B / DP (1 where DP does not divide B: the
    batch-divisible rule rejects it), up to a Layout's bound."""
    if space.micro_batch:
        return [space.micro_batch]
    per_replica = p.global_batch // dp if p.global_batch % dp == 0 else 1
    return [d for d in divisors(max(per_replica, 1)) if d <= MAX_MICRO_BATCH]


def schedule_choices(p: Problem, space: SearchSpace, pp: int) -> list[tuple[str, int]]:
    """(schedule, chunks): 1F1B; under PP zero-bubble ZB-H1 and interleaved 1F1B with 2 to
    max_chunks chunks that split the layers (evenly, a layer short at the ends, or with stated
    first/last stages; beyond, chunks of whole equal layer counts), each where the framework
    runs it. GPipe only when asked for: 1F1B has its bubble with less memory."""
    runs = p.fw.time.pipeline_schedules
    out = [("1f1b", 1)]
    if pp > 1 and "zb-h1" in runs:
        out.append(("zb-h1", 1))
    out += [(s, 1) for s in dualpipe_choices(p.model.layers, pp, runs)]
    if pp > 1 and "interleaved" in runs:
        # beyond max_chunks, each v whose chunks hold whole, equal numbers of layers
        reach = (p.model.layers + MAX_STAGE_DEFICIT) // pp   # the end chunks may hold none
        out += [("interleaved", v) for v in range(2, reach + 1)
                if (v <= space.max_chunks
                    and (stage_deficit(p.model.layers, pp, v) <= MAX_STAGE_DEFICIT
                         or uneven_splits(p.model.layers, pp, v)))
                or (v > space.max_chunks and p.model.layers % (pp * v) == 0)]
    if space.schedule == "interleaved":
        return [("interleaved", space.chunks)] if space.chunks else \
            [(s, v) for s, v in out if v > 1]
    return [(space.schedule, 1)] if space.schedule else out


def stage_choices(p: Problem, pp: int, chunks: int) -> list[tuple[int | None, int | None]]:
    """(first, last) stage layers: None (dtplan's split) where v = 1 or the layers come at most
    MAX_STAGE_DEFICIT short, then each stated split engine.stages.uneven_splits offers (the
    default where nothing else is)."""
    layers = p.model.layers
    out: list[tuple[int | None, int | None]] = []
    if chunks == 1 or stage_deficit(layers, pp, chunks) <= MAX_STAGE_DEFICIT:
        out.append((None, None))
    out += [(f, l_) for f, l_ in uneven_splits(layers, pp, chunks)]
    return out or [(None, None)]


def expert_tp_choices(p: Problem, tp: int, ep: int) -> list[int | None]:
    """Expert TP: TP (None), and 1 on a mixture of experts under TP; where the framework has
    no expert TP, what it runs there: TP without EP, 1 under EP."""
    if not (p.model.is_moe and tp > 1):
        return [None]
    if not p.fw.time.expert_tensor_parallel:
        return [1] if ep > 1 else [None]
    return [None, 1]


# A SearchSpace's recompute name as the Layout's mode (a KeyError for another name, as the fast
# search's RECOMPUTE_CODES gives).
_RECOMPUTE: dict[str, Recompute] = {"none": "none", "selective": "selective", "full": "full"}


def recompute_choices(p: Problem, space: SearchSpace) -> list[Recompute]:
    """None, selective (where the framework has a selective mode) and full, in that order."""
    if space.recompute:
        return [_RECOMPUTE[space.recompute]]
    return [m for m in _RECOMPUTE.values() if m != "selective" or p.fw.time.has_selective]


def sp_choices(p: Problem, tp: int) -> list[bool]:
    """Sequence parallel shards TP's activations: off at TP 1; on alone for an MoE model
    under TP where the framework runs no other (moe_needs_sequence_parallel)."""
    if tp == 1:
        return [False]
    return [True] if p.model.is_moe and p.fw.time.moe_needs_sequence_parallel else [False, True]


def base_layouts(p: Problem, space: SearchSpace) -> Iterator[dict]:
    """Every layout's knobs but its recompute, in the fast search's order."""
    for tp, cp, pp, dp, ep in splits(p, space):
        for zero, group, opt, par in state_choices(space, dp * cp, p.fw.time.hybrid_sharding,
                                                   p.optimizer in PAGED_STATES,
                                                   p.fw.time.zero_stages):
            for mb in micro_batch_choices(p, space, dp):
                for schedule, chunks in schedule_choices(p, space, pp):
                    for first, last in stage_choices(p, pp, chunks):
                        for sp in sp_choices(p, tp):
                            for etp in expert_tp_choices(p, tp, ep):
                                yield dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp,
                                           zero=zero, shard_group=group,
                                           offload_optimizer=opt, offload_params=par,
                                           micro_batch=mb, schedule=schedule, chunks=chunks,
                                           first_stage_layers=first, last_stage_layers=last,
                                           sp=sp, precision=p.precision,
                                           optimizer=p.optimizer)


def price(p: Problem, layouts: list[Layout]) -> list[Priced]:
    """Each layout's figures and first failing rule from evaluate (one call over them all: a
    row's evaluation reads its own layout only, as the test checks one layout at a time)."""
    if not layouts:
        return []
    ev = evaluate(p, Candidates.from_layouts(layouts))
    out = []
    for i, lay in enumerate(layouts):
        failed = [name for name in RULE_NAMES if not ev.rules.passes[name][i]]
        out.append(Priced(layout=lay, step_time=float(ev.time.step[i]),
                          peak=float(ev.memory.peak[i]), headroom=float(ev.memory.headroom[i]),
                          tokens_per_step=float(ev.throughput.tokens_per_step[i]),
                          first_failure=failed[0] if failed else None))
    return out


def solve_partial(p: Problem, pairs: list[tuple[dict, Priced, Priced]]) -> list[Priced]:
    """For each (knobs, recompute-none row, full-recompute row) where none does not fit and full
    does: full recompute of k layers per stage for every k from 1 to one short of the fullest
    stage's layers, the smallest k that fits (fewer recomputed layers, less time)."""
    tries: list[tuple[int, Layout]] = []
    for j, (knobs, none, full) in enumerate(pairs):
        if none.first_failure == FITS and full.first_failure is None:
            most = int(max(stage_layers(p.model.layers, knobs["pp"], knobs["chunks"],
                                        knobs["first_stage_layers"] or 0,
                                        knobs["last_stage_layers"] or 0)))
            tries += [(j, Layout(**knobs, recompute="full", recompute_layers=k))
                      for k in range(1, most)]
    smallest: dict[int, Priced] = {}
    for (j, _), row in zip(tries, price(p, [lay for _, lay in tries])):
        if row.first_failure is None and j not in smallest:
            smallest[j] = row
    return [smallest[j] for j in sorted(smallest)]


def pareto_front(rows: list[Priced]) -> list[Priced]:
    """The rows no other dominates: sorted by peak then step time (equal rows in their order),
    a row stays when every row before it is slower. Returned in their order."""
    kept, fastest_before = set(), math.inf
    for i, r in sorted(enumerate(rows), key=lambda x: (x[1].peak, x[1].step_time)):
        if fastest_before > r.step_time:
            kept.add(i)
        fastest_before = min(fastest_before, r.step_time)
    return [r for i, r in enumerate(rows) if i in kept]


def short_of_headroom(p: Problem, r: Priced) -> bool:
    """Whether the row leaves less headroom than the budget's rule asks."""
    return bool(r.headroom < p.budget.required_headroom(r.peak))


def rank(p: Problem, rows: list[Priced], objective: str) -> list[Priced]:
    """Best first: the rows meeting the headroom rule, then the rest; in each, the objective's
    key (time: seconds per token; cost: GPU-seconds per token; headroom: most first; gpus:
    fewest, then time) to 12 decimals; for time and cost, where the group's fastest row (the
    leanest of equally fast ones, then the first) has an error band, it comes first and the
    others are bucketed by the band from it, more headroom first in a bucket; then more
    headroom, smaller TP, PP, ZeRO, recompute code, larger micro-batch."""
    def key(r: Priced) -> float:
        per_token = r.step_time / r.tokens_per_step
        return {"headroom": -r.headroom, "cost": per_token * p.gpus * 1.0,
                "gpus": p.gpus * 1e6 + per_token}.get(objective, per_token)
    sort_key: dict[int, tuple[float, float]] = {}  # row → (bucket, timed key)
    for short in (False, True):
        group = [i for i, r in enumerate(rows) if short_of_headroom(p, r) == short]
        for i in group:
            sort_key[i] = (0.0, round(key(rows[i]) * 1e12) / 1e12)
        if not group or objective not in ("time", "cost"):
            continue
        first = min(group, key=lambda i: (key(rows[i]), rows[i].peak))
        band = (ranking_band(p.hardware, p.fw.name, rows[first].layout) or 0.0) / 100.0
        if band > 0:
            least = key(rows[first])
            for i in group:
                sort_key[i] = (math.floor(math.log(key(rows[i]) / least) / math.log1p(band)
                                          + 1e-9), 0.0)
            sort_key[first] = (-1.0, 0.0)
    order = sorted(range(len(rows)), key=lambda i: (
        short_of_headroom(p, rows[i]), *sort_key[i], -rows[i].headroom, rows[i].layout.tp,
        rows[i].layout.pp, rows[i].layout.zero, RECOMPUTE_CODES[rows[i].layout.recompute],
        -rows[i].layout.micro_batch))
    return [rows[i] for i in order]


def search(p: Problem, space: SearchSpace = SearchSpace(), objective: str = "time", *,
           dominated: bool = False) -> ReferenceResult:
    """Every layout priced, the rules applied, partial recompute solved, the front (every valid
    layout with `dominated`) ranked."""
    p = p.resolved()
    bases = list(base_layouts(p, space))
    modes = recompute_choices(p, space)
    if len(bases) * len(modes) > MAX_LAYOUTS:
        raise ValueError(f"{len(bases) * len(modes):,} layouts: the reference search prices at "
                         f"most {MAX_LAYOUTS:,}")
    rows = price(p, [Layout(**b, recompute=m) for b in bases for m in modes])
    out = ReferenceResult(ranked=[], enumerated=len(rows))
    closest: Priced | None = None
    for r in rows:
        if r.first_failure is None:
            out.valid += 1
            continue
        out.rejected[r.first_failure] = out.rejected.get(r.first_failure, 0) + 1
        out.examples.setdefault(r.first_failure, r.layout)
        if r.first_failure == FITS and (closest is None or r.headroom > closest.headroom):
            closest = r
    if closest is not None:
        out.examples[FITS] = closest.layout
    solved, n = [], len(modes)
    if modes[0] == "none" and modes[-1] == "full":  # the recompute knob searched
        solved = solve_partial(p, [(b, rows[j * n], rows[j * n + n - 1])
                                   for j, b in enumerate(bases)])
    out.solved = len(solved)
    shown = [r for r in rows if r.first_failure is None] + solved
    if not dominated:
        shown = pareto_front(shown)
    out.ranked = rank(p, shown, objective)
    return out
