"""Options shared by the commands that take a model, hardware, a layout and a batch."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields
from typing import Any, Optional

from ..errors import InputError
from ..specs.layout import KNOBS
from .options import SHARED, opt, parse_number


def model_from_options(model, model_config, params, layers, hidden, heads, kv_heads, ffn, vocab,
                       mlp, dropout=None):
    from ..resolve import resolve_model
    return resolve_model(model=model, model_config=model_config,
                         params=parse_number("--params", params) if params is not None else None,
                         layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, mlp=mlp, dropout=dropout)


def hardware_from_options(hardware, hardware_file, gpus_per_node, gpu_memory_gb, nic_gbit):
    from ..resolve import resolve_hardware
    return resolve_hardware(hardware=hardware, hardware_file=hardware_file,
                            gpus_per_node=gpus_per_node, gpu_memory_gb=gpu_memory_gb,
                            nic_gbit_per_gpu=nic_gbit)


def batch_from_options(seq_len, global_batch, tokens_per_batch,
                       gpus: Optional[int] = None) -> tuple[int, int, str]:
    from ..resolve import resolve_batch
    tpb = parse_number("--tokens-per-batch", tokens_per_batch) if tokens_per_batch else None
    return resolve_batch(seq_len=seq_len, global_batch=global_batch, tokens_per_batch=tpb,
                         gpus=gpus)


def optional_int(field: str, text: Optional[str]) -> Optional[int]:
    """'auto' → None; otherwise a whole number ≥ 1."""
    if text is None or text == "auto":
        return None
    x = parse_number(field, text)
    if x != int(x) or x < 1:
        raise InputError(field, f"must be a whole number ≥ 1 or 'auto', got {text!r}")
    return int(x)


# The model, hardware and batch options every job command shares, in one place: the commands
# take a single `job: Job` and the decorator below adds these options to their signature.
JOB_OPTIONS = tuple((name, ann, opt(name)) for name, ann in (
    ("model", Optional[str]), ("model_config", Optional[str]), ("params", Optional[str]),
    ("layers", Optional[int]), ("hidden", Optional[int]), ("heads", Optional[int]),
    ("kv_heads", Optional[int]), ("ffn", Optional[int]), ("vocab", Optional[int]),
    ("mlp", Optional[str]), ("dropout", Optional[bool]), ("hardware", Optional[str]),
    ("hardware_file", Optional[str]), ("gpus_per_node", Optional[int]),
    ("gpu_memory_gb", Optional[float]), ("nic_gbit", Optional[float]),
    ("seq_len", Optional[int]), ("global_batch", Optional[int]),
    ("tokens_per_batch", Optional[str]), ("framework", Optional[str]),
    ("nearest_preset", bool)))


@dataclass
class Job:
    """What the user said about the model, the hardware and the batch."""

    model: Optional[str] = None
    model_config: Optional[str] = None
    params: Optional[str] = None
    layers: Optional[int] = None
    hidden: Optional[int] = None
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    ffn: Optional[int] = None
    vocab: Optional[int] = None
    mlp: Optional[str] = None
    dropout: Optional[bool] = None
    hardware: Optional[str] = None
    hardware_file: Optional[str] = None
    gpus_per_node: Optional[int] = None
    gpu_memory_gb: Optional[float] = None
    nic_gbit: Optional[float] = None
    seq_len: Optional[int] = None
    global_batch: Optional[int] = None
    tokens_per_batch: Optional[str] = None
    framework: Optional[str] = None
    nearest_preset: bool = False

    def __post_init__(self) -> None:
        if self.framework is not None:   # select it now: every estimate below follows it
            from ..specs.framework import use_framework
            use_framework(self.framework)

    def model_spec(self):
        if self.nearest_preset:   # --params N --nearest-preset: the real model nearest N
            name = self.offer()["preset"]
            return model_from_options(name, self.model_config, None, self.layers, self.hidden,
                                      self.heads, self.kv_heads, self.ffn, self.vocab, self.mlp,
                                      self.dropout)
        return model_from_options(self.model, self.model_config, self.params, self.layers,
                                  self.hidden, self.heads, self.kv_heads, self.ffn, self.vocab,
                                  self.mlp, self.dropout)

    def hardware_profile(self):
        return hardware_from_options(self.hardware, self.hardware_file, self.gpus_per_node,
                                     self.gpu_memory_gb, self.nic_gbit)

    def batch(self, gpus: Optional[int] = None) -> tuple[int, int, str]:
        """(seq, global batch, note); with `gpus`, a token budget rounds to a batch the data-
        parallel degrees of that GPU count divide."""
        return batch_from_options(self.seq_len, self.global_batch, self.tokens_per_batch, gpus)

    def given(self) -> list[str]:
        """The options the user typed, spelled as on the command line."""
        return ["--" + f.name.replace("_", "-") for f in fields(self)
                if getattr(self, f.name) not in (None, False)]

    def offer(self) -> Optional[dict[str, Any]]:
        """With --params: the nearest real preset (by parameter count) and how to plan it."""
        if self.params is None:
            if self.nearest_preset:
                raise InputError("--nearest-preset", "needs --params N (the count whose nearest "
                                 "preset to plan)")
            return None
        from ..specs.presets import nearest_preset
        from .. import validate as v
        n = v.positive("--params", parse_number("--params", self.params), upper=v.MAX_PARAMS)
        name, spec = nearest_preset(n)
        return {"preset": name, "name": spec.name, "params": spec.param_count(),
                "layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads,
                "kv_heads": spec.kv_heads, "ffn": spec.ffn, "planned": self.nearest_preset,
                "use": f"--model {name}"}


def offer_line(offer: dict[str, Any]) -> str:
    """The one line that names the nearest preset (first in table and Markdown output)."""
    from ..render.units import count
    shape = (f"{offer['name']}, {count(offer['params'])} params, L={offer['layers']} "
             f"h={offer['hidden']}")
    if offer["planned"]:
        return f"Planning the nearest real preset to --params: {offer['preset']} ({shape})."
    return (f"Nearest real preset: {offer['preset']} ({shape}); plan it with {offer['use']} "
            "or --nearest-preset.")


def emit_job(doc: Any, fmt: str, job: "Job") -> None:
    """emit() with the --params offer: one line before the document (table, Markdown) and a
    `nearest_preset` field in JSON."""
    import textwrap

    from ..render import emit
    from ..render.terminal import width, write_stdout
    offer = job.offer()
    if offer is not None:
        doc.data = {"nearest_preset": offer, **doc.data}
        if fmt == "markdown":
            write_stdout(offer_line(offer) + "\n\n")
        elif fmt != "json":   # the terminal's width, as the tables below it
            write_stdout(textwrap.fill(offer_line(offer), width()) + "\n")
    emit(doc, fmt)


def job_options(fn=None, *, hide: tuple[str, ...] = ()):
    """Add the JOB_OPTIONS to a typer command whose body takes `job: Job`; `hide` keeps the ones
    the command does not use out of its help (still accepted: older scripts pass them)."""
    if fn is None:
        return functools.partial(job_options, hide=hide)
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "job"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann,
                               default=SHARED[name].option(hidden=True) if name in hide else default)
             for name, ann, default in JOB_OPTIONS]
    names = [name for name, _, _ in JOB_OPTIONS]

    @functools.wraps(fn)
    def command(**kw):
        return fn(job=Job(**{n: kw.pop(n) for n in names}), **kw)

    command.__signature__ = sig.replace(parameters=own + extra)
    command.__annotations__ = {p.name: p.annotation for p in own + extra}
    return command


def layout_option(name: str, variant: Optional[str] = None) -> tuple[Any, Any]:
    """(annotation, typer.Option) of one layout knob, from the shared option set (which reads
    its declaration in specs.layout)."""
    o = SHARED[name]
    ann = Optional[bool] if o.kind == "flag" else Optional[int] if o.kind == "whole" else str
    return ann, opt(name, variant)


# The layout knobs a command takes as options (dp is derived from --gpus).
LAYOUT_KNOBS = tuple(k.name for k in KNOBS if k.cli)


def layout_options(fn=None, *, variants: Optional[dict[str, str]] = None):
    """Add the layout knobs' options after --gpus of a typer command whose body takes
    `layout: dict[str, Any]` (the knob values as typed: 'auto' stays a string); `variants`
    picks a declared variant of a knob's option (memory's --zero)."""
    if fn is None:
        return functools.partial(layout_options, variants=variants)
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "layout"]
    at = next((i + 1 for i, p in enumerate(own) if p.name == "gpus"), len(own))
    kw_only = inspect.Parameter.KEYWORD_ONLY
    extra = []
    for name in LAYOUT_KNOBS:
        ann, default = layout_option(name, (variants or {}).get(name))
        extra.append(inspect.Parameter(name, kw_only, default=default, annotation=ann))

    @functools.wraps(fn)
    def command(**kw):
        return fn(layout={n: kw.pop(n) for n in LAYOUT_KNOBS}, **kw)

    params = own[:at] + extra + [p.replace(kind=kw_only) for p in own[at:]]
    command.__signature__ = sig.replace(parameters=params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def option_group(name: str, options: tuple[tuple[str, Any], ...], build: Any):
    """A decorator adding the shared options `options` ((concept, annotation) pairs) to a typer
    command, whose body receives `build(**their values)` as the keyword `name` instead (memory
    and estimate take the memory margins this way)."""
    def wrap(fn):
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != name]
        extra = [inspect.Parameter(c, inspect.Parameter.KEYWORD_ONLY, default=opt(c),
                                   annotation=ann) for c, ann in options]

        @functools.wraps(fn)
        def command(**kw):
            return fn(**{name: build(**{c: kw.pop(c) for c, _ in options})}, **kw)

        params = own + extra
        command.__signature__ = sig.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command
    return wrap
