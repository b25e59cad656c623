"""The catalogues: `dtplan models` (the model presets) and `dtplan profiles` (the hardware
profiles, or one of them with `profiles show`)."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli import options as o
from planner.cli.options import Format
from planner.cli.root import EXIT_OK, Group, app, command, examples
from planner.errors import InputError


@command("models", "dtplan models", "dtplan models --format json")
def models_cmd(fmt: o.Fmt = Format.table) -> int:
    """List the model presets with their exact parameter counts."""
    from planner.specs.presets import PRESETS
    from planner.specs.records import dump
    from planner.render import Document, Table, emit
    from planner.io.units import count

    rows, data = [], []
    for name, m in PRESETS.items():
        total, active = m.param_count(), m.active_param_count()
        rows.append([name, count(total), count(active) if m.is_moe else "", str(m.layers),
                     str(m.hidden), f"{m.heads}/{m.kv_heads}", str(m.ffn), m.mlp, str(m.vocab)])
        data.append({**dump(m), "preset": name, "params": total, "active_params": active})
    emit(Document(command="models", title="Model presets (use with --model NAME)",
                  tables=[Table("Presets", ["name", "params", "active", "layers", "hidden",
                                            "heads/kv", "ffn", "mlp", "vocab"], rows)],
                  data={"models": data}), fmt.value)
    return EXIT_OK


profiles_app = typer.Typer(cls=Group, help="Hardware profiles: list them, or show one.",
                           invoke_without_command=True,
                           epilog=examples("dtplan profiles", "dtplan profiles show h100"))
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback()
def profiles_list(ctx: typer.Context, fmt: o.Fmt = Format.table) -> int:
    """List the hardware profiles."""
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    from planner.specs.hardware import DEFAULT_PROFILE
    from planner.specs.hardware_toml import list_profiles
    from planner.specs.records import dump
    from planner.render import Document, Table, emit
    from planner.io.units import capacity

    rows, data, aliases = [], [], []
    for p in list_profiles():
        rows.append([p.name + (" (default)" if p.name == DEFAULT_PROFILE else ""), p.gpu.name,
                     capacity(p.gpu.memory_bytes), f"{p.gpu.peak_flops['bf16'] / 1e12:.0f}",
                     str(p.scale_up.gpus_per_domain),
                     f"{p.scale_up.bandwidth_bytes_per_s / 1e9:.0f}",
                     f"{p.scale_out.nic_bytes_per_s * 8 / 1e9:.0f}"])
        aliases.append(f"{p.name}: {', '.join(p.aliases)}")
        data.append(dump(p))
    emit(Document(command="profiles", title="Hardware profiles (use with --hardware NAME)",
                  tables=[Table("Profiles", ["name", "GPU", "memory", "bf16 TFLOP/s", "NVLink domain",
                                             "NVLink GB/s", "NIC Gb/s"], rows)],
                  notes=["Aliases (also accepted by --hardware): " + "; ".join(aliases)],
                  data={"profiles": data}), fmt.value)
    return EXIT_OK


@command("show", group=profiles_app)
def profiles_show(name: Annotated[str, typer.Argument(help="profile name or alias")],
                  fmt: o.Fmt = Format.table) -> int:
    """Print one hardware profile with every value."""
    from planner.specs.hardware_toml import load_profile
    from planner.specs.records import dump
    from planner.render import Document, Table, emit
    from planner.io.units import capacity

    try:
        p = load_profile(name)
    except InputError as e:  # load_profile names --hardware; here the profile is the argument
        raise InputError("NAME", e.message) from None
    rows = []
    for section in ("gpu", "scale_up", "scale_out", "host", "storage", "efficiency"):
        for k, x in dump(getattr(p, section)).items():
            rows.append([f"{section}.{k}", ", ".join(f"{a}={b / 1e12:g}T" for a, b in x.items())
                         if isinstance(x, dict) else f"{x:g}" if isinstance(x, float) else str(x)])
            if k.endswith("memory_bytes") and isinstance(x, (int, float)):
                rows[-1][1] += f" = {capacity(x)}"
    emit(Document(command="profiles show", title=f"{p.name}: {p.description}",
                  tables=[Table("Values (SI units)", ["key", "value"], rows)],
                  notes=[p.notes] if p.notes else [], data=dump(p)), fmt.value)
    return EXIT_OK
