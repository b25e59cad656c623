"""The design review's parts: its shape (``doc``), one builder per section (``sections``), the
assumption tables (``assumptions``) and the executive summary (``summary``). ``planner.review.build``
assembles them; ``render.review`` prints the result."""
