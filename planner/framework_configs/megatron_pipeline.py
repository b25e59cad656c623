"""Megatron-LM's pipeline split, read and written: interleaving (--num-layers-per-virtual-
pipeline-stage or --num-virtual-stages-per-pipeline-rank), the embedding and the loss counted
as layers (--account-for-{embedding,loss}-in-pipeline-split) and stated first/last stages
(--decoder-first/last-pipeline-num-layers) or, where v does not divide them, a layout string
(--pipeline-model-parallel-layout), with the checks of core_v0.15.3 (arguments.py:530-600,
transformer_config.py:1018-1135). Beside ``megatron.py`` to keep that module under the size
limit.
"""

from __future__ import annotations

import re
from typing import Any

from planner.engine.pipeline import vp_group_size
from planner.engine.stages import layers_split_valid
from planner.errors import InputError
from planner.framework_configs.megatron_args import (ACCOUNT_FLAGS, counted_layers,
                                                     interleaved_split)
from planner.specs.knobs import Layout
from planner.specs.verdict import GateRule, make_rule

FIRST, LAST = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
LAYOUT = "--pipeline-model-parallel-layout"
GROUP = "--microbatch-group-size-per-virtual-pipeline-stage"


def read_pipeline(a: dict[str, Any], layers: int, pp: int, where: str, rules: list
                  ) -> tuple[int, int | None, int | None]:
    """(chunks v, first-stage layers, last-stage layers) of the arguments, with their rules."""
    if a.get(LAYOUT) is not None:
        return _read_layout(str(a[LAYOUT]), layers, pp, where, rules)
    lpv = a.get("--num-layers-per-virtual-pipeline-stage")
    vsr = a.get("--num-virtual-stages-per-pipeline-rank")
    first, last = a.get(FIRST), a.get(LAST)
    stated = first is not None or last is not None
    chunks = 1
    if lpv is not None and vsr is not None:
        raise InputError(f"{where}: --num-virtual-stages-per-pipeline-rank",
                         "give at most one of it and --num-layers-per-virtual-pipeline-stage")
    if lpv is not None:
        if stated:   # arguments.py:558-560
            rules.append(make_rule("megatron-uneven-vpp", False, f"{FIRST} / {LAST} with "
                                   "--num-layers-per-virtual-pipeline-stage",
                                   "--num-virtual-stages-per-pipeline-rank", "please use "
                                   "--num-virtual-stages-per-pipeline-rank to specify virtual "
                                   "pipeline parallel degree when enable uneven pipeline "
                                   "parallelism", key="--num-layers-per-virtual-pipeline-stage"))
        counted = counted_layers(a, layers)   # with the embedding / loss counted as layers
        per_rank = counted // pp if counted % pp == 0 else None
        ok = per_rank is not None and per_rank % lpv == 0
        rules.append(make_rule("megatron-vpp-layers", ok,
                               f"({counted} layers / PP {pp}) / {lpv} layers per virtual stage",
                               "whole numbers", "number of layers per pipeline rank must be "
                               "divisible by --num-layers-per-virtual-pipeline-stage",
                               key="--num-layers-per-virtual-pipeline-stage"))
        chunks = max(1, (per_rank or lpv) // lpv)
    elif vsr is not None:
        chunks = vsr
    if chunks > 1:   # p2p overlap is on unless --no-overlap-p2p-communication (:556-560)
        need = 2 if a.get("--no-overlap-p2p-communication") else 1
        rules.append(make_rule("megatron-vpp-needs-pp", pp > need, f"PP {pp}", f"> {need}",
                               "the interleaved schedule needs pipeline-model-parallel size > 1 "
                               "(> 2 with --no-overlap-p2p-communication)",
                               key="--pipeline-model-parallel-size"))
    if stated:
        _stated_rules(a, layers, pp, chunks, first, last, rules)
    elif lpv is None:
        rules.append(make_rule("megatron-layers-divisible", layers % pp == 0,
                               f"{layers} layers % PP {pp}", "= 0", "Number of layers should be "
                               "divisible by the pipeline-model-parallel size",
                               key="--pipeline-model-parallel-size"))
    return chunks, first, last


def _stated_rules(a: dict[str, Any], layers: int, pp: int, v: int, first: int | None,
                  last: int | None, rules: list) -> None:
    """Stated first/last stages: not with the embedding or loss counted as layers
    (transformer_config.py:1018-1028); each stated stage > 0 and a multiple of v, the rest a
    whole multiple of v on every other stage (:1083-1135)."""
    counted = [f for f in ACCOUNT_FLAGS if a.get(f)]
    if counted:
        rules.append(make_rule("megatron-uneven-account", False, f"{FIRST} / {LAST} with "
                               f"{counted[0]}", "one of the two", "num_layers_in_first_pipeline_"
                               "stage and num_layers_in_last_pipeline_stage cannot be set at the "
                               "same time with account_for_embedding_in_pipeline_split and "
                               "account_for_loss_in_pipeline_split", key=counted[0]))
    others = pp - (first is not None) - (last is not None)
    ok = bool(layers_split_valid(layers, pp, v, first or 0, last or 0))
    rules.append(make_rule("megatron-layers-divisible", ok,
                           f"({layers} − first {first or 0} − last {last or 0}) layers over "
                           f"{others} other stages × v {v}", "whole multiple of v per stage",
                           "number of layers at middle stage must be divisible by the middle "
                           "pipeline model parallel size (and by the virtual pipeline degree)",
                           key=FIRST if first is not None else LAST))


def pipeline_flags(lay: Layout, layers: int, split: tuple[int, int, int],
                   notes: list[str], mtp: int = 0) -> list[tuple[str, object]]:
    """The flags of the layout's split: stated first/last stages as --decoder-first/last-
    pipeline-num-layers (with --num-virtual-stages-per-pipeline-rank under interleaving, the one
    virtual-pipeline flag Megatron accepts with them); else interleaving with the embedding
    and loss counted where a chunk is short; else dtplan's uneven ends as stated stages."""
    first, full, last = split
    out: list[tuple[str, object]] = []
    stated = lay.first_stage_layers is not None or lay.last_stage_layers is not None
    v = lay.chunks if lay.schedule == "interleaved" else 1
    if stated and (first % v or last % v):   # Megatron's stated stages are multiples of v
        out.append((LAYOUT, layout_string(lay.pp, v, first, full, last, mtp)))
        notes.append(f"uneven pipeline: {first} layers on the first stage, {last} on the last, "
                     f"{full} on the others, v {v} virtual stages each ({LAYOUT})")
    elif stated:
        out += [(f, n) for f, n in ((FIRST, lay.first_stage_layers),
                                    (LAST, lay.last_stage_layers)) if n is not None]
        if lay.schedule == "interleaved":
            out.append(("--num-virtual-stages-per-pipeline-rank", lay.chunks))
        notes.append(f"uneven pipeline: {first} layers on the first stage, {last} on the last, "
                     f"{full} on the others")
    elif lay.schedule == "interleaved":
        flags, per_chunk = interleaved_split(layers, lay.pp, lay.chunks)
        out += [*flags, ("--num-layers-per-virtual-pipeline-stage", per_chunk)]
    elif first != full or last != full:
        out += [(FIRST, first), (LAST, last)]
        notes.append(f"uneven pipeline: {first} layers on the first stage, {last} on the last, "
                     f"{full} on the others")
    return out


def group_flags(lay: Layout, micro_batches: int) -> list[tuple[str, object]]:
    """The micro-batch group under interleaving where PP, Megatron's default, is not valid for
    m micro-batches (engine.pipeline.vp_group_size, the group dtplan's memory counts)."""
    if lay.schedule != "interleaved" or micro_batches < lay.pp:
        return []
    n = int(vp_group_size(lay.pp, micro_batches))
    return [(GROUP, n)] if n != lay.pp else []


def group_rule(a: dict[str, Any], pp: int, m: int, notes: list[str]) -> GateRule:
    """The interleaved schedule's check of the group N (the flag, else PP; core_v0.15.3
    schedules.py:975-995): PP ≤ N ≤ m and m mod N either 0 or ≥ PP."""
    n = a.get(GROUP) or pp
    r = m % n if n else 0
    smallest = int(vp_group_size(pp, m)) if m >= pp else pp
    if n != smallest:
        notes.append(f"{GROUP} {n}: dtplan counts the activations in flight with the smallest "
                     f"valid group, {smallest}; a larger one holds more")
    return make_rule("megatron-vpp-microbatches", pp <= n <= m and (r == 0 or r >= pp),
                     f"{m} micro-batches, PP {pp}, group {n}",
                     "PP ≤ group ≤ micro-batches, remainder 0 or ≥ PP",
                     "The number of contiguous micro-batches in a virtual pipeline stage should "
                     "range in [PP, M], and M mod it be 0 or ≥ PP (schedules.py)",
                     key=GROUP if GROUP in a else "--global-batch-size")


def chunk_layers(stage: int, v: int, lighter_first: bool) -> list[int]:
    """A stage's layers over its v virtual stages as even as they go, the lighter ones at the
    pipeline's edge (the first stage's first chunk holds the embedding, the last's last the
    loss)."""
    q, r = divmod(stage, v)
    light, heavy = [q] * (v - r), [q + 1] * r
    return light + heavy if lighter_first else heavy + light


def layout_string(pp: int, v: int, first: int, middle: int, last: int, mtp: int = 0) -> str:
    """Megatron-Core's pipeline_model_parallel_layout for a split of `first`, `middle` (each
    other stage) and `last` layers: virtual stage k = chunk·PP + stage, 't' a decoder layer, 'E'
    the embedding (virtual stage 0), 'm' an MTP module and 'L' the loss (the last:
    PipelineParallelLayerLayout.validate_layer_layout wants the MTP modules there,
    core/transformer/pipeline_parallel_layer_layout.py:111-131)."""
    per_stage = [chunk_layers(first, v, True)] + [chunk_layers(middle, v, True)] * (pp - 2) + [
        chunk_layers(last, v, False)]
    stages = [per_stage[k % pp][k // pp] for k in range(pp * v)]
    return "|".join(("E" if k == 0 else "") + "t" * n + ("m" * mtp + "L" if k == pp * v - 1
                                                        else "") for k, n in enumerate(stages))


def parse_layout(text: str) -> list[str]:
    """The virtual stages of a layout string, each as its letters, as Megatron-Core's
    PipelineParallelLayerLayout.parse_str_to_list reads it: commas cosmetic, '(…)*n' then 'x*n'
    unrolled, '|' between stages."""
    flat = text.replace(",", "").replace(" ", "")
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    flat = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    return flat.split("|")


def _read_layout(text: str, layers: int, pp: int, where: str, rules: list
                 ) -> tuple[int, int | None, int | None]:
    """(v, first-stage layers, last-stage layers) of a layout string, with the rules dtplan
    reads it by: PP·v virtual stages, the decoder layers all there, equal middle stages."""
    stages = parse_layout(text)
    if not stages or any(set(s) - set("EtmL") for s in stages):
        raise InputError(f"{where}: {LAYOUT}", f"a layout of E, t, m and L per virtual stage "
                         f"separated by '|' (e.g. Et*4|(t*4|)*14tmL); got '{text}'")
    v = max(1, len(stages) // pp)
    rules.append(make_rule("megatron-layout-stages", len(stages) == pp * v,
                           f"{len(stages)} virtual stages", f"a multiple of PP {pp}",
                           "the layout's virtual stages fill every pipeline rank", key=LAYOUT))
    per = [sum(s.count("t") for s in stages[k::pp]) for k in range(pp)]
    rules.append(make_rule("megatron-layout-layers", sum(per) == layers,
                           f"{sum(per)} decoder layers in the layout", f"= {layers}",
                           "the layout places every decoder layer once", key=LAYOUT))
    middle = set(per[1:-1])
    rules.append(make_rule("megatron-layout-even-middle", len(middle) <= 1,
                           f"middle stages {per[1:-1]}", "equal",
                           "dtplan plans equal middle stages", key=LAYOUT))
    return v, per[0], per[-1]
