"""A parallel layout and the topology rules a plan must obey.

``Layout`` is declared in ``specs.knobs`` (each of its fields is a layout knob: the CLI options,
the plan schema's LayoutSection and the Candidates columns are built from them); import it from
there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from planner.engine import ranks
from planner.errors import InputError, named
from planner.io import validate as v
from planner.specs.knobs import Layout

Status = Literal["pass", "fail", "warn"]
Link = Literal["nvlink", "network", "none"]   # what a group's traffic crosses


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One checked rule: pass / fail / warn with the value measured and the limit."""

    name: str
    status: Status
    measured: str = ""
    limit: str = ""
    message: str = ""


def topology_rules(layout: Layout, gpus: int, gpus_per_domain: int) -> list[Rule]:
    """World size = DP×TP×PP×CP; TP inside one NVLink domain and tiling it (the same predicate
    the search applies to every candidate); CP may cross the network."""
    inner = layout.tp
    return [Rule(name="world-size", status="pass" if layout.world == gpus else "fail",
                 measured=f"{layout.dp}×{layout.tp}×{layout.pp}×{layout.cp} = {layout.world}",
                 limit=f"= {gpus} GPUs", message="DP × TP × PP × CP must equal the GPU count"),
            Rule(name="tp-in-nvlink-domain",
                 status="pass" if ranks.inside_domain(inner, gpus_per_domain) else "fail",
                 measured=f"TP = {inner}", limit=f"divides {gpus_per_domain} (NVLink domain)",
                 message="TP's all-reduces run every layer; they must stay on NVLink (CP's ring "
                         "may cross the network, priced on the link it crosses)")]


@dataclass(frozen=True, kw_only=True)
class GroupInfo:
    axis: str
    size: int
    count: int
    max_nodes_spanned: int
    link: Link
    example: list[int]


# `--show-groups` lists at most this many groups per axis and this many ranks per group (a
# 10-million-GPU layout has 1.25 million TP groups and DP groups of 312,500 ranks); the
# counts and the nodes spanned always cover every group.
LISTED_GROUPS = 64
LISTED_RANKS = 1024


def rank_groups(layout: Layout, gpus_per_node: int, *, with_members: bool = False,
                limit: int = LISTED_GROUPS) -> tuple[list[GroupInfo], dict[str, list[list[int]]]]:
    """Each axis's groups in Megatron order and the link its traffic crosses."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    infos, members = [], {}
    for axis in ranks.AXES:
        size = sizes[axis]
        spanned = ranks.max_nodes_spanned(sizes, axis, gpus_per_node)
        link: Link = "none" if size == 1 else ("nvlink" if spanned == 1 else "network")
        infos.append(GroupInfo(axis=axis, size=size, count=ranks.group_count(sizes, axis),
                               max_nodes_spanned=spanned, link=link,
                               example=ranks.group_ranks(sizes, axis, limit=limit)[0].tolist()))
        if with_members:
            members[axis] = ranks.group_ranks(sizes, axis, count=limit, limit=LISTED_RANKS).tolist()
    return infos, members


@dataclass(frozen=True, kw_only=True)
class LayoutResult:
    layout: Layout
    gpus: int
    gpus_per_node: int
    replica_gpus: int
    rules: list[Rule]
    groups: list[GroupInfo]
    # the schema states the default ({}), as a literal default would
    members: Annotated[dict[str, list[list[int]]], Field(json_schema_extra={"default": {}})] = \
        field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.rules)


def plan_layout(gpus: int, gpus_per_node: int, tp: int = 1, pp: int = 1, cp: int = 1,
                *, show_groups: bool = False) -> LayoutResult:
    """DP = GPUs ÷ (TP·PP·CP); check the topology rules and derive the rank groups."""
    gpus = v.positive_int("gpus", gpus)
    g = v.positive_int("gpus_per_node", gpus_per_node)
    tp, pp, cp = (v.positive_int(f, x) for f, x in (("tp", tp), ("pp", pp), ("cp", cp)))
    model_gpus = tp * pp * cp
    if gpus % model_gpus:
        raise InputError(named("gpus"), f"{gpus} is not divisible by TP×PP×CP = {model_gpus}")
    layout = Layout(tp=tp, pp=pp, cp=cp, dp=gpus // model_gpus)
    rules = topology_rules(layout, gpus, g)
    groups, members = rank_groups(layout, g, with_members=show_groups)
    return LayoutResult(layout=layout, gpus=gpus, gpus_per_node=g, replica_gpus=model_gpus,
                        rules=rules, groups=groups, members=members)
