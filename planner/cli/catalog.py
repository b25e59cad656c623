"""The catalogues: `dtplan models` (the model presets) and `dtplan profiles` (the hardware
profiles, or one of them with `profiles show`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from planner.cli import options as o
from planner.cli.options import Format
from planner.cli.root import EXIT_OK, Group, app, command, examples
from planner.errors import InputError

if TYPE_CHECKING:  # annotations only: the model records load pydantic, which --help never needs
    from planner.specs.model import ModelSpec


@command("models", "dtplan models", "dtplan models --model-config config.json",
         "dtplan models --format json")
def models_cmd(model_config: o.ModelConfig = None, fmt: o.Fmt = Format.table) -> int:
    """List the model presets with their exact parameter counts, or with --model-config show
    one Hugging Face config's shape and counts (total, active, MTP, vision) as dtplan reads it."""
    from planner.specs.presets import PRESETS
    from planner.specs.records import dump
    from planner.render import Document, Table, emit
    from planner.io.units import count

    def entry(name: str, m: ModelSpec) -> dict[str, object]:
        return {**dump(m), "preset": name, "params": m.param_count(),
                "active_params": m.active_param_count(), "mtp_params": m.mtp_param_count(),
                "moe_layers": m.moe_layers}

    if model_config is not None:
        from planner.specs.hf_config import load_hf_config
        m = load_hf_config(model_config, option="--model-config")
        rows = [[k, v] for k, v in _shape_rows(m)]
        emit(Document(command="models", title=f"{m.name or model_config}: shape and counts",
                      tables=[Table("Model", ["field", "value"], rows)],
                      notes=m.source.split("; "),
                      data={"models": [entry(m.name or str(model_config), m)]}), fmt.value)
        return EXIT_OK
    rows, data = [], []
    for name, m in PRESETS.items():
        total, active = m.param_count(), m.active_param_count()
        rows.append([name, count(total), count(active) if m.is_moe else "", str(m.layers),
                     str(m.hidden), f"{m.heads}/{m.kv_heads}", str(m.ffn), m.mlp, str(m.vocab)])
        data.append(entry(name, m))
    emit(Document(command="models", title="Model presets (use with --model NAME)",
                  tables=[Table("Presets", ["name", "params", "active", "layers", "hidden",
                                            "heads/kv", "ffn", "mlp", "vocab"], rows)],
                  data={"models": data}), fmt.value)
    return EXIT_OK


def _shape_rows(m: ModelSpec) -> list[tuple[str, str]]:
    """The shape and counts of one model, a row per item (exact integers with separators)."""
    rows = [("parameters", f"{m.param_count():,}"),
            ("active per token", f"{m.active_param_count():,}"),
            ("layers", f"{m.layers} ({m.dense_layer_count} dense, {m.moe_layers} MoE)"),
            ("hidden", str(m.hidden)),
            ("heads / KV heads / head dim", f"{m.heads} / {m.kv_heads} / {m.head_dim}"),
            ("dense MLP width", f"{m.ffn} ({m.mlp})"), ("vocab", str(m.vocab)),
            ("embeddings", "tied" if m.tied_embeddings else "untied")]
    if m.is_moe:
        shared = (f", {m.shared_experts} shared of {m.shared_expert_ffn or m.expert_width}"
                  if m.shared_experts else "")
        rows.append(("experts", f"{m.experts} of width {m.expert_width}, top-"
                                f"{m.experts_per_token}{shared}; routed "
                                f"{m.routed_expert_params():,}"))
    if m.is_mla:
        rows.append(("MLA", f"q rank {m.q_lora_rank or 'none'}, kv rank {m.kv_lora_rank}, "
                            f"qk {m.qk_nope_dim}+{m.qk_rope_dim} rope, v "
                            f"{m.value_dim}"))
    if m.window is not None:
        every = f", global every {m.global_every}" if m.global_every else ", every layer"
        rows.append(("attention window", f"{m.window_kind} {m.window}{every}"))
    if m.mtp_layers:
        rows.append(("MTP modules", f"{m.mtp_layers}: {m.mtp_param_count():,} (not in the total)"))
    if m.vision_params:
        rows.append(("vision tower", f"{m.vision_params:,} (not in the total, not planned)"))
    return rows


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
            rows.append([f"{section}.{k}", ", ".join(  # only peak_flops is in FLOP/s
                f"{a}={b / 1e12:g}T" if k == "peak_flops" else f"{a}={b:g}" for a, b in x.items())
                         if isinstance(x, dict) else ", ".join(map(str, x))
                         if isinstance(x, (tuple, list)) else f"{x:g}"
                         if isinstance(x, float) else str(x)])
            if k.endswith("memory_bytes") and isinstance(x, (int, float)):
                rows[-1][1] += f" = {capacity(x)}"
    emit(Document(command="profiles show", title=f"{p.name}: {p.description}",
                  tables=[Table("Values (SI units)", ["key", "value"], rows)],
                  notes=[p.notes] if p.notes else [], data=dump(p)), fmt.value)
    return EXIT_OK
