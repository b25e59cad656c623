"""What a framework profile states, as the lines `estimate` and `fit` print: its settings
(describe) and what it runs (capabilities)."""

from __future__ import annotations

from pathlib import Path

from planner.specs.framework import DEFAULT_FRAMEWORK, SCHEDULES, FrameworkProfile


def describe(fw: FrameworkProfile) -> str:
    """One line for the assumptions: which profile, where from, and the default. What the
    framework runs (its selective recompute mode among it) is capabilities()'s line."""
    t = fw.time
    where = fw.source_file if fw.source_file and not fw.source_file.startswith(
        str(Path(__file__).resolve().parents[2])) else f"framework_profiles/{fw.name}.toml"
    default = " (the default)" if fw.name == DEFAULT_FRAMEWORK else f" (default {DEFAULT_FRAMEWORK})"
    return (f"Framework {fw.name}{default}, {where}: gradients reduced in {t.reduce_dtype}, "
            f"sharded gathers {t.sharded_gather} in {t.param_gather_dtype}, prefetch depth "
            f"{t.prefetch_depth}, {t.kernel_class} kernels, {t.attention_kernel} attention"
            + (", TP communication overlapped (userbuffers)" if t.tp_comm_overlap else ""))


def capabilities(fw: FrameworkProfile) -> str:
    """What the framework runs, as its profile states it (pipeline_schedules, max_zero_under_pp,
    context_parallel, expert_parallel, expert_tensor_parallel, ep_ranks,
    moe_zero3_needs_tp1, moe_needs_sequence_parallel, selective_recompute; each key cites the
    framework's source in the profile): the search offers nothing else, `estimate` refuses
    the rest."""
    t = fw.time
    if t.pipeline_schedules:
        missing = [s for s in SCHEDULES if s not in t.pipeline_schedules]
        pp = (f"pipeline schedules {', '.join(t.pipeline_schedules)}"
              + (f" (not {', '.join(missing)})" if missing else "")
              + f", ZeRO ≤ {t.max_zero_under_pp} with PP")
    else:
        pp = "no pipeline parallel"
    if len(t.zero_stages) < 4:
        pp += f"; ZeRO stages {', '.join(map(str, t.zero_stages))} only"
    cp = "ring context parallel" if t.context_parallel else "no ring context parallel"
    ep = "no expert parallel (experts replicated)"
    if t.expert_parallel:
        ep = ("expert parallel" + {"deepep": " over DeepEP", "allgather": " over an all-gather "
                                   "dispatcher"}.get(t.ep_dispatcher, "")
              + " with fp8 dispatch" * t.ep_fp8_dispatch)
    if t.expert_parallel and t.ep_overlap:
        ep += (" (all-to-all hidden in paired chunks: "
               + ", ".join("without PP" if s == "no-pp" else s for s in t.ep_overlap) + ")")
    if t.expert_parallel:
        notes = (["no expert TP: experts whole under EP"] * (not t.expert_tensor_parallel)
                 + ["EP within the shard group × TP"] * (t.ep_ranks == "shard-group-tp")
                 + ["an MoE under ZeRO-3 without TP only"] * t.moe_zero3_needs_tp1)
        ep += f" ({'; '.join(notes)})" if notes else ""
    if t.moe_needs_sequence_parallel:
        ep += "; MoE under TP with sequence parallel only"
    sel = ("no selective recompute (none or full only)" if not t.has_selective
           else f"selective recompute ({t.selective_recompute})")
    return (f"Framework {fw.name} runs (its profile, each key citing the framework's source): "
            f"{pp}; {cp}; {ep}; {sel}. The search offers nothing else.")
