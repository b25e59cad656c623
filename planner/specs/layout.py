"""A parallel layout (pydantic) and the topology rules a plan must obey."""


from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import validate as v
from ..engine import ranks
from ..errors import InputError

Schedule = Literal["1f1b", "gpipe", "interleaved"]
Recompute = Literal["none", "selective", "full"]
Offload = Literal["none", "cpu", "nvme"]


class Layout(BaseModel):
    """How one job is split and run. Degrees multiply to the world size: DP × TP × PP × CP
    (EP borrows from DP, as in Megatron-LM and torchtitan)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    zero: int = Field(0, ge=0, le=3)
    shard_group: int | None = Field(None, ge=1, description="hybrid sharding (HSDP / ZeRO++ hpZ): "
                                    "ZeRO shards over this many DP ranks; None = the whole DP group")
    micro_batch: int = Field(1, ge=1)
    schedule: Schedule = "1f1b"
    chunks: int = Field(1, ge=1, description="interleaved model chunks per device (v)")
    sp: bool | None = Field(None, description="sequence parallel; None = on whenever TP > 1")
    recompute: Recompute = "none"
    recompute_layers: int | None = Field(None, ge=0, description="full recompute on this many "
                                         "layers per stage; None = all")
    offload_optimizer: Offload = "none"
    offload_params: Offload = "none"
    precision: str = "mixed"
    optimizer: str = "adam"

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else (self.sp and self.tp > 1)

    @property
    def shard_degree(self) -> int:
        return self.shard_group or self.dp


class Rule(BaseModel):
    """One checked rule: pass / fail / warn with the value measured and the limit."""

    name: str
    status: Literal["pass", "fail", "warn"]
    measured: str = ""
    limit: str = ""
    message: str = ""


def topology_rules(layout: Layout, gpus: int, gpus_per_domain: int) -> list[Rule]:
    """World size = DP×TP×PP×CP; TP×CP inside one NVLink domain and tiling it (the same
    predicate the search applies to every candidate)."""
    inner = layout.tp * layout.cp
    return [Rule(name="world-size", status="pass" if layout.world == gpus else "fail",
                 measured=f"{layout.dp}×{layout.tp}×{layout.pp}×{layout.cp} = {layout.world}",
                 limit=f"= {gpus} GPUs", message="DP × TP × PP × CP must equal the GPU count"),
            Rule(name="tp-in-nvlink-domain",
                 status="pass" if ranks.inside_domain(inner, gpus_per_domain) else "fail",
                 measured=f"TP×CP = {inner}", limit=f"divides {gpus_per_domain} (NVLink domain)",
                 message="TP (and CP) traffic runs every layer; it must stay on NVLink")]


class GroupInfo(BaseModel):
    axis: str
    size: int
    count: int
    max_nodes_spanned: int
    link: Literal["nvlink", "network", "none"]
    example: list[int]


def rank_groups(layout: Layout, gpus_per_node: int, *, with_members: bool = False,
                limit: int = 64) -> tuple[list[GroupInfo], dict[str, list[list[int]]]]:
    """Each axis's groups in Megatron order and the link its traffic crosses."""
    grid = ranks.rank_grid(layout.tp, layout.cp, layout.dp, layout.pp)
    infos, members = [], {}
    for axis in ranks.AXES:
        groups = ranks.axis_groups(grid, axis)
        size = groups.shape[1]
        spanned = int(ranks.nodes_spanned(groups, gpus_per_node).max())
        link = "none" if size == 1 else ("nvlink" if spanned == 1 else "network")
        infos.append(GroupInfo(axis=axis, size=size, count=groups.shape[0],
                               max_nodes_spanned=spanned, link=link,
                               example=groups[0].tolist()[:limit]))
        if with_members:
            members[axis] = groups[:limit].tolist()
    return infos, members


class LayoutResult(BaseModel):
    layout: Layout
    gpus: int
    gpus_per_node: int
    replica_gpus: int
    rules: list[Rule]
    groups: list[GroupInfo]
    members: dict[str, list[list[int]]] = {}

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.rules)


def plan_layout(gpus: int, gpus_per_node: int, tp: int = 1, pp: int = 1, cp: int = 1,
                *, show_groups: bool = False) -> LayoutResult:
    """DP = GPUs ÷ (TP·PP·CP); check the topology rules and derive the rank groups."""
    gpus = v.positive_int("--gpus", gpus)
    g = v.positive_int("--gpus-per-node", gpus_per_node)
    tp, pp, cp = (v.positive_int(f, x) for f, x in (("--tp", tp), ("--pp", pp), ("--cp", cp)))
    model_gpus = tp * pp * cp
    if gpus % model_gpus:
        raise InputError("--gpus", f"{gpus} is not divisible by TP×PP×CP = {model_gpus}")
    layout = Layout(tp=tp, pp=pp, cp=cp, dp=gpus // model_gpus)
    rules = topology_rules(layout, gpus, g)
    groups, members = rank_groups(layout, g, with_members=show_groups)
    return LayoutResult(layout=layout, gpus=gpus, gpus_per_node=g, replica_gpus=model_gpus,
                        rules=rules, groups=groups, members=members)
