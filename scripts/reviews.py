"""Regenerate the example design reviews in examples/reviews/ with the current `dtplan report`.

    python scripts/reviews.py            # from anywhere; writes examples/reviews/*.md and *_files/

Each review is `dtplan report PLAN -o examples/reviews/NAME.md --force` run from the repository
root (the review quotes the plan's path as given). tests/test_architecture.py regenerates them
and compares, so a change to the review's figures or wording shows up as a stale example.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# (plan file, review written), both relative to the repository root.
EXAMPLES = [("examples/plans/llama3-70b-256xh100.yaml", "examples/reviews/llama3-70b-256xh100.md")]


def report_argv(plan: str, out: str) -> list[str]:
    """The `dtplan` arguments that write one example review."""
    return ["report", plan, "-o", out, "--force"]


def main() -> int:
    for plan, out in EXAMPLES:
        cmd = [sys.executable, "-m", "planner", *report_argv(plan, out)]
        done = subprocess.run(cmd, cwd=REPO)
        if done.returncode != 0:
            return done.returncode
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
