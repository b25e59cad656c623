"""Option groups several commands share (the model, hardware and batch; the layout knobs), and
what the job commands print around their document."""

from __future__ import annotations

import functools
import inspect
import textwrap
import typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from typer.models import ArgumentInfo

from planner.cli import options as o
from planner.cli.knob_options import KNOB_DEFAULTS, KNOB_OPTIONS
from planner.cli.root import PANELS
from planner.errors import InputError
from planner.io.numbers import parse_number
from planner.io.stdout import write_stdout
from planner.io.units import count
from planner.render import emit
from planner.render.terminal import width
from planner.resolve.job import Flags


def _panel_order(p: inspect.Parameter) -> int:
    """Where a parameter goes on the help screen: arguments first, then the panels in PANELS
    order (typer lists panels in order of their first option), unpanelled options last."""
    info = next((m for m in typing.get_args(p.annotation)[1:]), None)
    if isinstance(info, ArgumentInfo):
        return -1
    panel = getattr(info, "rich_help_panel", None)
    return PANELS.index(panel) if panel in PANELS else len(PANELS)


def _evaluated(fn: Callable[..., Any], annotation: Any) -> Any:
    """An annotation written as text (``from __future__ import annotations``) as its object."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, inspect.unwrap(fn).__globals__)  # the command module's own names


@dataclass(frozen=True)
class OptionGroup:
    """Options several commands share whose values a command's body takes as one (`into`): the
    model, hardware and batch as a `Flags`, the layout knobs as a dict, the memory margins as a
    MemoryBudget, built by `build` from the options' values. As a decorator it adds the options
    to the command's signature, where typer reads them, each in its help panel."""

    into: str
    options: tuple[tuple[str, Any, Any], ...]   # (parameter, Annotated declaration, default)
    build: Callable[..., Any]

    def varied(self, **changed: tuple[Any, Any]) -> OptionGroup:
        """The group with some options' (declaration, default) replaced by a command's variant."""
        return replace(self, options=tuple((n, *changed.get(n, (d, x))) for n, d, x in self.options))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        keyword = inspect.Parameter.KEYWORD_ONLY
        own = [p.replace(kind=keyword, annotation=_evaluated(fn, p.annotation))
               for p in sig.parameters.values() if p.name != self.into]
        added = [inspect.Parameter(name, keyword, default=default, annotation=declared)
                 for name, declared, default in self.options]
        params = sorted(own + added, key=_panel_order)   # stable: each panel keeps its order
        names = [name for name, _, _ in self.options]

        @functools.wraps(fn)
        def command(**kw: Any) -> Any:
            return fn(**{self.into: self.build(**{n: kw.pop(n) for n in names})}, **kw)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command


def _flags(gpu_memory_gb_old: Optional[float] = None, nic_gbit_old: Optional[float] = None,
           **typed: Any) -> Flags:
    """What the user typed about the job (an older spelling when the current one is not given)."""
    return Flags(**{**typed, "gpu_memory_gb": o.given(typed["gpu_memory_gb"], gpu_memory_gb_old),
                    "nic_gbit": o.given(typed["nic_gbit"], nic_gbit_old)})


# The model, hardware and batch options every job command takes, resolved by
# planner.resolve.job.Flags (its fields, in its order).
JOB = OptionGroup("job", (
    ("model", o.Model, None), ("model_config", o.ModelConfig, None), ("params", o.Params, None),
    ("layers", o.Layers, None), ("hidden", o.Hidden, None), ("heads", o.Heads, None),
    ("kv_heads", o.KvHeads, None), ("ffn", o.Ffn, None), ("vocab", o.Vocab, None),
    ("mlp", o.Mlp, None), ("experts", o.Experts, None),
    ("experts_per_token", o.ExpertsPerToken, None), ("expert_ffn", o.ExpertFfn, None),
    ("shared_experts", o.SharedExperts, None), ("dense_layers", o.DenseLayers, None),
    ("moe_every", o.MoeEvery, None), ("window", o.Window, None),
    ("global_every", o.GlobalEvery, None), ("dropout", o.Dropout, None),
    ("hardware", o.Hardware, None),
    ("hardware_file", o.HardwareFile, None), ("gpus_per_node", o.GpusPerNode, None),
    ("gpu_memory_gb", o.GpuMemoryGib, None), ("gpu_memory_gb_old", o.GpuMemoryGb, None),
    ("nic_gbit", o.NicGbit, None), ("nic_gbit_old", o.NicGbitOld, None),
    ("seq_len", o.SeqLen, None), ("global_batch", o.GlobalBatch, None),
    ("tokens_per_batch", o.TokensPerBatch, None), ("framework", o.Framework, None),
    ("nearest_preset", o.NearestPreset, False)), _flags)

# The layout knobs (dp is derived from --gpus), as typed ('auto' stays a string).
LAYOUT = OptionGroup("layout", tuple((n, KNOB_OPTIONS[n], KNOB_DEFAULTS[n]) for n in KNOB_OPTIONS),
                     lambda **knobs: knobs)


def optional_int(field: str, text: Optional[str]) -> Optional[int]:
    """'auto' → None; otherwise a whole number ≥ 1."""
    if text is None or text == "auto":
        return None
    x = parse_number(field, text)
    if x != int(x) or x < 1:
        raise InputError(field, f"must be a whole number ≥ 1 or 'auto', got {text!r}")
    return int(x)


def offer_line(offer: dict[str, Any]) -> str:
    """The one line that names the nearest preset (first in table and Markdown output)."""
    shape = (f"{offer['name']}, {count(offer['params'])} params, L={offer['layers']} "
             f"h={offer['hidden']}")
    if offer["planned"]:
        return f"Planning the nearest real preset to --params: {offer['preset']} ({shape})."
    return (f"Nearest real preset: {offer['preset']} ({shape}); plan it with {offer['use']} "
            "or --nearest-preset.")


def emit_job(doc: Any, fmt: str, job: Flags) -> None:
    """emit() with the --params offer: one line before the document (table, Markdown) and a
    `nearest_preset` field in JSON."""
    offer = job.offer()
    if offer is not None:
        doc.data = {"nearest_preset": offer, **doc.data}
        if fmt == "markdown":
            write_stdout(offer_line(offer) + "\n\n")
        elif fmt != "json":   # the terminal's width, as the tables below it
            write_stdout(textwrap.fill(offer_line(offer), width()) + "\n")
    emit(doc, fmt)
