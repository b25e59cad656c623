"""Options shared by the commands that take a model, hardware, a layout and a batch."""

from __future__ import annotations

import functools
import inspect

from typing import Any, Optional

from planner.errors import InputError
from planner.resolve.job import Flags
from planner.specs.knobs import KNOBS
from planner.cli.options import SHARED, decl, parse_number, unlisted


def optional_int(field: str, text: Optional[str]) -> Optional[int]:
    """'auto' → None; otherwise a whole number ≥ 1."""
    if text is None or text == "auto":
        return None
    x = parse_number(field, text)
    if x != int(x) or x < 1:
        raise InputError(field, f"must be a whole number ≥ 1 or 'auto', got {text!r}")
    return int(x)


# The model, hardware and batch options every job command shares, in one place: the commands
# take a single `job: Flags` (resolved by planner.resolve.job) and the decorator below adds these options to their signature.
JOB_OPTIONS = tuple((name, ann, decl(name)) for name, ann in (
    ("model", Optional[str]), ("model_config", Optional[str]), ("params", Optional[str]),
    ("layers", Optional[int]), ("hidden", Optional[int]), ("heads", Optional[int]),
    ("kv_heads", Optional[int]), ("ffn", Optional[int]), ("vocab", Optional[int]),
    ("mlp", Optional[str]), ("dropout", Optional[bool]), ("hardware", Optional[str]),
    ("hardware_file", Optional[str]), ("gpus_per_node", Optional[int]),
    ("gpu_memory_gb", Optional[float]), ("nic_gbit", Optional[float]),
    ("seq_len", Optional[int]), ("global_batch", Optional[int]),
    ("tokens_per_batch", Optional[str]), ("framework", Optional[str]),
    ("nearest_preset", bool)))


def offer_line(offer: dict[str, Any]) -> str:
    """The one line that names the nearest preset (first in table and Markdown output)."""
    from planner.io.units import count
    shape = (f"{offer['name']}, {count(offer['params'])} params, L={offer['layers']} "
             f"h={offer['hidden']}")
    if offer["planned"]:
        return f"Planning the nearest real preset to --params: {offer['preset']} ({shape})."
    return (f"Nearest real preset: {offer['preset']} ({shape}); plan it with {offer['use']} "
            "or --nearest-preset.")


def emit_job(doc: Any, fmt: str, job: Flags) -> None:
    """emit() with the --params offer: one line before the document (table, Markdown) and a
    `nearest_preset` field in JSON."""
    import textwrap

    from planner.render import emit
    from planner.render.terminal import width
    from planner.io.stdout import write_stdout
    offer = job.offer()
    if offer is not None:
        doc.data = {"nearest_preset": offer, **doc.data}
        if fmt == "markdown":
            write_stdout(offer_line(offer) + "\n\n")
        elif fmt != "json":   # the terminal's width, as the tables below it
            write_stdout(textwrap.fill(offer_line(offer), width()) + "\n")
    emit(doc, fmt)


def job_options(fn=None, *, hide: tuple[str, ...] = ()):
    """Add the JOB_OPTIONS to a command whose body takes `job: Flags`; `hide` keeps the ones
    the command does not use out of its help (still accepted: older scripts pass them)."""
    if fn is None:
        return functools.partial(job_options, hide=hide)
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "job"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann,
                               default=unlisted(name) if name in hide else default)
             for name, ann, default in JOB_OPTIONS]
    names = [name for name, _, _ in JOB_OPTIONS]

    @functools.wraps(fn)
    def command(**kw):
        return fn(job=Flags(**{n: kw.pop(n) for n in names}), **kw)

    command.__signature__ = sig.replace(parameters=own + extra)
    command.__annotations__ = {p.name: p.annotation for p in own + extra}
    return command


def layout_option(name: str, variant: Optional[str] = None) -> tuple[Any, Any]:
    """(annotation, option declaration) of one layout knob, from the shared option set (which
    reads its declaration in specs.knobs)."""
    o = SHARED[name]
    ann = (Optional[bool] if o.kind == "flag" else Optional[int] if o.kind == "whole" and not o.auto
           else str)
    return ann, decl(name, variant)


# The layout knobs a command takes as options (dp is derived from --gpus).
LAYOUT_KNOBS = tuple(k.name for k in KNOBS if k.cli)


def layout_options(fn=None, *, variants: Optional[dict[str, str]] = None):
    """Add the layout knobs' options after --gpus of a command whose body takes
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


def _evaluated(fn: Any, annotation: Any) -> Any:
    """An annotation written as text (``from __future__ import annotations``) as its type."""
    return eval(annotation, fn.__globals__) if isinstance(annotation, str) else annotation


def option_group(name: str, options: tuple[tuple[str, Any], ...], build: Any):
    """A decorator adding the shared options `options` ((concept, annotation) pairs) to a
    command, whose body receives `build(**their values)` as the keyword `name` instead (memory
    and estimate take the memory margins this way)."""
    def wrap(fn):
        # The replaced parameter's annotation stays unevaluated: its type (a model) is imported
        # only when the command runs.
        sig = inspect.signature(fn)
        own = [p.replace(annotation=_evaluated(fn, p.annotation))
               for p in sig.parameters.values() if p.name != name]
        extra = [inspect.Parameter(c, inspect.Parameter.KEYWORD_ONLY, default=decl(c),
                                   annotation=ann) for c, ann in options]

        @functools.wraps(fn)
        def command(**kw):
            return fn(**{name: build(**{c: kw.pop(c) for c, _ in options})}, **kw)

        params = own + extra
        command.__signature__ = sig.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command
    return wrap
