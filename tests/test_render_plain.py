"""The plain piped renderer prints exactly what rich prints when stdout is not a terminal, and
never imports rich to do it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.render.document import Document, Table
from planner.render.plain import one_cell, render_plain, wrap
from planner.render.terminal import render_rich_text

# Words as dtplan prints them: names, numbers with units, paths, separators, long tokens.
_WORDS = st.sampled_from(["TP", "8", "12.665", "58.7%", "ZeRO-3h8", "full×19", "—", "·", "a",
                          "llama3-70b", "[models/x]", "(uncalibrated)", "±7.5%", "74.6", "→",
                          "x" * 30, "interleaved-1F1B-with-a-very-long-name", "", "1,024"]) | \
    st.text(st.sampled_from([chr(c) for c in range(0x2C00) if one_cell(chr(c))]), max_size=8)
_SEP = st.sampled_from([" ", " ", "  ", "\n", " \n"])


@st.composite
def _text(draw, max_words: int = 12) -> str:
    words = draw(st.lists(_WORDS, max_size=max_words))
    out = ""
    for w in words:
        out += w + draw(_SEP)
    return out.strip(" ") if draw(st.booleans()) else out


@st.composite
def _doc(draw) -> Document:
    tables = []
    for _ in range(draw(st.integers(0, 3))):
        ncols = draw(st.integers(1, 6))
        cols = [draw(_text(3)) for _ in range(ncols)]
        nrows = draw(st.integers(0, 5))
        rows = [[draw(_text(4)) for _ in range(ncols)] for _ in range(nrows)]
        bars = (draw(st.lists(st.floats(0, 100), min_size=nrows, max_size=nrows))
                if draw(st.booleans()) else None)
        tables.append(Table(draw(_text(10)), cols, rows, bars, legend=draw(_text(15)) or None))
    return Document(command="fit", title=draw(_text(8)), tables=tables,
                    notes=draw(st.lists(_text(20), max_size=3)), verdict=draw(_text(10)) or None)


@settings(max_examples=100, deadline=None)
@given(_doc(), st.integers(20, 160))
def test_plain_matches_rich_byte_for_byte(doc, columns):
    plain = render_plain(doc, columns)
    if plain is not None:
        assert plain == render_rich_text(doc, False, columns)


@settings(max_examples=150, deadline=None)
@given(_doc(), st.integers(20, 160), st.sampled_from([True, False, None]),
       st.sampled_from([("xterm", ""), ("xterm-256color", ""), ("xterm-256color", "truecolor"),
                        ("screen-16color", ""), ("", "")]))
def test_styled_plain_matches_rich_on_a_terminal_byte_for_byte(doc, columns, ok, term):
    # bold titles and headers, dim legends and notes, the verdict's colour, cyan bars, the
    # box-drawing rule: the SGR codes rich writes in every colour system a terminal reports
    import os
    from unittest import mock

    doc.ok = ok
    with mock.patch.dict(os.environ, {"TERM": term[0], "COLORTERM": term[1]}):
        plain = render_plain(doc, columns, tty=True)
        if plain is not None:
            assert plain == render_rich_text(doc, True, columns)


def test_a_dumb_terminal_gets_what_rich_prints_for_it(monkeypatch):
    from planner.render.terminal import render_text

    doc = Document(command="x", title="T", tables=[Table("t", ["a"], [["1"]], [1.0])],
                   notes=["n"], verdict="FITS", ok=True)
    monkeypatch.setenv("TERM", "dumb")
    assert render_text(doc, tty=True, columns=60) == render_rich_text(doc, True, 60)
    monkeypatch.setenv("TERM", "xterm")
    styled = render_text(doc, tty=True, columns=60)
    assert styled == render_rich_text(doc, True, 60) and "\x1b[1;32mFITS\x1b[0m" in styled


@settings(max_examples=100, deadline=None)
@given(_text(30), st.integers(1, 50))
def test_wrapped_lines_fit_and_keep_every_word(text, width):
    lines = wrap(text, width)
    assert all(len(x) <= width for x in lines)
    assert "".join(text.split()) == "".join("".join(lines).split())


def test_numbers_right_aligned_and_rule_under_header():
    doc = Document(command="x", title="T", tables=[Table("t", ["name", "GB"],
                                                        [["weights", "17.68"], ["grads", "1.1"]])])
    assert render_plain(doc, 80) == "T\nt\nname       GB\n------- -----\nweights 17.68\ngrads     1.1\n"


def test_wide_characters_and_columns_left_without_a_cell_go_to_rich():
    wide = Document(command="x", title="模型", tables=[])
    assert render_plain(wide, 80) is None
    # 30 numeric columns on 40 cells: rich squeezes some to no cell at all
    nums = [str(10 ** 5 + i) for i in range(30)]
    crushed = Document(command="x", title="T", tables=[Table("t", nums, [nums])])
    assert render_plain(crushed, 40) is None
    # a column with nothing in it keeps no cell once rich squeezes the table
    empty = Document(command="x", title="T", tables=[Table("t", ["w" * 15] * 4 + [""],
                                                            [["w" * 15] * 4 + [""]])])
    assert min(_rich_widths(empty, 40)[0]) == 0 and render_plain(empty, 40) is None


def test_a_table_wider_than_the_line_is_squeezed_as_rich_squeezes_it():
    # 8 columns whose words (15 letters) need 127 cells on a 40-cell line: rich takes the
    # excess evenly and folds the words; so does the plain renderer
    words = ["w" * 15] * 8
    overwide = Document(command="x", title="T", tables=[Table("t", words, [words])])
    plain = render_plain(overwide, 40)
    assert plain is not None and plain == render_rich_text(overwide, False, 40)
    assert plain.split("\n")[6] == "---- " * 6 + "----- ----"  # 33 cells: 71 taken evenly
    # numbers keep their width in _widths (they never wrap), so only the squeeze narrows them
    nums = [["1024", "12.665", "58.7%", "ZeRO-3h8", "interleaved"] * 3]
    wide_numbers = Document(command="x", title="T", tables=[Table("t", ["#"] * 15, nums)])
    plain = render_plain(wide_numbers, 80)
    assert plain is not None and plain == render_rich_text(wide_numbers, False, 80)
    assert plain.split("\n")[3].startswith("-- ---- --- ------ --------")  # 102 cells on 66


def _rich_widths(doc: Document, columns: int) -> list[list[int]]:
    # rich's own column widths for each table (its private layout step: the ground truth the
    # plain renderer copies), to tell which documents it must lay out itself
    from rich.console import Console

    from planner.render.terminal import _rich_table
    console = Console(width=columns, no_color=True, color_system=None)
    out = []
    for t in doc.tables:
        rt = _rich_table(t, False, columns)
        out.append(rt._calculate_column_widths(
            console, console.options.update_width(columns - rt._extra_width)))
    return out


@st.composite
def _wide_doc(draw) -> Document:
    # tables of many columns on narrow lines: floors wider than the line, numbers that fold
    ncols = draw(st.integers(2, 24))
    cells = _WORDS | st.integers(0, 10 ** 9).map(str) | st.floats(0, 1e6).map("{:.3f}".format)
    cols = [draw(_text(2)) for _ in range(ncols)]
    rows = [[draw(cells) for _ in range(ncols)] for _ in range(draw(st.integers(1, 4)))]
    bars = draw(st.none() | st.lists(st.floats(0, 9), min_size=len(rows), max_size=len(rows)))
    return Document(command="fit", title=draw(_text(6)), tables=[Table(draw(_text(6)), cols,
                                                                        rows, bars)])


@settings(max_examples=150, deadline=None)
@given(_wide_doc(), st.integers(20, 100), st.booleans())
def test_overwide_tables_match_rich_and_go_to_rich_only_without_a_cell(doc, columns, tty):
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"TERM": "xterm", "COLORTERM": ""}):
        plain = render_plain(doc, columns, tty=tty)
        if plain is not None:
            assert plain == render_rich_text(doc, tty, columns)
    one_cell_text = all(one_cell(ch) or ch == "\n"
                        for s in [doc.title, doc.tables[0].title, *doc.tables[0].columns,
                                  *(c for r in doc.tables[0].rows for c in r)] for ch in s)
    if one_cell_text and plain is None:  # only a column rich leaves with no cell sends it there
        assert min(min(w) for w in _rich_widths(doc, columns)) == 0


def test_fit_top_1000_on_80_columns_is_laid_out_without_rich():
    # the case that sent `fit --top 1000 --all` to rich: 4-digit ranks make the floors 83 cells
    import planner.api
    from planner.render.fit import fit_doc
    from planner.specs.hardware import load_profile
    from planner.specs.model import model_from_params

    r = planner.api.fit(model_from_params(70e9), load_profile("h100"), 256, seq_len=8192,
                        global_batch=512, top=1000, dominated=True)
    doc = fit_doc(r)
    doc.tables = doc.tables[:1]
    doc.tables[0].rows = doc.tables[0].rows[-60:]  # the widest rows; rich is slow on 1000
    plain = render_plain(doc, 80)
    assert plain is not None and plain == render_rich_text(doc, False, 80)


def test_every_character_taken_as_one_cell_is_one_cell_for_rich():
    from rich.cells import cell_len

    taken = [chr(c) for c in range(0x2C00) if one_cell(chr(c))]  # none above U+2BFF
    assert len(taken) > 4000 and set("×·—±→≈…█µé") <= set(taken)
    assert [ch for ch in taken if cell_len(ch) != 1] == []
    assert not any(one_cell(ch) for ch in "模\u00a0\u200b\t\r\x1b✅☰")



def test_the_usual_characters_shortcut_follows_the_full_rule():
    # one_cell answers dtplan's own non-ASCII characters without unicodedata; each must be one
    # cell by the category and width rule it skips
    import unicodedata

    from planner.render.plain import _USUAL_ONE_CELL
    for ch in _USUAL_ONE_CELL:
        cp = ord(ch)
        assert cp < 0x1100 or 0x2000 <= cp < 0x2600 or 0x27C0 <= cp < 0x2C00
        assert unicodedata.category(ch)[0] in "LNPS"
        assert unicodedata.east_asian_width(ch) not in ("W", "F")

@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x2C00), max_size=40))
def test_the_ascii_shortcut_agrees_with_the_character_by_character_test(text):
    # _one_cell answers ASCII text with str.isprintable (tabs, DEL and other controls are not
    # one cell); every other text goes character by character through one_cell
    from planner.render.plain import _one_cell
    assert _one_cell(text) == all(ch == "\n" or one_cell(ch) for ch in text)
    assert _one_cell("a\tb") is False and _one_cell("a\x7fb") is False and _one_cell("a\nb")


@settings(max_examples=200, deadline=None)
@given(_text(20), st.integers(1, 120))
def test_a_line_no_longer_than_the_width_is_never_cut(text, width):
    from planner.render.plain import _breaks
    for line in text.split("\n"):
        if len(line) <= width:
            assert _breaks(line, width) == []


# The pattern numeric_columns once compiled (~0.6 ms a run); document.is_number matches it by
# hand, cell for cell: generated from its own pieces, so the edges (signs, exponents, a blank
# before " (", unit letters, Unicode digits and blanks) come up often.
_NUMBER_RE = r"^[-+~≈]?[\d,.]+(e[-+]?\d+)?\s?[%A-Za-z×/]*( \([\d,.]+ ?[%A-Za-z/]*\))?$"
_PIECES = st.sampled_from(["-", "+", "~", "≈", "1", "0", "٣", ",", ".", "e", "E", "e-", "e+",
                           " ", "\t", "\u00a0", "%", "GB", "×", "/", "s", " (", "(", ")", "x",
                           "1.5", " (2 GB)", "#", "µ"])


# the pattern's parts in order, each with near misses
_NUMBERISH = st.tuples(*(st.sampled_from(opts) for opts in (
    ["", "-", "≈", "*"], ["1", "1,024", "0.5", "٣", ""], ["", "e5", "e-3", "e", "E2"],
    ["", " ", "\t", "  "], ["", "GB", "%", "×", "x/s", "1"],
    ["", " (2 GB)", " (3)", "(3)", " (1.5 ×)", " ()", " (2 GB", " (4 %)x"]))).map("".join)


@settings(max_examples=1500, deadline=None)
@given(cell=_NUMBERISH | st.lists(_PIECES, max_size=7).map("".join) | st.text(max_size=12))
def test_the_hand_number_test_is_the_pattern(cell):
    import re

    from planner.render.document import is_number
    cell = cell.strip()   # numeric_columns asks about stripped cells
    assert is_number(cell) == bool(re.match(_NUMBER_RE, cell)), repr(cell)


def test_number_cells_as_the_tables_print_them():
    from planner.render.document import is_number
    for cell in ("12.665", "58.7%", "331.17K", "62m", "1e-05", "≈3.2 GB", "4 (1.5 GB)", "5 (3)"):
        assert is_number(cell), cell
    for cell in ("TP8", "e5", "1 (", "1e+", "1 (x)", "n/a", "-", "3 GB (2 ×)"):
        assert not is_number(cell), cell
