"""The terminal rendering (rich): the layout a pipe and a terminal get, nothing cut, every user
string printed literally, colour only on a terminal and never under NO_COLOR."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from conftest import ROOT, TERMINAL_ENV, _command
from planner.render.document import Document, Table
from planner.render.terminal import console, render_text

ESCAPE = re.compile(r"\x1b")

# Words as dtplan prints them: names, numbers with units, paths, separators, long tokens, and
# what a file may put in a name (markup, wide characters).
_WORDS = st.sampled_from(["TP", "8", "12.665", "58.7%", "ZeRO-3h8", "full×19", "—", "·", "a",
                          "llama3-70b", "[models/x]", "[bold]b[/bold]", "(uncalibrated)", "±7.5%",
                          "74.6", "→", "x" * 30, "interleaved-1F1B-with-a-very-long-name", "",
                          "1,024", "模型", "é"])
_SEP = st.sampled_from([" ", " ", "  ", "\n", " \n"])


@st.composite
def _text(draw, max_words: int = 12) -> str:
    words = draw(st.lists(_WORDS, max_size=max_words))
    out = ""
    for w in words:
        out += w + draw(_SEP)
    return out.strip(" ") if draw(st.booleans()) else out


@st.composite
def _doc(draw, max_columns: int = 6) -> Document:
    tables = []
    for _ in range(draw(st.integers(0, 3))):
        ncols = draw(st.integers(1, max_columns))
        cols = [draw(_text(3)) for _ in range(ncols)]
        nrows = draw(st.integers(0, 5))
        rows = [[draw(_text(4)) for _ in range(ncols)] for _ in range(nrows)]
        bars = (draw(st.lists(st.floats(0, 100), min_size=nrows, max_size=nrows))
                if draw(st.booleans()) else None)
        tables.append(Table(draw(_text(10)), cols, rows, bars, legend=draw(_text(15)) or None))
    return Document(command="fit", title=draw(_text(8)), tables=tables,
                    notes=draw(st.lists(_text(20), max_size=3)), verdict=draw(_text(10)) or None,
                    ok=draw(st.sampled_from([True, False, None])))


def _piped(columns: int) -> str:
    return console(width=columns, force_terminal=False)


def _strings(doc: Document) -> list[str]:
    out = [doc.title, doc.verdict or "", *doc.notes]
    for t in doc.tables:
        out += [t.title, t.legend or "", *t.columns, *(c for r in t.rows for c in r)]
    return out


# ---- layout --------------------------------------------------------------------------------

def test_numbers_right_aligned_and_rule_under_header():
    doc = Document(command="x", title="T", tables=[Table("t", ["name", "GB"],
                                                        [["weights", "17.68"], ["grads", "1.1"]])])
    assert render_text(doc, _piped(80)) == ("T\nt\nname       GB\n------- -----\nweights 17.68\n"
                                            "grads     1.1\n")


def test_bars_only_where_they_fit_beside_the_table():
    doc = Document(command="x", title="T", tables=[Table("t", ["part", "GB"],
                                                        [["weights", "10"], ["grads", "5"]],
                                                        bars=[10.0, 5.0])])
    assert render_text(doc, _piped(80)).splitlines()[4:] == ["weights 10 " + "#" * 20,
                                                             "grads    5 " + "#" * 10]
    assert "#" not in render_text(doc, _piped(30))   # no room for 20 cells of bar: none drawn


@settings(max_examples=150, deadline=None)
@given(_doc(max_columns=4), st.integers(40, 160))
def test_every_line_fits_and_nothing_is_cut(doc, columns):
    # cells fold instead of being cut to "…": every character printed, no line too long, and
    # none ends in blanks
    text = render_text(doc, _piped(columns))
    lines = text.split("\n")
    assert all(cell_len(line) <= columns for line in lines), columns
    assert all(line == line.rstrip() for line in lines)
    assert "…" not in text
    shown = Counter("".join(text.split()))
    wanted = Counter("".join("".join(_strings(doc)).split()))
    assert not wanted - shown


def test_a_table_wider_than_the_line_is_squeezed_and_folded():
    # 8 columns whose words (15 letters) need 127 cells on a 40-cell line: rich takes the
    # excess evenly from the columns and folds the words
    words = ["w" * 15] * 8
    text = render_text(Document(command="x", title="T", tables=[Table("t", words, [words])]),
                       _piped(40))
    assert text.split("\n")[6] == "---- " * 6 + "----- ----"
    assert max(map(len, text.splitlines())) <= 40 and text.count("w") == 2 * 8 * 15


def test_wide_characters_are_laid_out_in_cells():
    doc = Document(command="x", title="模型 " * 30, tables=[Table("t", ["名前", "GB"],
                                                                   [["模型", "1.5"]])])
    text = render_text(doc, _piped(40))
    assert all(cell_len(line) <= 40 for line in text.splitlines())
    assert "\n名前  GB\n---- ---\n模型 1.5\n" in text   # two cells a character, none folded


def test_columns_sets_the_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "57")
    assert console().width == 57
    from planner.render.terminal import width
    assert width() == 57


# ---- user strings printed literally ---------------------------------------------------------

def test_markup_and_control_characters_print_literally():
    doc = Document(command="x", title="[bold red]title[/]", verdict="[green]v[/green]",
                   notes=["[i]note\x1b[31m"], tables=[Table("[/x]", ["[a]"], [["[b]c[/b]"]],
                                                           legend="[dim]L")])
    for con in (_piped(80), console(width=80, force_terminal=True)):
        text = render_text(doc, con)
        for s in ("[bold red]title[/]", "[green]v[/green]", "[i]note\\x1b[31m", "[/x]", "[a]",
                  "[b]c[/b]", "[dim]L"):
            assert s in text, s
        assert "\x1b[31m" not in text


# ---- styles: a terminal, NO_COLOR, a pipe ---------------------------------------------------

_STYLED = Document(command="x", title="T", tables=[Table("t", ["a", "GB"], [["x", "1"]], [1.0])],
                   notes=["n"], verdict="FITS", ok=True)


def test_a_terminal_gets_bold_colour_and_box_characters(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    text = render_text(_STYLED, console(width=60, force_terminal=True))
    assert "\x1b[1;32mFITS\x1b[0m" in text and "\x1b[1mT\x1b[0m" in text and "─" in text
    assert "\x1b[36m█" in text and "\x1b[2m· n\x1b[0m" in text


def test_no_color_keeps_the_terminal_layout_without_escapes(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    text = render_text(_STYLED, console(width=60, force_terminal=True))
    assert not ESCAPE.search(text) and "─" in text and "█" in text


def test_a_pipe_gets_ascii_and_no_escapes(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    text = render_text(_STYLED, _piped(60))
    assert not ESCAPE.search(text) and "─" not in text and "#" in text and "FITS" in text


def _dtplan_env(**set_: str) -> dict[str, str]:
    drop = ("NO_COLOR", "TTY_INTERACTIVE", "PYTHONDONTWRITEBYTECODE", *TERMINAL_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TERM": "xterm-256color",
            "COLUMNS": "100", **set_}


@pytest.mark.parametrize("forced", [{"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}],
                         ids=["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_the_entry_point_colours_a_terminal_unless_no_color(forced):
    # stdout is a pipe, which rich treats as a terminal when told to (FORCE_COLOR,
    # TTY_COMPATIBLE=1); NO_COLOR=1 then leaves no escape sequence at all
    argv = _command() + ["fit", "--params", "7e9", "--gpus", "8", "--top", "3"]

    def out(**env: str) -> str:
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env=_dtplan_env(**{**forced, **env}), stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        return p.stdout
    coloured, plain, piped = out(), out(NO_COLOR="1"), out(FORCE_COLOR="", TTY_COMPATIBLE="")
    assert ESCAPE.search(coloured) and "─" in coloured
    assert not ESCAPE.search(plain) and "─" in plain
    assert not ESCAPE.search(piped) and "─" not in piped
    # the same layout: a styled line keeps the blanks its style covers
    unstyled = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert [line.rstrip() for line in unstyled.split("\n")] == plain.split("\n")


# ---- one direction of imports ---------------------------------------------------------------

def _render_imports() -> dict[str, set[str]]:
    """Each planner.render module → the planner.render modules it imports, lazily or not."""
    import ast
    from pathlib import Path

    import planner.render
    folder = Path(planner.render.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        graph[path.stem] = {n.split(".")[2] for n in names
                            if n.startswith("planner.render.") and n.count(".") >= 2}
    return graph


def test_the_render_modules_import_in_one_direction_even_lazily():
    # document (records, JSON, Markdown) below terminal (rich) below the package's emit
    graph = _render_imports()
    assert "terminal" not in graph["document"] and "document" in graph["terminal"]

    def reach(m: str, seen: set[str]) -> set[str]:
        for n in graph.get(m, set()) - seen:
            seen |= {n}
            reach(n, seen)
        return seen
    assert [m for m in graph if m != "__init__" and m in reach(m, set())] == []


# ---- the number test behind the alignment ---------------------------------------------------

def test_number_cells_as_the_tables_print_them():
    from planner.render.document import is_number
    for cell in ("12.665", "58.7%", "331.17K", "62m", "1e-05", "≈3.2 GB", "4 (1.5 GB)", "5 (3)",
                 "54.4% ±45%", "12.3 s ± 3.5%"):
        assert is_number(cell), cell
    for cell in ("TP8", "e5", "1 (", "1e+", "1 (x)", "n/a", "-", "3 GB (2 ×)", "±45%", "1 ±"):
        assert not is_number(cell), cell
