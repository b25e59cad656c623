"""Writing a calibrated hardware profile: the base profile's own TOML with the fitted keys
replaced in place (each with a comment naming its evidence and the value it replaced), so
every constant the evidence did not identify keeps its source comment unchanged."""

from __future__ import annotations

import re
from pathlib import Path

from planner.errors import InputError, named
from planner.io.escape import toml_comment, toml_string
from planner.io.read import shown
from planner.io.write import write_text
from planner.specs.hardware import HardwareProfile
from planner.specs.hardware_toml import PROVENANCED, load_profile_file, profile_from_text
from planner.specs.provenance import Provenance, toml_constant

SECTION = re.compile(r"^\s*\[([A-Za-z_]+)\]\s*(#.*)?$")


def _key_line(key: str) -> re.Pattern:
    return re.compile(rf"^(\s*){re.escape(key)}\s*=\s*([^#\n]*?)\s*(#.*)?$")


def _set(lines: list[str], section: str, key: str, value: str, comment: str) -> None:
    """Replace `key = ...` inside [section] (or the top level for section ""); add it at the
    section's end (creating the section) when absent."""
    current, end = "", None
    pat = _key_line(key)
    for i, line in enumerate(lines):
        if m := SECTION.match(line):
            if current == section and end is None:
                end = i
            current = m[1]
            continue
        if current == section and (m := pat.match(line)):
            lines[i] = f"{m[1]}{key} = {value}" + (f"  # {toml_comment(comment)}" if comment else "")
            return
    new = f"{key} = {value}" + (f"  # {toml_comment(comment)}" if comment else "")
    if section == "":
        lines.insert(0, new)
    elif current == section and end is None:
        lines.append(new)
    elif end is not None:
        lines.insert(end, new)
    else:
        lines += ["", f"[{section}]", new]


def calibrated_toml(base: HardwareProfile, name: str, values: dict[str, tuple[float, str]],
                    evidence: list[str]) -> str:
    """The base profile's TOML with `values` ("section.key" -> (value, why)) applied."""
    if not base.source_file or not Path(base.source_file).is_file():
        raise InputError(named("hardware"), f"profile {base.name} has no TOML file to start from")
    lines = Path(base.source_file).read_text(encoding="utf-8").splitlines()
    _set(lines, "", "name", toml_string(name), "")
    _set(lines, "", "aliases", "[]", "")
    _set(lines, "", "description", toml_string(
        f"{base.description} - calibrated on " + ", ".join(Path(e).name for e in evidence)), "")
    src = load_profile_file(base.source_file)
    overrides = {"gpu.memory_gb": (base.gpu.memory_bytes / 2**30, src.gpu.memory_bytes / 2**30),
                 "scale_up.gpus_per_node": (base.scale_up.gpus_per_node, src.scale_up.gpus_per_node),
                 "scale_up.gpus_per_domain": (base.scale_up.gpus_per_domain,
                                              src.scale_up.gpus_per_domain),
                 "scale_out.nic_gbit_per_gpu": (base.scale_out.nic_bytes_per_s * 8 / 1e9,
                                                src.scale_out.nic_bytes_per_s * 8 / 1e9)}
    for dotted, (now, was) in overrides.items():  # plan / option overrides of the base
        if abs(now - was) > 1e-9 * max(1.0, abs(was)):
            section, key = dotted.split(".", 1)
            _set(lines, section, key, f"{now:g}", f"as the job ran (profile {base.name}: {was:g})")
    data = ", ".join(Path(e).name for e in evidence)
    for dotted, (value, why) in values.items():
        section, key = dotted.split(".", 1)
        # an efficiency constant carries its kind and source beside it: fitted on the evidence
        text = (toml_constant(value, Provenance(kind="fitted", source=f"dtplan calibrate: {why}",
                                                data=data or "the evidence given"))
                if key in PROVENANCED.get(section, ()) else f"{value:.4g}")
        _set(lines, section, key, text, f"calibrated: {why}")
    if any(k.startswith("efficiency.") for k in values) and base.efficiency.error_bands:
        # the base's bands were the residuals of its own constants on published runs
        _set(lines, "efficiency", "error_bands", "{}", "dropped: the base profile's bands "
             "measured its constants, not these (estimates print the wide band with its reason)")
    header = [f"# Calibrated by `dtplan calibrate` from profile '{base.name}' with:"]
    header += [f"#   {toml_comment(e)}" for e in evidence]   # a name is one comment line
    return "\n".join(header + lines) + "\n"


def write_profile(path: str, text: str, force: bool) -> HardwareProfile:
    """Check the profile as --hardware-file would read it, then write it atomically (no
    clobber without force): an invalid profile is never left on disk."""
    profile = profile_from_text(text, shown(path))
    write_text(path, text, force=force, field="-o")
    return profile
