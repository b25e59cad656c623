"""Regenerate planner/data/error_bands.json: the error band of each regime (framework / GPU
generation) derived from `dtplan calibrate`'s leave-one-family-out residuals.

    python scripts/error_bands.py        # from anywhere; rewrites the file in the package

Run it after a hardware or framework profile's constants change (tests/test_lofo.py fails until
the shipped bands equal what the residuals give).
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.calibration.lofo import bands_document, cross_validate

OUT = Path(__file__).resolve().parent.parent / "planner" / "data" / "error_bands.json"


def main() -> int:
    doc = bands_document(cross_validate())
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(doc['regimes'])} regimes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
