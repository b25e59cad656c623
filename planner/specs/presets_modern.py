"""Presets for today's families, built from their published config.json size fields
(``planner/data/model_configs.json``) through the config reader, so a preset and the file it
cites plan alike. Each entry's source names the config ("as published": the Hub file's size
fields; "assembled": each field's source) and the published size.
tests/test_model_families.py checks each against transformers' count of the same fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.specs.hf_config import config_fields
from planner.specs.model import ModelSpec

CONFIGS_FILE = "model_configs.json"


def _published() -> list[tuple[str, str, str, list[str], str, dict[str, Any]]]:
    # read beside the package's modules, as the calibration sets are (pyproject ships data/*.json)
    text = (Path(__file__).parents[1] / "data" / CONFIGS_FILE).read_text(encoding="utf-8")
    return [(e["preset"], e["name"], e["model_type"], e["aliases"], e["source"], e["config"])
            for e in json.loads(text)]


# (preset, display name, model_type, aliases, source, size fields of the config.json)
PUBLISHED_CONFIGS: list[tuple[str, str, str, list[str], str, dict[str, Any]]] = _published()


def modern_presets() -> list[tuple[str, ModelSpec, list[str]]]:
    """(name, spec, aliases) for each entry, its fields read as its config.json's would be."""
    entries = []
    for name, display, mtype, aliases, source, fields in PUBLISHED_CONFIGS:
        spec_fields, notes, _ = config_fields({"model_type": mtype, **fields}, name)
        # notes[0] names the file read; the rest are the reader's (vision tower, defaults)
        spec = ModelSpec.with_defaults(name=display, source="; ".join([source, *notes[1:]]),
                                       **spec_fields)
        entries.append((name, spec, aliases))
    return entries
