"""Text output without rich: the same bytes the rich renderer prints, piped (plain) or on a
terminal (bold titles and headers, dim notes, cyan bars, a box-drawing rule), from a few string
operations instead of rich's console (~20 ms of imports and ~15 ms of layout for a `fit`
table, measured in-process).

The layout rules are those of the terminal renderer (planner.render.terminal): columns one
space apart, a dashed rule under the header, numbers right-aligned, titles and cells wrapped at
spaces with words longer than their column folded, multi-line headers aligned at the bottom,
blanks at line ends dropped. Text this module cannot measure one character to a cell (wide or
combining characters, tabs, control characters) goes back to rich, and so does a table whose
columns cannot all keep one cell on the line; a table whose word floors are wider than the line
has its widths squeezed as rich squeezes them, so both renderers print the same bytes.
"""

from __future__ import annotations

import re
from typing import Any

_WORD = re.compile(r"\s*\S+\s*")
# The SGR codes rich writes for the terminal renderer's styles (planner.render.terminal); a
# styled line is one run: code, text (with its padding), reset.
_SGR = {"bold": "1", "dim": "2", "cyan": "36", "bold green": "1;32", "bold red": "1;31"}
_ASCII_PRINTABLE = frozenset(chr(c) for c in range(32, 127))
# The non-ASCII characters dtplan's own text uses, each one cell by the rule of one_cell
# (tests/test_render_plain.py checks it): a usual document needs no unicodedata import.
_USUAL_ONE_CELL = frozenset("·×÷±≈≤≥−—…→µ")


def one_cell(ch: str) -> bool:
    """The character takes one terminal cell and wraps like a letter: printable ASCII, or a
    letter, digit, punctuation mark or symbol of the alphabetic scripts (below U+1100, where
    Hangul jamo start) or of the punctuation, arrow, maths, box and shape blocks U+2000-U+25FF
    and U+27C0-U+2BFF (not the emoji-prone symbols and dingbats between), not East Asian wide."""
    if ch in _ASCII_PRINTABLE or ch in _USUAL_ONE_CELL:
        return True
    import unicodedata
    cp = ord(ch)
    return ((cp < 0x1100 or 0x2000 <= cp < 0x2600 or 0x27C0 <= cp < 0x2C00)
            and unicodedata.category(ch)[0] in "LNPS"
            and unicodedata.east_asian_width(ch) not in ("W", "F"))


def _one_cell(text: str) -> bool:
    if text.isascii():  # the common case at C speed: printable ASCII is U+0020-U+007E
        return text.replace("\n", "").isprintable()
    return all(ch == "\n" or one_cell(ch) for ch in text)


def _breaks(line: str, width: int) -> list[int]:
    """Where a line is cut to fit `width`: a word (with the blanks after it) moves to the next
    line when it does not fit the rest of this one; a word longer than the width is folded."""
    if len(line) <= width:  # every word fits what the ones before it left
        return []
    cuts: list[int] = []
    used = 0
    for m in _WORD.finditer(line):
        start, word = m.start(), m.group(0)
        size = len(word.rstrip())
        if width - used >= size:
            used += len(word)
        elif size > width:
            pieces = [word[i:i + width] for i in range(0, len(word), width)]
            for piece in pieces[:-1]:
                if start:
                    cuts.append(start)
                start += len(piece)
            if start:
                cuts.append(start)
            used = len(pieces[-1])
        elif used and start:
            cuts.append(start)
            used = len(word)
    return cuts


def wrap(text: str, width: int, justify: str | None = None) -> list[str]:
    """The lines of `text` in `width` cells. justify "left" pads to the width, "right" drops
    trailing blanks and pads on the left, None leaves each line as cut."""
    if len(text) <= width and "\n" not in text:   # one line that fits: most table cells
        if justify == "right":
            line = text.rstrip()
            return [" " * (width - len(line)) + line]
        return [text.ljust(width) if justify == "left" else text]
    out: list[str] = []
    for para in text.split("\n"):
        cuts = [0, *_breaks(para, width), len(para)]
        for a, b in zip(cuts, cuts[1:]):
            line = para[a:b]
            if len(line) > width:  # blanks past the width go; a longer word was already cut
                excess = len(line) - width
                blanks = len(line) - len(line.rstrip())
                line = line[:len(line) - min(blanks, excess)]
            if justify == "right":
                line = line.rstrip()[:width]
                line = " " * (width - len(line)) + line
            else:
                line = line[:width]
                if justify == "left":
                    line = line.ljust(width)
            out.append(line)
    return out


def _styled(line: str, style: str | None) -> str:
    """The line as rich writes it in `style` on a terminal (nothing to style: as it is)."""
    return f"\x1b[{_SGR[style]}m{line}\x1b[0m" if style and line else line


def _table_lines(title: str, columns: list[str], rows: list[list[str]], widths: list[int],
                 right: list[bool], tty: bool = False, bar_column: bool = False) -> list[str]:
    total = sum(widths) + len(widths) - 1
    bold = "bold" if tty else None
    lines = [_styled(x, bold) for x in wrap(title, total, "left")] if title else []
    grid = [columns] + rows
    for index, row in enumerate(grid):
        cells = [wrap(str(row[i]) if i < len(row) else "", w, "right" if r else "left")
                 for i, (w, r) in enumerate(zip(widths, right))]
        height = max(len(c) for c in cells)
        blank = [" " * w for w in widths]
        for i, c in enumerate(cells):  # the header sits on the rule; a row's cells at its top
            pad = [blank[i]] * (height - len(c))
            cells[i] = (pad + c) if index == 0 else (c + pad)
        styles = [bold if index == 0 else "cyan" if tty and bar_column and i == len(cells) - 1
                  else None for i in range(len(cells))]
        lines += [" ".join(_styled(c[k], st) for c, st in zip(cells, styles))
                  for k in range(height)]
        if index == 0:
            lines.append("─" * total if tty else " ".join("-" * w for w in widths))
    return lines


def _table(t: Any, avail: int, bar: str, tty: bool = False) -> list[str] | None:
    """The table's lines, or None when rich must lay it out (a column would get no cell)."""
    from planner.render.document import numeric_columns
    from planner.render.terminal import _bar, _widths

    numeric = numeric_columns(t)
    natural = _widths(t.columns, t.rows, numeric, 10 ** 6)
    bars = t.bars is not None and sum(natural) + len(natural) + 20 <= avail
    # Natural widths that fit the line are what _widths(avail) returns (nothing to take back).
    fits = sum(natural) + len(natural) - 1 <= avail
    fixed = natural if bars or fits else _widths(t.columns, t.rows, numeric, avail)
    widths = [w or 1 for w in fixed]
    columns, rows, right = list(t.columns), [list(map(str, r)) for r in t.rows], list(numeric)
    if bars:
        biggest = max(t.bars) if t.bars else 0.0
        drawn = [_bar(v, biggest, bar) for v in t.bars]
        columns.append("")
        rows = [r + [""] * (len(t.columns) - len(r)) + [d] for r, d in zip(rows, drawn)]
        widths.append(max([len(d) for d in drawn] + [1]))
        right.append(False)
    if sum(widths) + len(widths) - 1 > avail:  # never with bars: they are drawn only with room
        squeezed = _squeezed(fixed, avail - (len(fixed) - 1))
        if squeezed is None:
            return None
        widths = squeezed
    return _table_lines(t.title, columns, rows, widths, right, tty, bars)


def _squeezed(fixed: list[int], room: int) -> list[int] | None:
    """The widths rich (rich.table, _calculate_column_widths) gives columns of fixed widths
    that do not fit `room` cells (the line less the gaps): each capped at the room (at least
    one cell); if they still do not fit, the excess is taken evenly from left to right, column
    k of n giving min(its width, round(excess left / (n - k))) with Python's rounding (rich's
    ratio_reduce), and no column ends wider than its fixed width. None if a column would end
    with no cell (rich then prints none of its text, a case this module does not lay out)."""
    widths = [max(1, min(w, room)) for w in fixed]
    excess = sum(widths) - room
    if excess <= 0:
        return widths
    out = []
    for k, (w, f) in enumerate(zip(widths, fixed)):
        taken = min(w, round(excess / (len(widths) - k)))
        out.append(min(f, w - taken))
        excess -= taken
    return out if min(out) >= 1 else None


def _texts(doc: Any) -> list[str]:
    out = [doc.title, doc.verdict or "", *doc.notes]
    for t in doc.tables:
        out += [t.title, t.legend or "", *t.columns, *(str(c) for r in t.rows for c in r)]
    return out


def render_plain(doc: Any, avail: int, tty: bool = False) -> str | None:
    """The document as text `avail` columns wide (with tty, styled as rich styles it for a
    terminal), or None where only rich can lay it out the same way (see the module docstring)."""
    if not all(_one_cell(s) for s in _texts(doc)):
        return None

    def para(text: str, style: str) -> list[str]:
        return [_styled(x, style if tty else None) for x in wrap(text, avail)]

    lines = para(doc.title, "bold")
    for t in doc.tables:
        if any(len(r) > len(t.columns) for r in t.rows):
            return None
        table = _table(t, avail, "█" if tty else "#", tty)
        if table is None:
            return None
        lines += table
        if getattr(t, "legend", None):
            lines += para(t.legend, "dim")
    if doc.verdict:
        lines += para(doc.verdict, "bold green" if doc.ok else "bold red" if doc.ok is False
                      else "bold")
    for n in doc.notes:
        lines += para(f"· {n}", "dim")
    return "\n".join(line.rstrip() for line in lines) + "\n"
