"""The terminal rendering of a Document, and the one writer every command's stdout goes through.

Three rules users of ruff, gh and kubectl rely on, kept here in one place:
- Every string is printed literally: cells, titles, notes and verdicts are rich ``Text``
  objects, never markup, so a path like ``[models/x]`` or a preset's "[source]" survives.
- Width: ``COLUMNS`` when set (also when piped), else the terminal's width, else 80. Piped
  output is plain (no colour, ASCII rules); nothing is cut to "…": cells fold instead.
- rich lays out what planner.render.plain cannot (wide characters, over-wide tables); the rest
  is laid out there, byte for byte as rich would, styled or plain (rich is not imported).
- A closed pipe (``dtplan check plan.yaml | head -1``) is not an error: the rest of the output
  goes to /dev/null and the command still exits with its verdict, so ``set -o pipefail`` reads
  the truth.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

# Table style: one space between columns and a rule under the header. Piped output uses ASCII.
_PLAIN_RULE = ("    \n", "    \n", " -  \n", "    \n", "    \n", "    \n", "    \n", "    \n")


def is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def width() -> int:
    """COLUMNS if set to a number ≥ 20, else the terminal's width, else 80 (piped)."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) >= 20:
        return int(cols)
    if is_tty():
        import shutil   # a terminal only: shutil loads the compressors (bz2, lzma) at import
        return shutil.get_terminal_size((80, 24)).columns
    return 80


def _bar(value: float, biggest: float, glyph: str, size: int = 20) -> str:
    if biggest <= 0 or value <= 0:
        return ""
    return glyph * max(1, round(size * value / biggest))


def _widths(columns: list[str], rows: list[list[str]], numeric: list[bool], avail: int) -> list[int]:
    """Column widths that fit `avail`: start from each column's natural width and take one
    character at a time from the column with the most room above its floor. The floor is the
    longest word (a number, a name) so words wrap whole; only a word longer than a third of
    the line folds. Headers wrap at their spaces."""
    natural, floor = [], []
    for i, c in enumerate(columns):
        cells = [str(r[i]) for r in rows if i < len(r)]
        lines = [ln for x in cells for ln in x.split("\n")] + c.split("\n")
        words = [w for x in cells + [c] for w in x.split()] or [""]
        natural.append(max(len(x) for x in lines))
        longest = max(len(w) for w in words)
        if numeric[i]:  # a number and its unit stay on one line
            longest = max([longest] + [len(x) for x in cells])
        floor.append(longest if numeric[i] else min(longest, max(avail // 3, 8)))
    widths = list(natural)
    budget = avail - (len(columns) - 1)
    while sum(widths) > budget:
        slack = [w - f for w, f in zip(widths, floor)]
        j = max(range(len(widths)), key=lambda k: slack[k])
        if slack[j] <= 0:
            break
        widths[j] -= 1
    return widths


def _rich_table(t: Any, tty: bool, avail: int) -> Any:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    from planner.render.document import numeric_columns

    style = box.SIMPLE_HEAD if tty else box.Box("".join(_PLAIN_RULE), ascii=True)
    rt = RichTable(title=Text(t.title, style="bold" if tty else ""), title_justify="left",
                   box=style, padding=(0, 0), pad_edge=False, show_edge=False,
                   header_style="bold" if tty else "")
    numeric = numeric_columns(t)
    natural = _widths(t.columns, t.rows, numeric, 10 ** 6)
    bars = t.bars is not None and sum(natural) + len(natural) + 20 <= avail  # first to go
    fixed = natural if bars else _widths(t.columns, t.rows, numeric, avail)
    for c, num, w in zip(t.columns, numeric, fixed):
        rt.add_column(Text(c), justify="right" if num else "left", overflow="fold", width=w)
    if bars:
        rt.add_column("", justify="left", style="cyan" if tty else "", overflow="fold")
    biggest = max(t.bars) if t.bars else 0.0
    for i, r in enumerate(t.rows):
        cells = [Text(str(c)) for c in r]
        if bars:
            cells.append(Text(_bar(t.bars[i], biggest, "█" if tty else "#")))
        rt.add_row(*cells)
    return rt


def render_text(doc: Any, *, tty: bool | None = None, columns: int | None = None) -> str:
    """The document as terminal text: styled for a terminal, plain when piped (without rich
    where planner.render.plain can lay it out the same way, as almost every document)."""
    from planner.render.document import literal_doc
    doc = literal_doc(doc)   # control characters from files shown escaped, never sent raw
    tty = is_tty() if tty is None else tty
    avail = columns or width()
    if not tty or _styles_as_rich():
        from planner.render.plain import render_plain
        text = render_plain(doc, avail, tty=tty)
        if text is not None:
            return text
    return render_rich_text(doc, tty, avail)


def _styles_as_rich() -> bool:
    """Whether rich would style a terminal's text with the plain SGR codes planner.render.plain
    writes: not on a dumb terminal (TERM dumb or unknown: no styles, 80 columns) nor on Windows
    (its console API); the colour system (COLORTERM, TERM's -256color) does not change how bold,
    dim and the standard colours are written."""
    return (not sys.platform.startswith("win")
            and os.environ.get("TERM", "").lower() not in ("dumb", "unknown"))


def render_rich_text(doc: Any, tty: bool, avail: int) -> str:
    """The document laid out by rich: styled for a terminal, ASCII rules and no colour when not."""
    from rich.console import Console
    from rich.text import Text

    buf = io.StringIO()
    console = Console(file=buf, width=avail, force_terminal=tty, no_color=not tty,
                      color_system="auto" if tty else None, highlight=False, soft_wrap=False,
                      markup=False, emoji=False)
    console.print(Text(doc.title, style="bold" if tty else ""))
    for t in doc.tables:
        console.print(_rich_table(t, tty, avail))
        if getattr(t, "legend", None):
            console.print(Text(t.legend, style="dim" if tty else ""))
    if doc.verdict:
        style = ("bold green" if doc.ok else "bold red" if doc.ok is False else "bold") if tty else ""
        console.print(Text(doc.verdict, style=style))
    for n in doc.notes:
        console.print(Text(f"· {n}", style="dim" if tty else ""))
    # rich pads table rows to the full width; piped text should not end lines in blanks.
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))
