"""How the CLI names the library's parameters in an error: as the option the user typed, in the
option's unit. typer knows each option's flag (its parameter `gpus` is `--gpus`); where the
library's parameter has another name than the CLI's (most often another unit: the library's
`cost_s` is `--cost-min`), LIBRARY_NAMES says which, once. Every command runs under this naming
(cli.root.Command), so a library check's message reads as the user wrote the value."""

from __future__ import annotations

from typing import Any, Iterable

from typer.core import TyperOption

from planner.errors import Name, Naming

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0

# library parameter → the CLI's parameter for it, with the option's unit (base units per unit
# typed, and the unit said after a range)
LIBRARY_NAMES: dict[str, Name] = {
    "accumulation": Name("accum"),
    "bandwidth_bytes_per_s": Name("bandwidth", 1e9, "GB/s"),
    "baseline_s": Name("baseline_ms", 1e-3),
    "cost_s": Name("cost_min", MINUTE),
    "data_parallel": Name("dp"),
    "gpu_mtbf_s": Name("gpu_mtbf_hours", HOUR),
    "intervals_s": Name("intervals", MINUTE),
    "job_mtbf_s": Name("job_mtbf_hours", HOUR),
    "latency_s": Name("latency_us", 1e-6, "µs"),
    "margin_fraction": Name("margin"),
    "measured_s": Name("measured_ms", 1e-3),
    "message_bytes": Name("message_gb", 1e9, "GB"),
    "mtbf_s": Name("job_mtbf_hours", HOUR),
    "nic_gbit_per_gpu": Name("nic_gbit"),
    "node_mtbf_s": Name("node_mtbf_hours", HOUR),
    "period_s": Name("over_days", DAY),
    "price_per_gpu_hour": Name("gpu_hour_cost"),
    "restart_s": Name("restart_min", MINUTE),
    "shard_degree": Name("shard_group"),
    "slowdown": Name("straggler"),
    "storage_read_bytes_per_s": Name("read_gbs", 1e9),
    "storage_write_bytes_per_s": Name("storage_gbs", 1e9),
    "to_gpus": Name("gpus"),
    "tokens": Name("train_tokens"),
    "total_s": Name("restart_min", MINUTE),   # restart_cost's total: --restart-min
    "zero_stage": Name("zero"),
}


def option_naming(params: Iterable[Any]) -> Naming:
    """The naming of one command: a library parameter as the flag of its option (through
    LIBRARY_NAMES), in the option's unit; a parameter no option of this command gave keeps its
    own name, and a label that is no parameter (``--gpus``) stays as it is."""
    flags = {p.name: next(o for o in p.opts if o.startswith("--")) for p in params
             if isinstance(p, TyperOption) and p.name}

    def name(param: str) -> Name:
        cli = LIBRARY_NAMES.get(param, Name(param))
        flag = flags.get(cli.label)
        return cli._replace(label=flag) if flag else Name(param)
    return name
