"""The complete layout space of one question, as integer arrays, a batch of splits at a time.

A split is TP × CP × PP × DP (× EP inside DP·CP) with TP·CP·PP·DP = GPUs. For each split every
knob that can change the layout's cost is crossed: ZeRO 0–3 (also under PP), the hybrid-shard
group (every proper divisor of DP·CP above 1, ZeRO ≥ 1), micro-batch (every divisor of the
per-replica batch), schedule (1F1B; ZB-H1 and interleaved with v = 2…max_chunks under PP), sequence
parallel on/off (TP > 1), recompute (none, selective where the framework has it, full;
recompute is the innermost knob, so each layout's recompute variants are consecutive rows, and
full recompute of part of each stage is solved from them by the search, search.solve_partial),
offload when asked.

Not crossed, because they cannot change the cost: sequence parallel at TP 1, ZeRO and sharding
without a data-parallel group, interleaving without PP, EP on a dense model. Not crossed,
because the framework does not run them (its profile): a pipeline schedule outside
pipeline_schedules (PP at all where the list is empty), selective recompute where
selective_recompute is "none", CP where context_parallel and EP where expert_parallel is false.
Pruned at enumeration: only TP beyond twice the NVLink domain (such layouts fail
tp-in-nvlink-domain anyway; up to 2× stays enumerated so the rejection table shows them), CP
whose sequence chunks would be shorter than one flash-attention tile (CP_MIN_CHUNK_TOKENS) and
PP beyond the layer count. Everything else a rule rejects is enumerated and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from .candidates import COLUMN_NAMES, RECOMPUTE_CODES, SCHEDULE_CODES, Candidates, Problem
from .engine.divisors import divisors
from .engine.stages import MAX_STAGE_DEFICIT, stage_deficit
from .specs.layout import KNOB

MAX_MICRO_BATCH = KNOB["micro_batch"].le

COLUMNS = COLUMN_NAMES  # every Candidates column, by name (candidates.COLUMNS)
CHUNK_ROWS = 1 << 15  # candidates per batch: bounds the cost model's arrays (~256 KB each); a
# fresh process pays page faults on every large new array, and this size measured fastest cold
# Load-balanced ring CP cuts the sequence into 2·CP chunks (Megatron-LM's context parallel;
# Dubey et al. 2024, Sec. 3.3.2); FlashAttention-2 tiles queries in blocks of 64-128 tokens
# (Dao 2023, the block sizes it tunes), so a chunk shorter than one 128-token tile leaves the
# kernel partly idle: CP stops there (a bound on the enumeration, not a fitted constant).
CP_MIN_CHUNK_TOKENS = 128


@dataclass(frozen=True)
class SearchSpace:
    """Knobs the user fixed (None = search it)."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    schedule: str | None = None
    chunks: int | None = None
    allow_offload: bool = False
    max_chunks: int = 8


def splits(p: Problem, space: SearchSpace) -> list[tuple[int, int, int, int, int]]:
    """Every (TP, CP, PP, DP, EP) whose product TP·CP·PP·DP is the GPU count."""
    mod, gpus = p.model, p.gpus
    dom = p.hardware.scale_up.gpus_per_domain
    out = []
    for tp in [space.tp] if space.tp else [t for t in divisors(gpus) if t <= 2 * dom]:
        if gpus % tp:
            continue
        # CP = 1 always: the chunk bound is on CP's chunks (a sequence of one token is one chunk)
        for cp in [space.cp] if space.cp else [
                c for c in divisors(gpus // tp)
                if c == 1 or (2 * c * CP_MIN_CHUNK_TOKENS <= p.seq_len
                              and p.fw.time.context_parallel)]:
            if (gpus // tp) % cp:
                continue
            rest = gpus // (tp * cp)
            # PP only where the framework runs a pipeline schedule (the profile's list)
            for pp in [space.pp] if space.pp else [q for q in divisors(rest) if q <= mod.layers
                                                   and (q == 1 or p.fw.time.pipeline_schedules)]:
                if rest % pp:
                    continue
                dp = rest // pp
                eps = [space.ep] if space.ep else (
                    [e for e in divisors(mod.experts) if (dp * cp) % e == 0
                     and (e == 1 or p.fw.time.expert_parallel)] if mod.is_moe else [1])
                out += [(tp, cp, pp, dp, ep) for ep in eps]
    return out


def _states(space: SearchSpace, dpcp: int) -> np.ndarray:
    """(ZeRO stage, shard group, offload optimizer, offload params) rows for one split."""
    zeros = [space.zero] if space.zero is not None else ([0, 1, 2, 3] if dpcp > 1 else [0])
    rows = []
    for z in zeros:
        shards = [0] + ([g for g in divisors(dpcp) if 1 < g < dpcp] if z >= 1 else [])
        offs = [(0, 0)] + ([(1, 0)] if space.allow_offload and z >= 1 else []) \
            + ([(1, 1)] if space.allow_offload and z == 3 else [])
        rows += [(z, g, oo, op) for g in shards for oo, op in offs]
    return np.array(rows, dtype=np.int64)


def _schedules(p: Problem, space: SearchSpace, pp: int) -> np.ndarray:
    """(schedule code, chunks v) rows: 1F1B; under PP also zero-bubble ZB-H1 and interleaved v
    where the layers split, each only where the framework runs it (its profile's
    pipeline_schedules; a schedule the user fixed is kept). GPipe is never enumerated: 1F1B
    has its bubble and less memory."""
    rows = [(SCHEDULE_CODES["1f1b"], 1)]
    runs = p.fw.time.pipeline_schedules
    if pp > 1:
        rows += [(SCHEDULE_CODES["zb-h1"], 1)] if "zb-h1" in runs else []
        rows += [(SCHEDULE_CODES["interleaved"], v) for v in range(2, space.max_chunks + 1)
                 if "interleaved" in runs
                 and stage_deficit(p.model.layers, pp, v) <= MAX_STAGE_DEFICIT]
    if space.schedule:
        want = SCHEDULE_CODES[space.schedule]
        if space.schedule == "interleaved":
            rows = [(want, space.chunks)] if space.chunks else [r for r in rows if r[1] > 1]
        else:
            rows = [(want, 1)]
    return np.array(rows, dtype=np.int64)


def recomputes(p: Problem, space: SearchSpace) -> np.ndarray:
    """(recompute code, recompute_layers = -1: every layer of the stage) rows, none first and
    full last (search.solve_partial reads the pair). Selective only where the framework has a
    selective mode (profile selective_recompute); under flash attention it is still a knob:
    Megatron's checkpointed core attention re-runs the flash forward in backward and frees the
    kernel's fp32 log-sum-exp, torchtitan's op list re-runs half the matmuls."""
    if space.recompute:
        return np.array([(RECOMPUTE_CODES[space.recompute], -1)], dtype=np.int64)
    selective = p.fw.time.selective_recompute != "none"
    modes = ["none"] + (["selective"] if selective else []) + ["full"]
    return np.array([(RECOMPUTE_CODES[m], -1) for m in modes], dtype=np.int64)


def _micro_batches(p: Problem, space: SearchSpace, dp: int) -> list[int]:
    """The micro-batches of a split: every divisor of the per-replica batch up to the Layout's
    own bound (KNOB["micro_batch"].le: 10^9 sequences over DP 4 gave 2.5e8-sequence
    candidates a Layout then refused), 1 where DP does not divide the batch (batch-divisible
    rejects it), or the one fixed."""
    per_replica = p.global_batch // dp if p.global_batch % dp == 0 else 1
    return [space.micro_batch] if space.micro_batch else [
        d for d in divisors(max(per_replica, 1)) if d <= MAX_MICRO_BATCH]


def _tables(p: Problem, space: SearchSpace, tables: dict, dpcp: int, pp: int) -> None:
    """The state table of a DP·CP group and the schedule table of a PP degree, once each."""
    if ("states", dpcp) not in tables:
        tables["states", dpcp] = _states(space, dpcp)
    if ("schedules", pp) not in tables:
        tables["schedules", pp] = _schedules(p, space, pp)


def split_rows(p: Problem, space: SearchSpace, split: tuple[int, int, int, int, int],
               rec: np.ndarray, tables: dict | None = None) -> dict[str, np.ndarray]:
    """Every candidate of one split as COLUMNS arrays, recompute innermost: row r takes table
    t's row (r // stride_t) mod len_t, the stride being the product of the later tables' sizes
    (np.indices' C order). `tables` memoises the state and schedule tables across splits."""
    tp, cp, pp, dp, ep = split
    tables = {} if tables is None else tables
    mbs = _micro_batches(p, space, dp)
    _tables(p, space, tables, dp * cp, pp)
    parts = (tables["states", dp * cp], np.array(mbs, dtype=np.int64).reshape(-1, 1),
             tables["schedules", pp], np.array([0, 1] if tp > 1 else [0]).reshape(-1, 1), rec)
    picked = [t[i] for t, i in zip(parts, np.indices([len(t) for t in parts]).reshape(
        len(parts), -1))]
    (states, mb, sched, sp, recompute), n = picked, len(picked[0])
    const = lambda x: np.full(n, x, dtype=np.int64)  # noqa: E731
    return {"tp": const(tp), "pp": const(pp), "dp": const(dp), "cp": const(cp), "ep": const(ep),
            "zero": states[:, 0], "shard": states[:, 1], "mb": mb[:, 0],
            "schedule": sched[:, 0], "chunks": sched[:, 1], "sp": sp[:, 0],
            "recompute": recompute[:, 0], "recompute_layers": recompute[:, 1],
            "offload_opt": states[:, 2], "offload_par": states[:, 3]}


def candidate_batches(p: Problem, space: SearchSpace,
                      rows: int | None = None) -> Iterator[Candidates]:
    """The whole space, as Candidates of about `rows` (default CHUNK_ROWS) rows each, whole
    splits per batch."""
    rec = recomputes(p, space)
    for layouts, _ in layout_batches(p, space, rows):
        yield with_recomputes(layouts, rec)


def layout_batches(p: Problem, space: SearchSpace, rows: int | None = None,
                   keep: Callable[[tuple[int, int, int, int, int]], bool] | None = None
                   ) -> Iterator[tuple[Candidates, list[tuple[tuple, int]]]]:
    """candidate_batches before the recompute knob is crossed (every row holds the first
    recompute row; with_recomputes crosses it), in the same batches, leaving out the splits
    `keep` refuses: per batch (its layouts, [(left-out split, the rows it has)])."""
    rows = rows or CHUNK_ROWS
    rec = recomputes(p, space)
    first = rec[:1]
    pending: list[dict[str, np.ndarray]] = []
    left: list[tuple[tuple, int]] = []
    size = 0
    tables: dict = {}
    for split in splits(p, space):
        if keep is None or keep(split):
            block = split_rows(p, space, split, first, tables)
            pending.append(block)
            size += len(block["tp"]) * len(rec)
        else:
            left.append((split, split_size(p, space, split, tables) * len(rec)))
            size += left[-1][1]
        if size >= rows:
            yield _columns(pending), left
            pending, left, size = [], [], 0
    if pending or left:
        yield _columns(pending), left


def split_size(p: Problem, space: SearchSpace, split: tuple[int, int, int, int, int],
               tables: dict) -> int:
    """Rows of split_rows(p, space, split, one recompute row), without building them."""
    tp, cp, pp, dp, ep = split
    _tables(p, space, tables, dp * cp, pp)
    return len(tables["states", dp * cp]) * len(_micro_batches(p, space, dp)) \
        * len(tables["schedules", pp]) * (2 if tp > 1 else 1)


def with_recomputes(c: Candidates, rec: np.ndarray, rows: np.ndarray | None = None
                    ) -> Candidates:
    """Every row of c (or the rows `rows` of it) crossed with the recompute rows rec, recompute
    innermost (as split_rows lays them out)."""
    k = len(rec)
    idx = np.repeat(np.arange(len(c)) if rows is None else rows, k)
    cols = {name: getattr(c, name).take(idx) for name in COLUMNS
            if name not in ("recompute", "recompute_layers")}
    n = len(idx) // k
    return Candidates(**cols, recompute=np.tile(rec[:, 0], n),
                      recompute_layers=np.tile(rec[:, 1], n))


def _columns(blocks: list[dict[str, np.ndarray]]) -> Candidates:
    if not blocks:
        return Candidates(**{name: np.zeros(0, dtype=np.int64) for name in COLUMNS})
    return Candidates(**{name: np.concatenate([b[name] for b in blocks]) for name in COLUMNS})
