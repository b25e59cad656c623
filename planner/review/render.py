"""The design review rendered as Markdown or as one self-contained HTML file.

Markdown reuses ``document.render_markdown``'s table shape; charts are separate SVG files the
caller writes next to the document (``<name>_files/*.svg``) and links. HTML inlines every
chart as ``<svg>`` and carries its own print-friendly CSS: no scripts, fonts, images or
stylesheets are fetched, so the file reads the same offline and on paper. Formatting only.
"""

from __future__ import annotations

import re

from planner.io.escape import html_text
from planner.review.doc import Review
from planner.render.document import Table, md_table, md_text, numeric_columns


def render_review_markdown(r: Review, chart_dir: str | None = None) -> str:
    """Markdown; with ``chart_dir`` each chart is linked as ``chart_dir/<name>.svg``."""
    out = [f"# {md_text(r.title)}", ""]   # user strings: no control character, no HTML tag
    if r.summary is not None:
        out += ["## Summary", ""] + md_table(r.summary)
    out += [f"**{md_text(r.verdict)}**", ""]
    if r.charts_note:
        out += [f"_{r.charts_note}_", ""]
    out += ["Contents: " + " · ".join(f"{i}. {s.title}" for i, s in enumerate(r.sections, 1)), ""]
    for i, s in enumerate(r.sections, 1):
        out += [f"## {i}. {s.title}", ""]
        for para in map(md_text, s.text):
            out += [para, ""] if not para.startswith("- ") else [para]
        if s.text and s.text[-1].startswith("- "):
            out.append("")
        for t in s.tables:
            out += [f"**{md_text(t.title)}**", ""] + md_table(t)
        for name in s.charts:
            if name in r.charts and chart_dir is not None:
                out += [f"![{r.chart_titles.get(name, name)}]({chart_dir}/{name}.svg)", ""]
    return "\n".join(out).rstrip() + "\n"


CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#222;
max-width:66rem;margin:1.5rem auto;padding:0 1rem}
h1{font-size:1.45rem;border-bottom:2px solid #444;padding-bottom:.3rem;margin:.2rem 0 .8rem}
h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #bbb}
h1,h2,caption,figcaption{break-after:avoid;page-break-after:avoid}
section.summary h2{margin-top:0;border:0}
table.summary{font-size:15px;border:2px solid #444;width:100%}
table.summary th{background:#f2f2f2;width:13rem;text-align:left}
table.summary td{text-align:left}
#summary-decision td,#summary-gap td{font-weight:700}
.verdict{font-weight:600;padding:.5rem .7rem;border-left:4px solid #59a14f;background:#f3f8f2}
.verdict.fail{border-color:#e15759;background:#fbf0f0}
.note{color:#555;font-style:italic}
.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:12px}
caption{text-align:left;font-weight:600;padding:.2rem 0}
th,td{border:1px solid #ccc;padding:.15rem .45rem;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f2f2f2}
tr{break-inside:avoid;page-break-inside:avoid}
thead{display:table-header-group}
figure{margin:.5rem 0 1.2rem;break-inside:avoid;page-break-inside:avoid}
figure svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#555}
code{background:#f4f4f4;padding:0 .2rem}
nav ol{columns:2;font-size:13px}
@media print{body{margin:0;max-width:none;font-size:10.5px}nav{display:none}
.wide{overflow:visible}table{font-size:9.5px}a{color:inherit;text-decoration:none}
section.summary{break-after:page}}
"""


def _inline(text: str) -> str:
    t = html_text(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)


def _html_table(t: Table) -> str:
    """A table that scrolls sideways on screen when wide (never squeezes), numbers right-aligned."""
    num = numeric_columns(t)
    cls = [' class="num"' if n else "" for n in num]
    head = "".join(f"<th{c}>{html_text(h)}</th>" for h, c in zip(t.columns, cls))
    body = "".join("<tr>" + "".join(f"<td{c}>{html_text(str(x))}</td>" for x, c in zip(row, cls))
                   + "</tr>" for row in t.rows)
    legend = f'<p class="note">{html_text(t.legend)}</p>' if t.legend else ""
    return (f'<div class="wide"><table><caption>{html_text(t.title)}</caption><thead><tr>{head}'
            f"</tr></thead><tbody>{body}</tbody></table></div>{legend}")


def _summary_html(t: Table) -> str:
    """The executive summary as a definition grid: question on the left, answer on the right;
    each row gets an id (summary-decision, summary-gap, ...) so a reader can link to it."""
    ids = {"decision": "decision", "gap to the best alternative": "gap", "risks": "risks"}
    rows = "".join(f'<tr id="summary-{ids.get(q, q.split()[0])}"><th scope="row">{html_text(q)}'
                   f"</th><td>{_inline(a)}</td></tr>" for q, a in t.rows)
    return (f'<section class="summary" id="summary"><h2>Summary</h2>'
            f'<table class="summary"><tbody>{rows}</tbody></table></section>')


def _inline_svg(svg: str) -> str:
    """SVG for embedding in HTML: the namespace declarations are implied by the HTML parser."""
    return re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)


def render_review_html(r: Review) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html_text(r.title)}</title>",
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<style>{CSS}</style></head><body>", f"<h1>{html_text(r.title)}</h1>",
             f'<p class="verdict{"" if r.ok else " fail"}">{_inline(r.verdict)}</p>']
    if r.summary is not None:  # the decision and the gap first, above the verdict's detail
        parts.insert(-1, _summary_html(r.summary))
    if r.charts_note:
        parts.append(f'<p class="note">{_inline(r.charts_note)}</p>')
    parts.append("<nav><ol>" + "".join(f'<li><a href="#s{i}">{html_text(s.title)}</a></li>'
                                       for i, s in enumerate(r.sections, 1)) + "</ol></nav>")
    for i, s in enumerate(r.sections, 1):
        parts.append(f'<section id="s{i}"><h2>{i}. {html_text(s.title)}</h2>')
        items = []
        for para in s.text:
            if para.startswith("- "):
                items.append(f"<li>{_inline(para[2:])}</li>")
                continue
            if items:
                parts.append("<ul>" + "".join(items) + "</ul>")
                items = []
            parts.append(f"<p>{_inline(para)}</p>")
        if items:
            parts.append("<ul>" + "".join(items) + "</ul>")
        parts += [_html_table(t) for t in s.tables]
        for name in s.charts:
            if name in r.charts:
                parts.append(f"<figure>{_inline_svg(r.charts[name])}<figcaption>"
                             f"{html_text(r.chart_titles.get(name, name))}</figcaption></figure>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
