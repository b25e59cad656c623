"""The one shape every command prints, and its three renderings."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
FORMATS = ("table", "json", "markdown")


@dataclass
class Table:
    """A titled grid of already-formatted cells. `bars` (one number per row) draws a bar column
    in the terminal so the biggest item shows at a glance."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    bars: list[float] | None = None


@dataclass
class Document:
    """What a command prints: tables, notes (assumptions, explanations), a verdict line, and the
    JSON payload (`data`, SI units with the unit in each key name)."""

    command: str
    title: str
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: str | None = None
    ok: bool | None = None
    data: dict[str, Any] = field(default_factory=dict)


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every consumer can parse the output."""
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def render_json(doc: Document) -> str:
    payload = {"schema_version": SCHEMA_VERSION, "command": doc.command}
    if doc.ok is not None:
        payload["ok"] = doc.ok
    payload.update(doc.data)
    if doc.notes:
        payload.setdefault("notes", doc.notes)
    return json.dumps(_clean(payload), indent=2, sort_keys=False)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: Document, heading: str = "#") -> str:
    lines = [f"{heading} {doc.title}", ""]
    for t in doc.tables:
        lines += [f"{heading}# {t.title}", ""]
        lines.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
        lines.append("|" + "|".join("---" for _ in t.columns) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows]
        lines.append("")
    if doc.verdict:
        lines += [f"**{doc.verdict}**", ""]
    if doc.notes:
        lines += [f"{heading}# Assumptions and notes", ""] + [f"- {n}" for n in doc.notes] + [""]
    return "\n".join(lines)


def _bar(value: float, biggest: float, width: int = 20) -> str:
    if biggest <= 0 or value <= 0:
        return ""
    n = max(1, round(width * value / biggest))
    return "█" * n


def render_rich(doc: Document, file=None) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=file or sys.stdout, highlight=False, soft_wrap=False)
    if not console.is_terminal:  # piped or captured: wide enough that tables do not wrap
        console.width = 160
    console.print(f"[bold]{doc.title}[/bold]")
    for t in doc.tables:
        rt = RichTable(title=t.title, title_justify="left", show_lines=False)
        for i, c in enumerate(t.columns):
            rt.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
        if t.bars is not None:
            rt.add_column("", justify="left", style="cyan")
        biggest = max(t.bars) if t.bars else 0.0
        for i, r in enumerate(t.rows):
            cells = list(r)
            if t.bars is not None:
                cells.append(_bar(t.bars[i], biggest))
            rt.add_row(*cells)
        console.print(rt)
    if doc.verdict:
        style = "bold green" if doc.ok else ("bold red" if doc.ok is False else "bold")
        console.print(f"[{style}]{doc.verdict}[/{style}]")
    for n in doc.notes:
        console.print(f"[dim]· {n}[/dim]")


def emit(doc: Document, fmt: str) -> None:
    """Print the document to stdout in the requested format."""
    if fmt == "json":
        sys.stdout.write(render_json(doc) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(render_markdown(doc) + "\n")
    else:
        render_rich(doc)
