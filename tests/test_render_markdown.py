"""Markdown escapes each user string once (control characters shown as escapes, HTML tag
openings as \\<, pipes in cells as \\|), and the command and review renderings share one table
writer (document.md_table)."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st

from planner.render.document import Document, Table, md_table, render_markdown

TAG = re.compile(r"<(?=[A-Za-z/!?])")


def _doc(text: str) -> Document:
    return Document(command="fit", title=f"title {text}", verdict=f"verdict {text}",
                    notes=[f"note {text}"], tables=[Table(f"T {text}", ["name", "value"],
                                                          [[f"cell {text}", "12.5"]])])


def test_each_user_string_is_escaped_exactly_once():
    out = render_markdown(_doc("<b>x</b>\x1b[31m|\n"))
    assert out.splitlines() == [
        "# title \\<b>x\\</b>\\x1b\\[31m|\\n", "",
        "## T \\<b>x\\</b>\\x1b\\[31m|\\n", "",
        "| name | value |", "|---|--:|",
        "| cell \\<b>x\\</b>\\x1b\\[31m\\|\\n | 12.5 |", "",
        "**verdict \\<b>x\\</b>\\x1b\\[31m|\\n**", "",
        "## Assumptions and notes", "",
        "- note \\<b>x\\</b>\\x1b\\[31m|\\n"]


@given(st.text(alphabet=st.sampled_from("<>ab/!?|x \x1b\n\t"), max_size=30))
def test_no_string_is_escaped_twice(text):
    out = render_markdown(_doc(text))
    tags = len(TAG.findall(text))
    # five copies of the text (title, table title, cell, verdict, note), each escaped once
    assert out.count("\\<") == 5 * tags
    assert "\\\\" not in out
    assert out.count("\\x1b") == 5 * text.count("\x1b")


def test_a_number_cell_is_judged_as_printed():
    # "12\t" is no number once the tab is shown as \t: left-aligned, as the terminal does
    t = Table("T", ["a", "b", "c"], [["x", "12\t", "3.5 GB"]])
    assert md_table(t)[1] == "|---|---|--:|"


def test_the_review_writes_its_tables_with_the_same_lines():
    from planner.review import render as review
    assert review.md_table is md_table


def test_each_cell_goes_through_literal_once(monkeypatch):
    # the alignment is judged on the cells as shown and the rows print those same strings:
    # one literal() per header, cell and legend
    import planner.render.document as d

    seen = []
    real = d.literal
    monkeypatch.setattr(d, "literal", lambda s, **kw: seen.append(s) or real(s, **kw))
    t = Table("T", ["name", "GB"], [["a|b", "1.5"], ["<i>", "2"]], legend="L")
    assert md_table(t) == ["| name | GB |", "|---|--:|", "| a\\|b | 1.5 |", "| \\<i> | 2 |",
                           "", "*L*", ""]
    assert sorted(seen) == sorted(["name", "GB", "a|b", "1.5", "<i>", "2", "L"])
