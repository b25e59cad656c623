"""Formatting only: a Document (titled tables, notes, a verdict and a JSON payload) rendered
as a rich terminal table, Markdown or JSON. No arithmetic lives here."""

from planner.render.document import Document, Table, render_json, render_markdown
from planner.render.terminal import emit

__all__ = ["Document", "Table", "emit", "render_json", "render_markdown"]
