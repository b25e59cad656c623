"""The design review's shape: its sections in order, a section, the whole review.

``report.build_review`` fills it (``review.sections`` builds each section); ``render.review``
prints it as Markdown or HTML. No numbers are computed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from planner.render.document import Table

# Section titles, top to bottom (tests check every one is present).
SECTIONS = ("Inputs and assumptions", "Chosen layout and alternatives", "Memory budget per stage",
            "Step time and communication", "Pipeline bubble", "Global batch arithmetic",
            "Checkpoint plan", "Time, energy and cost to train", "Throughput versus GPU count",
            "Rejected layouts", "Rules")


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)       # paragraphs (`code`, **bold** allowed)
    tables: list[Table] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)     # keys into Review.charts


@dataclass
class Review:
    title: str
    source: str
    verdict: str
    ok: bool
    sections: list[Section]
    charts: dict[str, str] = field(default_factory=dict)          # name → SVG text
    chart_titles: dict[str, str] = field(default_factory=dict)
    charts_note: Optional[str] = None
    summary: Optional[Table] = None                                # the executive summary, first
