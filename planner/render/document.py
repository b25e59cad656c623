"""The one shape every command prints, and the renderings that need no terminal: JSON and
Markdown (the terminal's is planner.render.terminal, through rich)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from planner.io.escape import markdown, visible
from planner.render.json_out import default_mode, envelope

FORMATS = ("table", "json", "markdown")


@dataclass
class Table:
    """A titled grid of already-formatted cells. `bars` (one number per row) draws a bar column
    in the terminal so the biggest item shows at a glance."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    bars: list[float] | None = None
    legend: str | None = None  # one line printed under the table: what its codes mean


@dataclass
class Document:
    """What a command prints: tables, notes (assumptions, explanations), a verdict line, and the
    JSON payload (`data`, SI units with the unit in each key name). Mutable: a command adds a
    note or a table to the document its renderer built before printing it."""

    command: str
    title: str
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: str | None = None
    ok: bool | None = None
    data: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None  # which of the command's JSON shapes `data` is (render.json_out)


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
    """The document's JSON: render.json_out's envelope around `data`, NaN and inf as null."""
    import json   # JSON output only: a table's run loads no json (tests/test_cli_startup.py)

    payload = envelope(doc.command, doc.mode or default_mode(doc.command), doc.ok, doc.data,
                       doc.notes)
    return json.dumps(_clean(payload), indent=2, sort_keys=False)


# A cell that is a number with at most a unit suffix, a figure in brackets ("4 (1.5 GB)") or
# an error band ("54.4% ±45%"): such columns are right-aligned in every rendering.
_NUMBER = re.compile(r"[-+~≈]?[\d,.]+(e[-+]?\d+)?\s?[%A-Za-z×/]*"
                     r"( \([\d,.]+ ?[%A-Za-z/]*\))?( ±\s?[\d.]+%)?")


def is_number(s: str) -> bool:
    """Whether a stripped cell is a number as `_NUMBER` reads one (matched whole)."""
    return _NUMBER.fullmatch(s) is not None


def numeric_columns(t: Table) -> list[bool]:
    """Which columns hold numbers (right-aligned in every rendering): each non-empty cell is a
    number with at most a unit suffix ("12.665", "58.7%", "331.17K", "62m"). The first column
    is a label."""
    out = []
    for i in range(len(t.columns)):
        cells = [str(r[i]).strip() for r in t.rows if i < len(r) and str(r[i]).strip()]
        out.append(i > 0 and bool(cells) and all(map(is_number, cells)))
    return out


def literal(text: str, *, newlines: bool = False) -> str:
    """A string as printed, whatever a file put in it: control characters, C1 controls and
    bidi overrides shown as escapes (planner.io.escape.visible), so a config.json value cannot
    colour the terminal, move the cursor, reorder the text or split a title; `newlines`: keep
    line breaks (notes)."""
    return visible(text, newlines=newlines)


def literal_doc(doc: Document, shown: Callable[[str], str] = lambda s: s) -> Document:
    """The document with every string `literal`: what each renderer but JSON (which escapes by
    itself) prints; then `shown` (the terminal's encoding fallbacks) on each."""
    def lit(s: str, newlines: bool = False) -> str:
        return shown(literal(s, newlines=newlines))
    tables = [dataclasses.replace(t, title=lit(t.title), columns=[lit(c) for c in t.columns],
                                  rows=[[lit(c) for c in r] for r in t.rows],
                                  legend=lit(t.legend) if t.legend else t.legend)
              for t in doc.tables]
    return dataclasses.replace(
        doc, title=lit(doc.title), tables=tables, notes=[lit(n) for n in doc.notes],
        verdict=lit(doc.verdict, newlines=True) if doc.verdict else doc.verdict)


def md_text(s: str) -> str:
    """Text for Markdown: `literal`, and no HTML tag a viewer would run (`<img` → `\\<img`).
    Applied once to each raw string: a second pass would escape its own backslash again."""
    return _no_tags(literal(s))


def _no_tags(shown: str) -> str:
    """No HTML tag, link or image (`[x](javascript:...)`, `![x](http://...)`) in Markdown."""
    return markdown(shown)


def _md_shown(shown: str) -> str:
    # a cell already through `literal` (a line break shown as \n, so it stays on its row):
    # md_text's tag escape, then the column separator
    return _no_tags(shown).replace("|", "\\|")


def _md_cell(s: str) -> str:
    return _md_shown(literal(s))


def md_table(t: Table) -> list[str]:
    """A table's Markdown lines under its title (which each caller sets its own way): header,
    alignment (numbers right-aligned, as in the terminal, judged on the cells as printed),
    rows, the legend, a blank line. Each cell goes through `literal` once, for both."""
    rows = [[literal(c) for c in r] for r in t.rows]
    lines = ["| " + " | ".join(_md_cell(c) for c in t.columns) + " |",
             "|" + "|".join("--:" if n else "---"
                            for n in numeric_columns(Table(t.title, t.columns, rows))) + "|"]
    lines += ["| " + " | ".join(_md_shown(c) for c in r) + " |" for r in rows]
    if t.legend:
        lines += ["", f"*{_md_cell(t.legend)}*"]
    return lines + [""]


def render_markdown(doc: Document, heading: str = "#") -> str:
    """Markdown: every user string escaped once (md_text: control characters, HTML tags)."""
    lines = [f"{heading} {md_text(doc.title)}", ""]
    for t in doc.tables:
        lines += [f"{heading}# {md_text(t.title)}", ""] + md_table(t)
    if doc.verdict:
        lines += [f"**{md_text(doc.verdict)}**", ""]
    if doc.notes:
        lines += [f"{heading}# Assumptions and notes", ""] + [f"- {md_text(n)}" for n in doc.notes
                                                              ] + [""]
    return "\n".join(lines)
