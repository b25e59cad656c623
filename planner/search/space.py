"""The complete layout space of one question, as integer arrays, every split at once.

A split is TP × CP × PP × DP (× EP inside DP·CP) with TP·CP·PP·DP = GPUs. For each split every
knob that can change the layout's cost is crossed: ZeRO 0–3 (also under PP), the hybrid-shard
group (every proper divisor of DP·CP above 1, ZeRO ≥ 1), micro-batch (every divisor of the
per-replica batch), schedule (1F1B; ZB-H1, DualPipe(V) and interleaved v = 2…max_chunks, or
whole layers per chunk, under PP) with its stage splits (stated first/last stages where the
layers do not divide), sequence parallel on/off (TP > 1), expert TP (TP or 1, MoE under TP; EP
over TP·CP·DP), recompute (none, selective where the framework has it, full; innermost, so a
layout's recompute variants are consecutive rows, from which the search solves full recompute
of part of each stage, search.partial), offload when asked (a paged optimizer's at ZeRO-0 too).

Not crossed, because they cannot change the cost: sequence parallel at TP 1, ZeRO and sharding
without a data-parallel group, interleaving without PP, EP on a dense model. Not crossed,
because the framework does not run them (its profile): a pipeline schedule outside
pipeline_schedules (PP at all where the list is empty), selective recompute where
selective_recompute is "none", CP where context_parallel and EP where expert_parallel is false,
a ZeRO stage outside zero_stages, sequence parallel off for a mixture of experts under TP
where moe_needs_sequence_parallel, expert TP other than the framework's where
expert_tensor_parallel is false.
Pruned at enumeration: only TP beyond twice the NVLink domain (such layouts fail
tp-in-nvlink-domain anyway; up to 2× stays enumerated so the rejection table shows them), CP
whose sequence chunks would be shorter than one flash-attention tile (CP_MIN_CHUNK_TOKENS) and
PP beyond the layer count. Everything else a rule rejects is enumerated and counted: a split
none of whose rows passes the structural rules is counted by rule without its rows being built
(blocks.verdicts): a 10^7-layer model on 10^7 GPUs is array work, not millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from planner.evaluation.candidates import (COLUMN_NAMES, RECOMPUTE_CODES, SCHEDULE_CODES,
                         Candidates, Problem)
from planner.search.crossing import with_recomputes
from planner.engine.divisors import divisors
from planner.engine.schedules import dualpipe_choices
from planner.engine.stages import MAX_STAGE_DEFICIT, split_choices
from planner.engine.memory import PAGED_STATES
from planner.specs.knobs import KNOB


def _upper(name: str) -> int:
    """A layout knob's upper bound (its ``le``)."""
    if (le := KNOB[name].le) is None:
        raise ValueError(f"layout knob {name}: no upper bound")
    return le


MAX_MICRO_BATCH = _upper("micro_batch")

COLUMNS = COLUMN_NAMES  # every Candidates column, by name (candidates.COLUMNS)
BLOCK_ROWS = 1 << 17  # candidates per block: bounds the cost model's arrays (~1 MB each). Each
# pass of the cost model costs ~1-2 ms whatever its rows (a few hundred small numpy calls), and
# the first block's surely fitting rows put most later rows off the front by their step floor
# (settle.Anchors), so fewer, larger blocks pay: 4x the 32 K rows this was measured ~20 % less
# CPU on the 70B/256 search and ~30-40 % less on 405B and Mixtral (benchmarks/fit_speed.py), at
# ~1.5x the peak RSS (72 -> 106 MB for 405B/8K, 83 -> 143 MB for Mixtral, /usr/bin/time -v).
# The search prices the structural survivors of consecutive blocks together, at least this many
# candidate rows at a time (once some row surely fits; settle.Anchors), for the same fixed cost.
SCAN_ROWS = 1 << 17
# A scan's fixed cost (~10 ms: the parts, bounds and model calls of one pass) is paid per scan;
# once the first scans' anchors put most rows off the front, larger scans prune as well and pay
# it less often, so the scan doubles every SCAN_DOUBLING scans up to SCAN_GROWTH × SCAN_ROWS:
# measured -12 % CPU on DeepSeek-V3/2,048 and -7 % on Qwen3-235B/256 and Mixtral-8x22B/1,024,
# the dense scenarios within ±3 % (benchmarks/fit_speed.py, interleaved runs), peak RSS
# 271 -> 327 MB on DeepSeek-V3 (Mixtral 145 -> 188 MB).
SCAN_DOUBLING, SCAN_GROWTH = 4, 4
# The search's blocks (blocks.passing_blocks) likewise double, one after another, up to
# BLOCK_GROWTH × BLOCK_ROWS: the first stays small (priced alone, it finds the first anchors),
# the later ones are priced a scan each without being concatenated first, and each builds its
# grid once for more splits. Measured -3 to -5 % CPU on DeepSeek-V3/2,048 and Qwen3-235B/256,
# -9 % on Mixtral-8x22B/1,024 (benchmarks/fit_speed.py, interleaved runs), peak RSS 278 ->
# 300 MB on DeepSeek-V3.
BLOCK_GROWTH = 4
# Ring CP cuts the sequence into 2·CP chunks (Megatron-LM; Dubey et al. 2024, Sec. 3.3.2); a
# chunk below one 128-token FlashAttention-2 query tile (Dao 2023) leaves the kernel partly idle.
CP_MIN_CHUNK_TOKENS = 128
SPLIT_COLUMNS = ("tp", "cp", "pp", "dp", "ep")
# The knob tables crossed within a split, in the C order of its rows (recompute innermost,
# crossed later by with_recomputes), each keyed by the one split column it depends on.
FACTORS = ("states", "mb", "schedule", "sp", "etp")
# The states table's columns (FACTORS[0]): what the layouts of one group differ in.
STATE_KNOBS = ("zero", "shard", "offload_opt", "offload_par")


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


@dataclass(frozen=True)
class Factor:
    """One knob table per split, all tables concatenated: columns, per split first row, rows."""

    cols: dict[str, np.ndarray]
    start: np.ndarray
    size: np.ndarray


@dataclass(frozen=True)
class Splits:
    """Every split (SPLIT_COLUMNS arrays, in enumeration order) and its knob tables."""

    cols: dict[str, np.ndarray]
    factors: dict[str, Factor]
    first_recompute: tuple[int, int]

    def __len__(self) -> int:
        return len(self.cols["tp"])

    def sizes(self) -> np.ndarray:
        """Rows per split before the recompute knob: the product of its tables' sizes."""
        return np.prod([self.factors[f].size for f in FACTORS], axis=0).astype(np.int64) \
            if len(self) else np.zeros(0, dtype=np.int64)


def _pp_degrees(p: Problem, space: SearchSpace, rest: int) -> np.ndarray:
    """PP degrees of a TP·CP pair leaving `rest` GPUs: divisors up to the layer count, PP > 1
    only where the framework runs a pipeline schedule (the profile's list)."""
    if space.pp:
        return np.array([space.pp] if rest % space.pp == 0 else [], dtype=np.int64)
    q = np.array(divisors(rest), dtype=np.int64)
    return q[(q <= p.model.layers) & ((q == 1) | bool(p.fw.time.pipeline_schedules))]


def split_arrays(p: Problem, space: SearchSpace) -> dict[str, np.ndarray]:
    """Every (TP, CP, PP, DP, EP) whose product TP·CP·PP·DP is the GPU count, as arrays in
    enumeration order (TP, then CP, then PP, then EP ascending)."""
    mod, gpus = p.model, p.gpus
    dom = p.hardware.scale_up.gpus_per_domain
    parts = []
    for t in [space.tp] if space.tp else [d for d in divisors(gpus) if d <= 2 * dom]:
        if gpus % t:
            continue
        # CP = 1 always: the chunk bound is on CP's chunks (a sequence of one token is one chunk)
        for c in [space.cp] if space.cp else [
                d for d in divisors(gpus // t)
                if d == 1 or (2 * d * CP_MIN_CHUNK_TOKENS <= p.seq_len
                              and p.fw.time.context_parallel)]:
            if (gpus // t) % c:
                continue
            pps = _pp_degrees(p, space, gpus // (t * c))
            parts.append((np.full(len(pps), t), np.full(len(pps), c), pps,
                          gpus // (t * c) // pps))
    cols = [np.concatenate(c).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
            for c in zip(*parts)] if parts else [np.zeros(0, dtype=np.int64)] * 4
    tp, cp, pp, dp = cols
    if space.ep or not mod.is_moe:
        ep = np.full(len(tp), space.ep or 1, dtype=np.int64)
    else:
        e = np.array([x for x in divisors(mod.experts) if x == 1 or p.fw.time.expert_parallel],
                     dtype=np.int64)
        # EP folds over TP·CP·DP (expert-grid-folds rejects ETP = TP where the grid does not)
        at, which = np.nonzero((tp * dp * cp)[:, None] % e[None, :] == 0)  # row-major: split, EP
        tp, cp, pp, dp, ep = tp[at], cp[at], pp[at], dp[at], e[which]
    return dict(zip(SPLIT_COLUMNS, (tp, cp, pp, dp, ep)))


def splits(p: Problem, space: SearchSpace) -> list[tuple[int, int, int, int, int]]:
    """split_arrays as a list of (TP, CP, PP, DP, EP) tuples."""
    a = split_arrays(p, space)
    return [(int(t), int(c), int(q), int(d), int(e)) for t, c, q, d, e in
            zip(*(a[k] for k in SPLIT_COLUMNS))]


def _states(p: Problem, space: SearchSpace, dpcp: int) -> dict[str, np.ndarray]:
    """(ZeRO, shard group, offload optimizer, offload params) rows for one DP·CP."""
    hybrid, paged = p.fw.time.hybrid_sharding, p.optimizer in PAGED_STATES
    alone = space.zero is None and dpcp == 1   # no data-parallel group: ZeRO only to offload
    zeros = [space.zero] if space.zero is not None else [
        z for z in ([0, 1, 2, 3] if dpcp > 1 else [0] + ([2, 3] if space.allow_offload else []))
        if z in p.fw.time.zero_stages]
    rows = []
    for z in zeros:
        shards = [0] + ([g for g in divisors(dpcp) if 1 < g < dpcp] if z >= 1 and hybrid else [])
        offs = [(0, 0)] + ([(1, 0)] if space.allow_offload and (z >= 1 or paged) else []) \
            + ([(1, 1)] if space.allow_offload and z == 3 else [])
        if alone and z:  # one replica: ZeRO-Offload (stage 2) and ZeRO-Infinity (stage 3)
            offs = [(1, 0)] if z == 2 else [(1, 1)]
        rows += [(z, g, oo, op) for g in shards for oo, op in offs]
    return _table(rows, STATE_KNOBS)


def interleave_choices(layers: int, pp: int, max_chunks: int) -> list[int]:
    """Interleaved chunks v ≥ 2: 2…max_chunks where the layers split (stages.split_choices),
    beyond, each v with whole, equal chunks (L divisible by PP·v; MLPerf GPT-3 175B runs PP 8 ×
    v 12, mlcommons/training_results_v3.1 NVIDIA gpt3 configs)."""
    near = [v for v in range(2, min(max_chunks, (layers + MAX_STAGE_DEFICIT) // pp) + 1)
            if split_choices(layers, pp, v)]   # the end chunks may hold none (layers_split_valid)
    # PP·v divides L: the divisors of L / PP (a scan to L / PP took minutes at 10^7 layers)
    whole = [v for v in divisors(layers // pp) if v > max_chunks] if layers % pp == 0 else []
    return near + whole


def _schedules(p: Problem, space: SearchSpace, pp: int) -> dict[str, np.ndarray]:
    """(schedule code, chunks v, first, last) rows: 1F1B; under PP ZB-H1, DualPipe(V) (schedules.
    dualpipe_choices) and interleaved v where the layers split, where the framework runs each
    (profile pipeline_schedules; one the user fixed is kept), each with its stage splits (engine.
    stages.split_choices). GPipe is never enumerated: 1F1B has its bubble and less memory."""
    rows = [(SCHEDULE_CODES["1f1b"], 1)]
    runs = p.fw.time.pipeline_schedules
    if pp > 1:
        rows += [(SCHEDULE_CODES[s], 1) for s in ["zb-h1"] * ("zb-h1" in runs)
                 + dualpipe_choices(p.model.layers, pp, runs)]
        rows += [(SCHEDULE_CODES["interleaved"], v) for v in interleave_choices(
            p.model.layers, pp, space.max_chunks) if "interleaved" in runs]
    if space.schedule:
        want = SCHEDULE_CODES[space.schedule]
        rows = ([(want, space.chunks)] if space.chunks else [r for r in rows if r[1] > 1]) \
            if space.schedule == "interleaved" else [(want, 1)]
    return _table([(code, v, f, l_) for code, v in rows
                   for f, l_ in split_choices(p.model.layers, pp, v) or [(0, 0)]],
                  ("schedule", "chunks", "first", "last"))


def recomputes(p: Problem, space: SearchSpace) -> np.ndarray:
    """(recompute code, recompute_layers = -1: every layer of the stage) rows, none first and
    full last (search.partial reads the pair). Selective only where the framework has a
    selective mode (profile selective_recompute); under flash attention it is still a knob:
    Megatron's checkpointed core attention re-runs the flash forward in backward and frees the
    kernel's fp32 log-sum-exp, torchtitan's op list re-runs half the matmuls."""
    if space.recompute:
        return np.array([(RECOMPUTE_CODES[space.recompute], -1)], dtype=np.int64)
    selective = p.fw.time.has_selective
    modes = ["none"] + (["selective"] if selective else []) + ["full"]
    return np.array([(RECOMPUTE_CODES[m], -1) for m in modes], dtype=np.int64)


def _micro_batches(p: Problem, space: SearchSpace, dp: int) -> dict[str, np.ndarray]:
    """The micro-batches of a split: every divisor of the per-replica batch up to the Layout's
    own bound (KNOB["micro_batch"].le: 10^9 sequences over DP 4 gave 2.5e8-sequence
    candidates a Layout then refused), 1 where DP does not divide the block (batch-divisible
    rejects it), or the one fixed."""
    per_replica = p.global_batch // dp if p.global_batch % dp == 0 else 1
    return _table([(space.micro_batch,)] if space.micro_batch else [
        (d,) for d in divisors(max(per_replica, 1)) if d <= MAX_MICRO_BATCH], ("mb",))


def _table(rows: Sequence[tuple[int, ...]], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    a = np.array(rows, dtype=np.int64).reshape(-1, len(names))
    return {n: a[:, i] for i, n in enumerate(names)}


def _factor(keys: np.ndarray, make: Callable[[int], dict[str, np.ndarray]],
            names: tuple[str, ...]) -> Factor:
    """The table `make(key)` of every split, built once per distinct key."""
    uniq, inv = np.unique(keys, return_inverse=True)
    tables = [make(int(k)) for k in uniq]
    size = np.array([len(t[names[0]]) for t in tables], dtype=np.int64)
    start = np.cumsum(size) - size
    cols = {n: np.concatenate([t[n] for t in tables]) if tables
            else np.zeros(0, dtype=np.int64) for n in names}
    return Factor(cols, start[inv.ravel()], size[inv.ravel()])


def _sp_choices(p: Problem, tp: int) -> list[tuple[int]]:
    """Sequence parallel off (and on, at TP > 1); on alone for a mixture of experts under TP
    in a framework that requires it (its profile's moe_needs_sequence_parallel)."""
    if tp < 2:
        return [(0,)]
    return [(1,)] if p.model.is_moe and p.fw.time.moe_needs_sequence_parallel else [(0,), (1,)]


def _etp_choices(p: Problem, key: int) -> list[tuple[int]]:
    """Expert TP codes (0: TP, 1: one) of a split keyed 0 on a dense model, else min(TP, 2)
    plus 2 where EP > 1: TP alone without TP; TP and 1 under TP where the framework has
    expert TP (expert_tensor_parallel), else what it runs: TP without EP, 1 under EP."""
    tp_on, ep_on = key in (2, 4), key in (3, 4)
    if not tp_on:
        return [(0,)]
    if p.fw.time.expert_tensor_parallel:
        return [(0,), (1,)]
    return [(1,)] if ep_on else [(0,)]


def split_table(p: Problem, space: SearchSpace) -> Splits:
    """Every split with its knob tables: states by DP·CP, micro-batches by DP, schedules by PP,
    sequence parallel by TP (on and off where TP > 1, _sp_choices)."""
    s = split_arrays(p, space)
    rec = recomputes(p, space)
    factors = {
        "states": _factor(s["dp"] * s["cp"], lambda k: _states(p, space, k),
                          STATE_KNOBS),
        "mb": _factor(s["dp"], lambda k: _micro_batches(p, space, k), ("mb",)),
        "schedule": _factor(s["pp"], lambda k: _schedules(p, space, k),
                            ("schedule", "chunks", "first", "last")),
        "sp": _factor(np.minimum(s["tp"], 2), lambda k: _table(_sp_choices(p, k), ("sp",)),
                      ("sp",)),
        "etp": _factor(int(p.model.is_moe) * (np.minimum(s["tp"], 2) + 2 * (s["ep"] > 1)),
                       lambda k: _table(_etp_choices(p, k), ("etp",)), ("etp",)),
    }
    return Splits(s, factors, (int(rec[0, 0]), int(rec[0, 1])))


def product(s: Splits, idx: np.ndarray, over: tuple[str, ...] = FACTORS,
            positions: dict[str, np.ndarray] | None = None,
            keep: Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray] | None = None
            ) -> tuple[Candidates, np.ndarray]:
    """The rows of splits `idx`, crossing the tables `over` (C order, FACTORS order), every
    other table at its first row, recompute at its first row: the candidates and, per row,
    its split's position in idx. Row r of a split takes table t's row (r // stride_t) mod
    len_t (into `positions`[t] where given), the stride the later crossed tables' sizes' product.
    With `keep` (each row's split position and `positions` → which rows to build) only those
    rows are built and returned (positions still cover every row). positions["group"]: each
    returned row's group, its split and its row of every table but the states (the outermost
    table), numbered from 0 in the order of idx: rows alike but in their states share one."""
    idx = np.asarray(idx, dtype=np.int64)
    one = np.ones(len(idx), dtype=np.int64)
    sizes = [s.factors[f].size[idx] if f in over else one for f in FACTORS]
    # a split with an empty table (a fixed schedule it cannot run) has no rows at all
    count = np.prod(sizes + [np.minimum(s.factors[f].size[idx], 1) for f in FACTORS
                             if f not in over], axis=0).astype(np.int64)
    owner = np.repeat(np.arange(len(idx)), count)
    local = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    split = idx[owner]
    pos = {} if positions is None else positions
    first = local  # each row's position in its split
    rows = {}  # each table's row of each candidate
    for f, size in zip(reversed(FACTORS), reversed(sizes)):
        rows[f] = s.factors[f].start[split]
        if f in over:
            n = size[owner]
            pos[f] = local % n
            rows[f], local = rows[f] + pos[f], local // n
    states = pos.get(FACTORS[0], np.zeros(1, dtype=np.int64))
    if keep is not None:  # the columns of the kept rows alone
        sel = np.flatnonzero(keep(owner, pos))
        owner, split, first, states = owner.take(sel), split.take(sel), first.take(sel), \
            states.take(sel, mode="clip")
        rows = {f: r.take(sel) for f, r in rows.items()}
    if positions is not None:  # each row returned's group: rows alike but in their states
        inner = np.prod(sizes[1:], axis=0).astype(np.int64)   # rows per states row
        pos["group"] = (np.cumsum(inner) - inner).take(owner) + first - states * inner.take(owner)
    cols = {k: s.cols[k].take(split) for k in SPLIT_COLUMNS}
    for f in reversed(FACTORS):
        cols.update({name: col.take(rows[f]) for name, col in s.factors[f].cols.items()})
    cols["recompute"] = np.full(len(owner), s.first_recompute[0], dtype=np.int64)
    cols["recompute_layers"] = np.full(len(owner), s.first_recompute[1], dtype=np.int64)
    return Candidates(**cols), owner


def split_rows(p: Problem, space: SearchSpace, split: tuple[int, int, int, int, int],
               rec: np.ndarray) -> Candidates:
    """Every candidate of one split (TP, CP, PP, DP, EP), crossed with the recompute rows rec."""
    s = split_table(p, space)
    at = np.flatnonzero(np.logical_and.reduce([s.cols[k] == v for k, v in zip(SPLIT_COLUMNS, split)]))
    return with_recomputes(product(s, at[:1])[0], rec)


def block_ends(sizes: np.ndarray, rows: int, growth: int = 1) -> Iterator[tuple[int, int]]:
    """Consecutive splits [a, b) whose sizes reach `rows` (the last block may fall short): a
    block closes on the first split that brings it to `rows` or more; with `growth`, the
    i-th block's `rows` doubled i times, up to `growth` × rows."""
    cum = np.concatenate([[0], np.cumsum(sizes)])
    a, n, i = 0, len(sizes), 0
    while a < n:
        b = min(int(np.searchsorted(cum, cum[a] + rows * min(growth, 2 ** i), side="left")), n)
        yield a, b
        a, i = b, i + 1


def empty() -> Candidates:
    """No candidates."""
    return Candidates(**{name: np.zeros(0, dtype=np.int64) for name in COLUMNS})


def candidate_blocks(p: Problem, space: SearchSpace,
                     rows: int | None = None) -> Iterator[Candidates]:
    """The whole space, every split built, as Candidates of about `rows` (default BLOCK_ROWS)
    rows each, whole splits per block, recompute innermost."""
    rec = recomputes(p, space)
    s = split_table(p, space)
    for a, b in block_ends(s.sizes() * len(rec), rows or BLOCK_ROWS):
        yield with_recomputes(product(s, np.arange(a, b))[0], rec)
