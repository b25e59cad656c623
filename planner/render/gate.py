"""Renderings of a gate verdict: terminal table, Markdown, JSON, GitHub workflow annotations.

GitHub annotations follow the workflow-command syntax
``::error file={name},line={line},title={title}::{message}`` (docs.github.com, "Workflow commands
for GitHub Actions"); data is escaped with %25 / %0D / %0A, property values also %3A / %2C.
Formatting only.
"""

from __future__ import annotations

import json

from planner.specs.verdict import FileVerdict, GateRule, Verdict
from planner.render.document import Document, Table, _clean, render_markdown
from planner.io.escape import annotation, annotation_property, visible
from planner.io.units import count, duration, gb, pct, rule_cells
from planner.specs.records import dump

STATUS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}


def _where(r: GateRule) -> str:
    if not r.key:
        return ""
    return f"{r.key}:{r.line}" if r.line else r.key


def fix_line(v: FileVerdict) -> str:
    """The cheapest fix of a failing file, as one line ("" when there is none)."""
    if v.fix is None:
        return ""
    return f"Cheapest fix ({v.fix.kind}): {v.fix.summary}"


def file_document(v: FileVerdict, gib: bool = False, width: int | None = None) -> Document:
    """One file's verdict as a document; given the terminal's ``width``, a rules table that
    would not fit in five columns is printed as one sentence per rule. The file name is the
    user's string: escaped where it enters (the verdict keeps its own line breaks)."""
    name = visible(v.file)
    if v.error:
        return Document(command="check", title=f"{name}: bad input",
                        verdict=f"ERROR: {visible(v.error)}", ok=False)
    s = v.summary
    lay = s.get("layout", {})
    peak, usable = s.get("peak_memory_bytes", 0), s.get("usable_memory_bytes", 0)
    unit = "GiB" if gib else "GB"
    facts = [["model", f"{s.get('model')} ({count(s.get('params', 0))} params)"],
             ["hardware", f"{s.get('hardware')} × {s.get('gpus')} GPUs"],
             ["layout", f"TP {lay.get('tp')} · PP {lay.get('pp')} · DP {lay.get('dp')} · "
                        f"CP {lay.get('cp')} · EP {lay.get('ep')} · ZeRO {lay.get('zero')} · "
                        f"b {lay.get('micro_batch')} · {lay.get('schedule')}"
                        f"{' v' + str(lay.get('chunks')) if lay.get('chunks', 1) > 1 else ''} · "
                        f"SP {'on' if lay.get('sequence_parallel') else 'off'} · "
                        f"recompute {lay.get('recompute')} · {lay.get('precision')}"],
             ["batch", f"{s.get('global_batch')} × {s.get('seq_len')} tokens, "
                       f"{s.get('accumulation', 0):g} micro-batches per step"],
             ["peak memory", f"{gb(peak, gib=gib)} {unit} ({s.get('peak_stage')}) "
                             f"of {gb(usable, gib=gib)} {unit} usable"],
             ["step time", f"{duration(s.get('step_time_s', 0))}, MFU {pct(s.get('mfu', 0))}, "
                           f"bubble {pct(s.get('bubble_fraction', 0))}"]]
    rows = [[STATUS[r.status], r.name, *rule_cells(r.name, r.measured, r.limit, peak, usable, gib),
             _where(r)] for r in v.rules]
    columns = ["status", "rule", "measured", "limit", "key:line"]
    natural = _natural_width(columns, rows)
    if width is not None and natural > width:
        # narrower than five columns need: one sentence per rule, which wraps at its words
        columns = ["status", "rule: measured (limit) at key:line"]
        rows = [[st, f"{name}: {m} (limit {lim})" + (f" at {where}" if where else "")]
                for st, name, m, lim, where in rows]
    failed = [r.name for r in v.rules if r.status == "fail"]
    warned = [r.name for r in v.rules if r.status == "warn"]
    c = v.counts
    if failed:
        verdict = f"FAIL {name}: {len(failed)} rule(s) failed: {', '.join(failed)}"
    else:
        verdict = f"PASS {name}: {c['pass']} passed" + (f", {c['warn']} warning(s): "
                                                          f"{', '.join(warned)}" if warned else "")
    return Document(command="check", title=f"dtplan check: {name} ({v.kind})",
                    tables=[Table("Plan", ["", ""], facts),
                            Table("Rules", columns, rows)],
                    notes=v.notes + ([fix_line(v)] if v.fix else []), verdict=verdict, ok=v.ok)


def render_markdown_verdict(verdict: Verdict, gib: bool = False) -> str:
    parts = []
    for v in verdict.files:
        doc = file_document(v, gib=gib)
        parts.append(render_markdown(doc, heading="##"))
    if verdict.skipped:
        parts.append(skipped_line(verdict))
    return "\n".join(parts)


def skipped_line(verdict: Verdict) -> str:
    """The files under a directory argument that were not checked, as one line."""
    return f"Skipped (neither a plan nor an engine config): {', '.join(verdict.skipped)}"


def render_json_verdict(verdict: Verdict) -> str:
    """The verdict with the envelope every output has (``mode`` after ``command``)."""
    from planner.render.json_out import json_data
    d = dump(verdict)
    payload = {"schema_version": d.pop("schema_version"), "command": d.pop("command"),
               "mode": "verdict", **d}
    return json.dumps(_clean(json_data(payload)), indent=2)


def render_github(verdict: Verdict) -> str:
    """One ``::error``/``::warning`` line per failing/warning rule, then a plain summary line."""
    out = []
    for v in verdict.files:
        if v.error:
            out.append(f"::error file={annotation_property(v.file)},title=dtplan bad input::"
                       f"{annotation(v.error)}")
            continue
        for r in v.rules:
            if r.status == "pass":
                continue
            level = "error" if r.status == "fail" else "warning"
            props = [f"file={annotation_property(v.file)}"]
            if r.line:
                props.append(f"line={r.line}")
            props.append(f"title={annotation_property('dtplan ' + r.name)}")
            msg = f"{r.name}: {r.measured} (limit {r.limit}) — {r.message}"
            out.append(f"::{level} {','.join(props)}::{annotation(msg)}")
        if v.fix is not None:
            out.append(f"::notice file={annotation_property(v.file)},title=dtplan cheapest fix::"
                       f"{annotation(v.fix.summary)}")
    n_fail = sum(1 for v in verdict.files if not v.ok)
    out.append(f"dtplan check: {len(verdict.files) - n_fail} of {len(verdict.files)} file(s) "
               f"passed{' (strict)' if verdict.strict else ''}")
    return "\n".join(out)


def _natural_width(columns: list[str], rows: list[list[str]]) -> int:
    """Characters a table needs unwrapped: its widest cell per column, one space between."""
    return sum(max(len(str(x)) for x in col) for col in zip(columns, *rows)) + len(columns)
