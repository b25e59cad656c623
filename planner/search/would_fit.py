"""What would fit, when nothing does: the fixes `fit` tries in turn -- CPU offload, a batch
the data-parallel degree divides, more (or fewer) GPUs, a shorter sequence, a bigger GPU,
LoRA/QLoRA -- each a search of its own that spends from the fit's budget (blocks.Budget), so a
question with no answer stays bounded."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.evaluation import host
from planner.evaluation.candidates import Problem
from planner.evaluation.evaluate import usable_bytes
from planner.io import validate as v
from planner.search.blocks import MAX_PRICED, NARROW, Budget, layout_blocks
from planner.search.bounds import memory_parts
from planner.search.fast import SearchSpace
from planner.search.crossing import with_recomputes
from planner.search.space import recomputes
from planner.specs.finetune import Tuning
from planner.specs.framework import load_framework
from planner.specs.hardware_toml import list_profiles
from planner.specs.knobs import Layout

# the framework offload is planned on when the question's own cannot offload enough
OFFLOAD_FRAMEWORK = "deepspeed"


def any_fits(p: Problem, space: SearchSpace = SearchSpace(), budget: Budget | None = None) -> bool:
    """Whether some layout of the space fits (what "what would fit" asks): `search`'s rules and
    cost model block by block, to the first block with a valid row, each block's structurally
    valid rows spent from `budget` first (one it cannot pay: False, not known; budget.short)."""
    p = p.resolved()
    rec = recomputes(p, space)
    for lay, _, _, ok in layout_blocks(p, space):
        if budget is not None and not budget.take(int(ok.sum()) * len(rec)):
            return False
        if ok.any():
            rows = with_recomputes(lay, rec, np.flatnonzero(ok))
            parts = memory_parts(p, rows)
            cand = np.flatnonzero((parts.floor(p) <= usable_bytes(p)) & host.fits(p, rows))
            mem = parts.rows(p, cand)[2]
            if (mem.peak <= mem.usable).any():
                return True
    return False


def _batch_fixes(p: Problem, space: SearchSpace, budget: Budget, tries: int = 6) -> list[str]:
    """When B = b × a × DP is what fails: the nearest batches (±25 %) and the nearest smaller
    GPU counts (≥ 75 %) that fit, most data-parallel degrees first (the largest gcd with the
    count, as engine.batch.dp_friendly_batch), then the nearest."""
    from planner.engine.divisors import top_by_gcd  # closed form: a batch of 10^9 or 10^7 GPUs
    b0, n0, node = p.global_batch, p.gpus, p.hardware.scale_up.gpus_per_node  # is no scan
    batches = top_by_gcd(n0, max(1, int(b0 * 0.75)), min(int(b0 * 1.25), v.MAX_GLOBAL_BATCH),
                         tries, b0)
    ok_b = sorted([b for b in batches if b != b0
                   and any_fits(Problem(**{**p.__dict__, "global_batch": b}), space, budget)][:2])
    lo, hi = max(0, int(n0 * 0.75)) + 1, n0 - 1  # whole nodes, or fewer GPUs than one node
    counts = sorted(top_by_gcd(b0, lo, hi, tries // 2, hi, lambda d: math.lcm(d, node))
                    + top_by_gcd(b0, lo, min(hi, node - 1), tries // 2, hi),
                    key=lambda m: (-math.gcd(b0, m), -m))
    ok_n = sorted([m for m in counts[:tries // 2]
                   if any_fits(Problem(**{**p.__dict__, "gpus": m}), space, budget)][:2],
                  reverse=True)
    out = []
    if ok_b:
        out.append(f"--global-batch {' or '.join(map(str, ok_b))}: the nearest batches that the "
                   f"data-parallel degrees of {n0} GPUs divide fit (batch divisibility is what fails "
                   f"with {b0})")
    if ok_n:
        out.append(f"{' or '.join(map(str, ok_n))} GPUs: the nearest smaller counts whose "
                   f"data-parallel degrees divide the batch of {b0}")
    return out


def _fewer_gpus(p: Problem, space: SearchSpace, budget: Budget) -> list[str]:
    """The largest power of two below the count (whole nodes) that fits, when more GPUs never
    do: the batch caps DP (1000 sequences leave 10^7 GPUs idle), so fewer GPUs is the answer."""
    node, n = p.hardware.scale_up.gpus_per_node, 1 << (p.gpus - 1).bit_length()
    while n > 1:
        n //= 2
        m = n // node * node if n >= node else n
        if any_fits(Problem(**{**p.__dict__, "gpus": m}), space, budget):
            return [f"{m} GPUs: the largest power-of-two count below {p.gpus} with a layout "
                    "that fits"]
    return []


def _offload_fix(p: Problem, space: SearchSpace, budget: Budget) -> list[str]:
    """CPU offload where it makes the question fit: on this framework, else on DeepSpeed (the
    home of ZeRO-Offload / ZeRO-Infinity, which moves gradients and parameters too)."""
    if space.allow_offload:
        return []
    wide = replace(space, allow_offload=True)
    if any_fits(p, wide, budget):
        return ["--allow-offload: ZeRO-Offload of the optimizer (and parameters) to CPU fits"]
    if p.fw.name != OFFLOAD_FRAMEWORK and any_fits(
            replace(p, framework=load_framework(OFFLOAD_FRAMEWORK)), wide, budget):
        return [f"--allow-offload --framework {OFFLOAD_FRAMEWORK}: ZeRO-Offload / ZeRO-Infinity "
                f"(optimizer, gradients and parameters in host memory) fits; {p.fw.name} "
                "offloads less"]
    return []


def what_would_fit(p: Problem, space: SearchSpace, budget: Budget) -> list[str]:
    """The fixes tried in turn, each search spending from `budget` (a try it cannot pay is not
    suggested, and the last line says the tries stopped)."""
    # offload first: it needs no other GPU, count or batch
    out = _offload_fix(p, space, budget) + _batch_fixes(p, space, budget)
    node = p.hardware.scale_up.gpus_per_node
    n, more = p.gpus, False
    for _ in range(12):  # up to 4096× more GPUs, within the range --gpus allows
        n = max(2 * n, node)
        if n > v.MAX_GPUS:
            break
        q = Problem(**{**p.__dict__, "gpus": n})
        if any_fits(q, space, budget):
            out.append(f"{n} GPUs: the smallest power-of-two count (from {p.gpus}) with a layout that fits")
            more = True
            break
    if not more:
        out += _fewer_gpus(p, space, budget)
    s = p.seq_len
    while s > 512:
        s //= 2
        q = Problem(**{**p.__dict__, "seq_len": s, "global_batch": max(1, p.global_batch * p.seq_len // s)})
        if any_fits(q, space, budget):
            out.append(f"--seq-len {s}: a shorter sequence (same tokens per batch) fits")
            break
    for prof in sorted(list_profiles(), key=lambda x: x.gpu.memory_bytes):
        runs = p.tuning.fp8 == "none" or p.tuning.fp8 in prof.gpu.fp8_recipes
        if prof.gpu.memory_bytes > p.hardware.gpu.memory_bytes and runs and \
                any_fits(Problem(**{**p.__dict__, "hardware": prof}), space, budget):
            out.append(f"--hardware {prof.name}: {prof.gpu.memory_bytes / 2**30:.0f} GiB GPUs fit")
            break
    out += _finetune_fixes(p, space, budget)
    if budget.short:
        out.append(f"not every fix was tried: one fit prices at most {MAX_PRICED:,} layouts, "
                   f"what would fit included; {NARROW} to try the rest")
    elif not out:
        out.append("nothing tried fits: more GPUs, offload, shorter sequences and bigger GPUs all fail")
    return out


def _finetune_fixes(p: Problem, space: SearchSpace, budget: Budget) -> list[str]:
    """When every weight trains: whether LoRA (then QLoRA) on a frozen base fits, for a job that
    is a fine-tune (the adapters' states instead of the model's)."""
    if p.tuning.frozen:
        return []
    for mode in ("lora", "qlora"):
        lora = Tuning.of(Layout(finetune=mode, **{
            k: getattr(p.tuning, k) for k in ("fp8", "activation_offload",
                                              "optimizer_in_backward", "doc_tokens")}))
        if any_fits(replace(p, tuning=lora), space, budget):
            return [f"--finetune {mode}: LoRA adapters on a frozen "
                    f"{'4-bit ' if mode == 'qlora' else ''}base fit, if this job is a fine-tune"]
    return []


