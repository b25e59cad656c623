"""Named variants of a framework profile: the same trainer as one release of a tool built on it
ran, written in the profile as ``[variants.<name>]`` with a ``source`` and the ``[memory]``
values that differ (``[variants.<name>.memory]``), each cited in a TOML comment there.

A variant prices a published measurement taken with that release (tests/test_qlora_published.py
selects litgpt's); ``with_variant(load_framework("fsdp"), "litgpt-2023")`` gives it.
"""

from __future__ import annotations

import dataclasses

from pydantic import ValidationError

from planner.errors import InputError, named, validation_message
from planner.specs.framework import FrameworkProfile
from planner.specs.framework_memory import MemoryBehaviour
from planner.specs.records import validate


def variant_names(fw: FrameworkProfile) -> list[str]:
    """The variants a profile names, sorted."""
    return sorted(fw.variants)


def with_variant(fw: FrameworkProfile, name: str) -> FrameworkProfile:
    """`fw` with variant `name`'s [memory] values in place of its own; its name, time and so its
    calibration regime stay the profile's, its description and source say the variant (it names
    no variants itself). An unknown name or a bad value raises InputError."""
    table = fw.variants.get(name)
    if table is None:
        known = ", ".join(variant_names(fw)) or "none"
        raise InputError(named("framework"), f"{fw.name} has no variant {name!r}; known: {known}")
    overrides = table.get("memory", {})
    try:
        memory = validate(MemoryBehaviour, {**dataclasses.asdict(fw.memory), **overrides})
    except ValidationError as e:
        raise InputError(named("framework"), f"variant {name}: {validation_message(e)}") from None
    return dataclasses.replace(fw, memory=memory, variants={},
                               description=f"{fw.description}; variant {name}",
                               source=f"{fw.source}; {table.get('source', name)}")
