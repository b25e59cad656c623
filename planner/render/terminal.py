"""The terminal rendering of a Document, through rich, and `emit`, which prints a document in
the format asked for.

Rules users of ruff, gh and kubectl rely on, kept here in one place:
- Every string is printed literally: titles, cells, notes and verdicts are rich ``Text``
  objects, never markup, so a path like ``[models/x]`` or a preset's "[source]" survives;
  control characters from files are shown as escapes first (document.literal_doc).
- rich reads the environment: whether stdout is a terminal (a tty, or ``FORCE_COLOR`` /
  ``TTY_COMPATIBLE=1``), ``NO_COLOR``, ``TERM`` and the width (``COLUMNS``, else the terminal's,
  else 80). A terminal gets bold titles and headers, a box-drawing rule, cyan bars and a
  coloured verdict; with ``NO_COLOR`` the same layout and no escape sequence at all; a pipe gets
  plain text with an ASCII rule and ``#`` bars, and no line ends in blanks.
- Nothing is cut to "…": cells fold instead, at the widths _widths gives the columns.
- A closed pipe (``dtplan check plan.yaml | head -1``) is not an error (io.stdout).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from planner.io.stdout import encodable, stream_encoding, write_stdout
from planner.render.document import (Document, Table, literal_doc, numeric_columns, render_json,
                                     render_markdown)

# The piped table: one space between columns and a dashed rule under the header, in ASCII.
_PIPE_BOX = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
_BAR_CELLS = 20   # the longest bar, in cells


class _Look(NamedTuple):
    """How a console shows a document: box characters on a terminal, ASCII in a pipe; styles
    only on a terminal without NO_COLOR (rich keeps bold under NO_COLOR; we print none)."""

    rule: box.Box
    bar: str
    styled: bool

    def style(self, name: str) -> str:
        return name if self.styled else ""


def console(**settings: Any) -> Console:
    """The console documents are printed through: rich reads the terminal, FORCE_COLOR,
    TTY_COMPATIBLE, NO_COLOR, TERM and COLUMNS itself; `settings` (rich's Console keywords:
    width, force_terminal, no_color) override it, for tests."""
    return Console(highlight=False, markup=False, emoji=False, **settings)


def width() -> int:
    """The width documents are laid out in: rich's (COLUMNS, else the terminal's, else 80)."""
    return console().width


def _look(con: Console) -> _Look:
    if con.is_terminal:
        return _Look(box.SIMPLE_HEAD, "█", not con.no_color)
    return _Look(_PIPE_BOX, "#", False)


def _bar(value: float, biggest: float, glyph: str, size: int = _BAR_CELLS) -> str:
    """A bar `size * value / biggest` cells long (at least one for a positive value)."""
    if biggest <= 0 or value <= 0:
        return ""
    return glyph * max(1, round(size * value / biggest))


def _widths(columns: list[str], rows: list[list[str]], numeric: list[bool],
            avail: int) -> list[int]:
    """Column widths in terminal cells (a CJK character takes two) that fit `avail`: start from
    each column's natural width and take one cell at a time from the column with the most room
    above its floor. The floor is the longest word (a number, a name) so words wrap whole; only
    a word longer than a third of the line folds. Headers wrap at their spaces."""
    natural, floor = [], []
    for i, c in enumerate(columns):
        cells = [str(r[i]) for r in rows if i < len(r)]
        lines = [ln for x in cells for ln in x.split("\n")] + c.split("\n")
        words = [w for x in cells + [c] for w in x.split()] or [""]
        natural.append(max(cell_len(x) for x in lines))
        longest = max(cell_len(w) for w in words)
        if numeric[i]:  # a number and its unit stay on one line
            longest = max([longest] + [cell_len(x) for x in cells])
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


def _rich_table(t: Table, how: _Look, avail: int) -> RichTable:
    """The table for rich: fixed column widths (_widths), numbers right-aligned, cells folded
    rather than cut; the bar column only when the table keeps its natural widths beside it."""
    rt = RichTable(title=Text(t.title, style=how.style("bold")), title_justify="left",
                   box=how.rule, padding=(0, 0), pad_edge=False, show_edge=False,
                   header_style=how.style("bold"))
    numeric = numeric_columns(t)
    natural = _widths(t.columns, t.rows, numeric, 10 ** 6)
    fits = sum(natural) + len(natural) + _BAR_CELLS <= avail
    bars = t.bars if fits else None  # the bars are the first to go
    fixed = natural if bars is not None else _widths(t.columns, t.rows, numeric, avail)
    for c, num, w in zip(t.columns, numeric, fixed):
        rt.add_column(Text(c), justify="right" if num else "left", overflow="fold", width=w)
    if bars is not None:
        rt.add_column("", justify="left", style=how.style("cyan"), overflow="fold")
    biggest = max(bars) if bars else 0.0
    for i, r in enumerate(t.rows):
        cells = [Text(str(c)) for c in r]
        if bars is not None:
            cells.append(Text(_bar(bars[i], biggest, how.bar)))
        rt.add_row(*cells)
    return rt


def render_text(doc: Document, con: Console | None = None) -> str:
    """The document as `con` (by default, the console of stdout) shows it: title, tables with
    their legends, the verdict (green when it fits, red when not), then the notes."""
    con = con or console()
    # control characters from files shown escaped, never sent raw; what the stream's encoding
    # cannot hold as the ASCII it writes instead, before the columns are measured (">=" for
    # "≥" takes two cells: a table laid out with "≥" would pass the width once written)
    enc = stream_encoding(con.file)
    doc = literal_doc(doc, lambda s: encodable(s, enc))
    how = _look(con)
    with con.capture() as out:
        con.print(Text(doc.title, style=how.style("bold")))
        for t in doc.tables:
            con.print(_rich_table(t, how, con.width))
            if t.legend:
                con.print(Text(t.legend, style=how.style("dim")))
        if doc.verdict:
            verdict = "bold green" if doc.ok else "bold red" if doc.ok is False else "bold"
            con.print(Text(doc.verdict, style=how.style(verdict)))
        for n in doc.notes:
            con.print(Text(f"· {n}", style=how.style("dim")))
    # rich pads table rows to the full width; no printed line should end in blanks.
    return "\n".join(line.rstrip() for line in out.get().split("\n"))


def emit(doc: Document, fmt: str) -> None:
    """Print the document to stdout as `fmt`: "json", "markdown", or a terminal table."""
    if fmt == "json":
        write_stdout(render_json(doc) + "\n")
    elif fmt == "markdown":
        write_stdout(render_markdown(doc) + "\n")
    else:
        write_stdout(render_text(doc))
