"""The help screens: options grouped in panels, metavars that say what to type (N, PATH, LIST),
and two or three examples under every command. Applied once to the built click command, by
option name, so every command that shares an option shows it the same way."""

from __future__ import annotations

import typing
from typing import Any

from planner.cli.options import ALIASES

# Panel → the option (parameter) names it holds; the rest stay under "Options".
PANELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("Model", frozenset({"model", "model_config", "params", "layers", "hidden", "heads",
                         "kv_heads", "ffn", "vocab", "mlp", "dropout", "nearest_preset"})),
    ("Hardware and GPUs", frozenset({"gpus", "hardware", "hardware_file", "gpus_per_node",
                                     "gpu_memory_gb", "nic_gbit"})),
    ("Batch", frozenset({"seq_len", "global_batch", "tokens_per_batch", "micro_batch", "accum"})),
    ("Layout", frozenset({"tp", "pp", "cp", "ep", "zero", "shard_group", "schedule", "chunks",
                          "sp", "recompute", "recompute_layers", "offload_optimizer",
                          "offload_params", "precision", "optimizer", "allow_offload", "engine",
                          "framework"})),
    ("Search", frozenset({"objective", "top", "from_plan", "batch_tolerance", "show_all"})),
    ("Memory margins", frozenset({"context_gb", "comm_buffer_gb", "fragmentation", "margin"})),
    ("Training, checkpoints and failures", frozenset({
        "train_tokens", "gpu_hour_cost", "gpu_mtbf_hours", "job_mtbf_hours", "node_mtbf_hours",
        "async_ckpt", "cost_min", "mtbf_hours", "intervals", "restart_min", "storage_gbs",
        "read_gbs", "interruptions"})),
    ("Output", frozenset({"fmt", "gib", "wide", "output", "force", "html", "charts", "strict"})),
)

METAVARS = {
    "model": "NAME", "hardware": "NAME", "model_config": "PATH", "hardware_file": "PATH",
    "from_plan": "PATH", "output": "PATH", "params": "N", "train_tokens": "N",
    "tokens_per_batch": "N", "gpu_memory_gb": "GIB", "nic_gbit": "GBIT", "gpu_hour_cost": "COST",
    "precision": "RECIPE", "optimizer": "NAME", "recompute": "MODE", "schedule": "NAME",
    "objective": "GOAL", "mlp": "KIND", "framework": "NAME|PATH", "offload_optimizer": "WHERE", "offload_params": "WHERE",
    "intervals": "LIST", "micro_batches": "LIST",
}

EXAMPLES = {
    "fit": ["dtplan fit --model llama3-70b --gpus 256",
            "dtplan fit --model-config ./config.json --gpus 64..1024 --seq-len 8192",
            "dtplan fit --from-plan plan.yaml --gpus 240      # lost two nodes"],
    "estimate": ["dtplan estimate --model llama3-8b --gpus 8",
                 "dtplan estimate --model llama3-70b --gpus 256 --tp 8 --pp 4 --zero 1 "
                 "--train-tokens 15e12"],
    "memory": ["dtplan memory --params 7e9 --gpus 8 --zero 2",
               "dtplan memory --model llama3-70b --gpus 64 --tp 8 --pp 2 --recompute selective"],
    "check": ["dtplan check plan.yaml",
              "dtplan check --format github plans/*.yaml",
              "dtplan check ds_config.json --engine deepspeed --gpus 64 --model llama3-8b"],
    "report": ["dtplan report plan.yaml -o review.html",
               "dtplan report --model llama3-8b --gpus 64 -o review.md"],
    "export": ["dtplan export plan.yaml --to deepspeed -o ds_config.json",
               "dtplan export --model llama3-8b --gpus 64 --to torchtitan -o train.toml"],
    "schema": ["dtplan schema plan > plan.schema.json", "dtplan schema fit"],
    "checkpoint": ["dtplan checkpoint --cost-min 3 --job-mtbf-hours 50",
                   "dtplan checkpoint --model llama3-70b --gpus 1024"],
    "comm": ["dtplan comm --message-gb 14 --gpus 8,64 --bandwidth 200",
             "dtplan comm --message-gb 14 --gpus 8,64 --hardware h100"],
    "bubble": ["dtplan bubble --stages 4 --micro-batches 8",
               "dtplan bubble --stages 8 --micro-batches 8,32 --schedule interleaved --chunks 2"],
    "batch": ["dtplan batch --micro-batch 4 --accum 8 --dp 8"],
    "scaling": ["dtplan scaling --baseline-ms 800 --measured-ms 140 --gpus 8"],
    "layout": ["dtplan layout --gpus 256 --tp 8 --pp 4"],
    "calibrate": ["dtplan calibrate", "dtplan calibrate --format json"],
    "completion": ["dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan",
                   "dtplan completion zsh > \"${fpath[1]}/_dtplan\""],
    "models": ["dtplan models", "dtplan models --format json"],
    "profiles": ["dtplan profiles", "dtplan profiles show h100"],
    "compare": ["dtplan compare trace_rank0.json train.log --plan plan.yaml"],
}

_BY_TYPE = {int: "N", float: "NUM", str: "TEXT"}


def _metavar(p: Any) -> str | None:
    if p.name in METAVARS:
        return METAVARS[p.name]
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    if typing.get_origin(ann) is typing.Union:           # Optional[X]
        ann = next((a for a in typing.get_args(ann) if a is not type(None)), ann)
    if typing.get_origin(ann) in (list, typing.List):
        return "N|LIST"
    if ann is bool:
        return ""                                         # a flag takes no value
    return _BY_TYPE.get(ann)


def hide_aliases(param: Any) -> None:
    """On a help screen: list an option under its one name, while the parser still accepts the
    older spellings (`dtplan checkpoint --mtbf-hours 5 --help` still parses)."""
    full = list(param.opts)
    shown = [x for x in full if x not in ALIASES]
    if shown == full:
        return
    register = param.add_to_parser

    def add_to_parser(parser: Any, ctx: Any) -> Any:
        param.opts = full
        try:
            return register(parser, ctx)
        finally:
            param.opts = shown
    param.opts, param.add_to_parser = shown, add_to_parser


def polish(command: Any, name: str = "") -> Any:
    """Panels, metavars and examples on a click command and its subcommands (in place)."""
    for sub_name, sub in getattr(command, "commands", {}).items():
        polish(sub, sub_name)
    order = {panel: i for i, (panel, _) in enumerate(PANELS)}
    for p in getattr(command, "params", []):
        if getattr(p, "param_type_name", "") == "argument":
            # the name column already says FILE / SHELL / [PLAN]; "..." marks a repeatable one
            p.display_type_rich = (lambda ctx, many=p.nargs != 1: "..." if many else None)
            continue
        if getattr(p, "param_type_name", "") != "option":
            continue
        hide_aliases(p)   # older spellings still parse; help lists one name per option
        if p.metavar is None:
            mv = _metavar(p)
            if mv is not None:
                p.metavar = mv
        if getattr(p, "rich_help_panel", None) is None:
            p.rich_help_panel = next((panel for panel, names in PANELS if p.name in names), None)
    if hasattr(command, "params"):  # panels in PANELS order; arguments keep their places first
        args = [p for p in command.params if getattr(p, "param_type_name", "") != "option"]
        opts = [p for p in command.params if getattr(p, "param_type_name", "") == "option"]
        command.params = args + sorted(opts, key=lambda p: order.get(p.rich_help_panel, len(order)))
    if hasattr(command, "get_help_option"):   # click builds --help per call: style it there
        build = command.get_help_option

        def help_option(ctx: Any, _build: Any = build) -> Any:
            opt = _build(ctx)
            if opt is not None:
                opt.metavar, opt.rich_help_panel = "", ("Output" if name else None)
            return opt
        command.get_help_option = help_option
    if name in EXAMPLES and not getattr(command, "epilog", None):
        command.epilog = "Examples:\n\n" + "\n\n".join(f"  {x}" for x in EXAMPLES[name])
    return command
