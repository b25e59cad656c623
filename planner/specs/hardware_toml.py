"""Hardware profile files: the TOML schema each file is checked against (one line naming the
file, the key and what is allowed), the bundled profiles by name, a profile file by path, and
the command line's what-if overrides (planner.specs.hardware holds the records)."""

from __future__ import annotations

import dataclasses
import math
from functools import partial
import os
from pathlib import Path
from typing import Any, Collection, Optional

from planner.engine import fp8
from planner.errors import InputError, named
from planner.specs.efficiency import Efficiency
from planner.specs.hardware import (GB, GBIT, GIB, HOST_RESERVE_GB, PRECISIONS, TB, TFLOP, US,
                                    GPUSpec, HardwareProfile, Host, ScaleOut, ScaleUp, Storage)
from planner.specs.provenance import Provenance, key_line, unwrap
from planner.specs.records import dump, validate


# ----------------------------------------------------------------------------------------------
# TOML schema: section -> key -> (check, required). Checked by hand before pydantic so a bad file
# gets one line naming the file, the key and what is allowed.

_POS, _NONNEG, _POSINT, _FRAC, _GE1 = "pos", "nonneg", "posint", "frac", "ge1"
_STR, _STRLIST, _TABLE, _PEAKS, _BOOL = "str", "strlist", "table", "peaks", "bool"

_ALLOWED = {
    _POS: "a number > 0",
    _NONNEG: "a number >= 0",
    _POSINT: "an integer >= 1",
    _FRAC: "a number in (0, 1]",
    _GE1: "a number >= 1",
    _STR: "a string",
    _BOOL: "true or false",
    _STRLIST: "a list of strings",
    _TABLE: "a table",
    _PEAKS: "a table of precision = TFLOP/s > 0",
}

_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "": {"name": (_STR, True), "aliases": (_STRLIST, False), "description": (_STR, False),
         "notes": (_STR, False), "gpu": (_TABLE, True), "scale_up": (_TABLE, True),
         "scale_out": (_TABLE, True), "host": (_TABLE, True), "storage": (_TABLE, True),
         "efficiency": (_TABLE, False)},
    "gpu": {"name": (_STR, True), "memory_gb": (_POS, True), "hbm_tbps": (_POS, True),
            "peak_tflops": (_PEAKS, True), "power_w": (_POS, True),
            "matmul_ceiling_tflops_bf16": (_POS, True), "fp8_recipes": (_STRLIST, False),
            "fp8_any_layout": (_BOOL, False)},
    "scale_up": {"gpus_per_domain": (_POSINT, True), "gpus_per_node": (_POSINT, True),
                 "bandwidth_gbps_uni": (_POS, True), "latency_us": (_NONNEG, True),
                 "bus_efficiency": (_FRAC, True), "nvls": (_BOOL, False),
                 "nvls_bus_efficiency": (_FRAC, False)},
    "scale_out": {"nic_gbit_per_gpu": (_POS, True), "latency_us": (_NONNEG, True),
                  "bus_efficiency": (_FRAC, True), "oversubscription": (_GE1, False),
                  "pod_gpus": (_POSINT, False)},
    "host": {"pcie_gbps": (_POS, True), "host_memory_gb": (_POS, True), "nvme_gbps": (_POS, True),
             "reserve_gb": (_NONNEG, False)},
    "storage": {"write_gbps": (_POS, True), "read_gbps": (_POS, True)},
    "efficiency": {"matmul_half_hidden": (_POS, False), "matmul_half_tokens": (_POS, False),
                   "memory_passes": (_NONNEG, False), "tp_exposed_fraction": (_FRAC, False),
                   "overlap_slowdown": (_FRAC, False),
                   "comm_sm_fraction": (_FRAC, False),
                   "sustained_matmul_fraction": (_FRAC, False),
                   "flash_attention_fraction": (_FRAC, False),
                   "fa3_attention_fraction": (_FRAC, False),
                   "attention_half_seq": (_POS, False),
                   "fp8_matmul_ceiling_fraction": (_FRAC, False),
                   "recipe_ceiling_fractions": (_TABLE, False),
                   "grouped_gemm_fraction": (_FRAC, False),
                   "software_stack": (_STR, False), "calibrated_on": (_STR, False),
                   "error_bands": (_TABLE, False)},
}


# The efficiency constants: each written `{ value = …, kind = "…", source = "…" }` (a fitted one
# also `data = "…"`), so where it comes from is declared once beside it (specs/provenance.py).
PROVENANCED: dict[str, tuple[str, ...]] = {
    "gpu": ("matmul_ceiling_tflops_bf16",),
    "scale_up": ("latency_us", "bus_efficiency", "nvls_bus_efficiency"),
    "scale_out": ("latency_us", "bus_efficiency"),
    "host": ("reserve_gb",),
    "efficiency": tuple(k for k, (c, _) in _SCHEMA["efficiency"].items()
                        if c not in (_STR, _TABLE)),
}


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ok(check: str, v: Any) -> bool:
    if check == _STR:
        return isinstance(v, str)
    if check == _BOOL:
        return isinstance(v, bool)
    if check == _STRLIST:
        return isinstance(v, list) and all(isinstance(s, str) and s for s in v)
    if check in (_TABLE, _PEAKS):
        return isinstance(v, dict)
    if check == _POSINT:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1
    if not _is_num(v):
        return False
    return {_POS: v > 0, _NONNEG: v >= 0, _FRAC: 0 < v <= 1, _GE1: v >= 1}[check]


def _unknown(where: str, key: str, known: Collection[str]) -> str:
    import difflib   # only for "did you mean" (its import is start-up time every run pays)
    near = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"{where}{key}: unknown key{hint} (allowed: {', '.join(known)})"


def _check(raw: dict, path: str, text: str) -> dict[str, Provenance]:
    """Check a parsed profile against the schema (one line naming file, key and what is
    allowed); the efficiency constants' tables are replaced by their values in `raw` and their
    kind and source returned, keyed "section.key"."""
    provenance: dict[str, Provenance] = {}
    for section, keys in _SCHEMA.items():
        table = raw if section == "" else raw.get(section, {})
        where = f"{section}." if section else ""
        if not isinstance(table, dict):
            raise InputError(path, f"{section}: must be a table")
        for key in table:
            if key not in keys:
                raise InputError(path, _unknown(where, key, keys))
        for key in PROVENANCED.get(section, ()):
            if key in table:
                check = keys[key][0]
                table[key], provenance[f"{section}.{key}"] = unwrap(
                    table[key], f"{section}.{key}", partial(_at, path, text, section),
                    _ALLOWED[check], partial(_ok, check))
        for key, (check, required) in keys.items():
            if key not in table:
                if required:
                    raise InputError(path, f"{where}{key}: missing; must be {_ALLOWED[check]}")
                continue
            v = table[key]
            if not _ok(check, v):
                raise InputError(path, f"{where}{key}: must be {_ALLOWED[check]}, got {v!r}")
            if check == _PEAKS:
                for p, x in v.items():
                    if p not in PRECISIONS:
                        raise InputError(path, _unknown(f"{where}{key}.", p, PRECISIONS))
                    if not (_is_num(x) and x > 0):
                        raise InputError(path, f"{where}{key}.{p}: must be a number > 0, got {x!r}")
                if "bf16" not in v:
                    raise InputError(path, f"{where}{key}.bf16: missing; must be a number > 0")
    g = raw["gpu"]
    _check_recipes(path, g.get("fp8_recipes", []),
                   raw.get("efficiency", {}).get("recipe_ceiling_fractions", {}))
    if g["matmul_ceiling_tflops_bf16"] > g["peak_tflops"]["bf16"]:
        raise InputError(_at(path, text, "gpu", "gpu.matmul_ceiling_tflops_bf16"),
                         "gpu.matmul_ceiling_tflops_bf16: must be <= gpu.peak_tflops.bf16")
    return provenance


def _at(path: str, text: str, section: str, dotted: str) -> str:
    """`path:line` of a "section.key" in [section] (the path alone when the line is not
    found)."""
    line = key_line(text, section, dotted.split(".", 1)[-1])
    return f"{path}:{line}" if line else path


def _check_recipes(path: str, recipes: list[str], ceilings: dict[str, Any]) -> None:
    """gpu.fp8_recipes names known recipes; efficiency.recipe_ceiling_fractions maps one of
    them to a share in (0, 1]."""
    for name in recipes:
        if name not in fp8.NAMES:
            raise InputError(path, _unknown("gpu.fp8_recipes.", name, fp8.NAMES))
    for name, x in ceilings.items():
        if name not in fp8.NAMES:
            raise InputError(path, _unknown("efficiency.recipe_ceiling_fractions.", name,
                                            fp8.NAMES))
        if not _ok(_FRAC, x):
            raise InputError(path, f"efficiency.recipe_ceiling_fractions.{name}: must be "
                                   f"{_ALLOWED[_FRAC]}, got {x!r}")


def _from_raw(raw: dict, source: Optional[str],
              provenance: dict[str, Provenance]) -> HardwareProfile:
    """Human-unit TOML dict (already checked) → SI-unit HardwareProfile."""
    g, su, so, h, st = (raw[k] for k in ("gpu", "scale_up", "scale_out", "host", "storage"))
    return HardwareProfile(
        name=raw["name"],
        aliases=tuple(raw.get("aliases", ())),
        description=raw.get("description", ""),
        notes=raw.get("notes", ""),
        source_file=source,
        gpu=GPUSpec(
            name=g["name"],
            memory_bytes=g["memory_gb"] * GIB,
            hbm_bytes_per_s=g["hbm_tbps"] * TB,
            peak_flops={k: float(v) * TFLOP for k, v in g["peak_tflops"].items()},
            power_w=float(g["power_w"]),
            matmul_ceiling_fraction=g["matmul_ceiling_tflops_bf16"] / g["peak_tflops"]["bf16"],
            fp8_recipes=tuple(g.get("fp8_recipes", ())),
            fp8_any_layout=bool(g.get("fp8_any_layout", False)),
        ),
        scale_up=ScaleUp(
            gpus_per_domain=su["gpus_per_domain"],
            gpus_per_node=su["gpus_per_node"],
            bandwidth_bytes_per_s=su["bandwidth_gbps_uni"] * GB,
            latency_s=su["latency_us"] * US,
            bus_efficiency=float(su["bus_efficiency"]),
            nvls=su.get("nvls", False),
            nvls_bus_efficiency=su.get("nvls_bus_efficiency"),
        ),
        scale_out=ScaleOut(
            nic_bytes_per_s=so["nic_gbit_per_gpu"] * GBIT,
            latency_s=so["latency_us"] * US,
            bus_efficiency=float(so["bus_efficiency"]),
            oversubscription=float(so.get("oversubscription", 1.0)),
            pod_gpus=so.get("pod_gpus"),
        ),
        host=Host(
            pcie_bytes_per_s=h["pcie_gbps"] * GB,
            host_memory_bytes=h["host_memory_gb"] * GIB,
            nvme_bytes_per_s=h["nvme_gbps"] * GB,
            reserve_bytes=float(h.get("reserve_gb", HOST_RESERVE_GB)) * GIB,
        ),
        storage=Storage(write_bytes_per_s=st["write_gbps"] * GB,
                        read_bytes_per_s=st["read_gbps"] * GB),
        efficiency=Efficiency(**_floats(raw.get("efficiency", {}))),
        provenance=provenance,
    )


def _floats(table: dict[str, Any]) -> dict[str, Any]:
    """A checked TOML table's whole numbers as floats (a file writes `matmul_half_hidden = 64`)."""
    return {k: _floats(x) if isinstance(x, dict) else
            float(x) if isinstance(x, int) and not isinstance(x, bool) else x
            for k, x in table.items()}


def _parse(text: str, path: str, *, trusted: bool = False) -> HardwareProfile:
    """A profile from TOML text, parsed by the one bounded reader (planner.inputs). A bundled
    (`trusted`) profile is taken as the hand checks pass it; a user's file is validated by the
    boundary model too."""
    from planner.io.parse import parse_text

    raw = parse_text(text, "toml", path)
    prof = _from_raw(raw, path, _check(raw, path, text))
    if trusted:
        return prof
    from pydantic import ValidationError
    try:
        return validate(HardwareProfile, dump(prof))
    except ValidationError as e:  # belt and braces: _check should have caught it
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise InputError(path, f"{loc}: {err['msg']}") from None


def profile_from_text(text: str, path: str) -> HardwareProfile:
    """A user profile from TOML text about to be written to `path` (checked before writing,
    so an invalid profile is never left on disk)."""
    return _parse(text, path)


def load_profile_file(path: str | Path, *, option: Optional[str] = None) -> HardwareProfile:
    """Load one profile TOML from any path through the one bounded reader (planner.inputs);
    problems raise InputError(<option or path>, '<key>: …')."""
    from planner.io.read import read_file, shown

    opened, text = read_file(path, what="hardware profile .toml", option=option)
    return _parse(text, f"{option}: {shown(opened)}" if option else shown(opened))


def bundled_dir(package: str) -> Path:
    """The directory of a bundled data package (``hardware_profiles``, ``framework_profiles``):
    the source tree's, or the installed wheel's (pyproject's package-data ships the TOMLs
    beside their ``__init__.py``). Read as a plain path: importlib.resources would load
    tempfile, shutil, zipfile and their compressors on every run (~10 ms) for the same files."""
    import framework_profiles
    import hardware_profiles
    data = {"hardware_profiles": hardware_profiles, "framework_profiles": framework_profiles}
    return Path(next(iter(data[package].__path__)))


_BUNDLED: Optional[tuple[HardwareProfile, ...]] = None


def list_profiles() -> list[HardwareProfile]:
    """The bundled profiles (``hardware_profiles/*.toml``), sorted by name."""
    global _BUNDLED
    if _BUNDLED is None:
        found = []
        for entry in bundled_dir("hardware_profiles").iterdir():
            if entry.name.endswith(".toml") and entry.is_file():
                found.append(_parse(entry.read_text(encoding="utf-8"), str(entry), trusted=True))
        _BUNDLED = tuple(sorted(found, key=lambda prof: prof.name))
    return list(_BUNDLED)


def load_profile(name: str) -> HardwareProfile:
    """A bundled profile by name or alias, case-insensitive. A name that is its own file
    (`h100` → h100.toml) is parsed alone, not with every bundled profile."""
    want = name.strip().lower()
    entry = bundled_dir("hardware_profiles") / f"{want}.toml"
    # os.path.isfile never raises; Path.is_file does on a name too long for the file system
    if _BUNDLED is None and want.replace("-", "").isalnum() and os.path.isfile(entry):
        prof = _parse(entry.read_text(encoding="utf-8"), str(entry), trusted=True)
        if prof.name.lower() == want:
            return prof
    profiles = list_profiles()
    for prof in profiles:
        if want == prof.name.lower() or want in (a.lower() for a in prof.aliases):
            return prof
    names = [prof.name for prof in profiles]
    every = names + [a.lower() for prof in profiles for a in prof.aliases]
    import difflib
    near = difflib.get_close_matches(want, every, n=1, cutoff=0.5)
    hint = ""
    if near:
        target = next(prof.name for prof in profiles
                      if near[0] in [prof.name] + [a.lower() for a in prof.aliases])
        hint = f"; did you mean '{target}'?"
    raise InputError(named("hardware"), f"unknown profile '{name}'; known: {', '.join(names)}{hint}")


def with_overrides(profile: HardwareProfile, *, gpus_per_node: Optional[int] = None,
                   gpu_memory_gb: Optional[float] = None,
                   nic_gbit_per_gpu: Optional[float] = None) -> HardwareProfile:
    """A copy of `profile` with command-line overrides applied (None leaves a value alone).

    When the NVLink domain is the node (gpus_per_domain == gpus_per_node, e.g. DGX) the domain
    follows a new gpus_per_node; a domain larger than a node (NVL72) or smaller (PCIe) stays.
    """
    gpu, su, so = profile.gpu, profile.scale_up, profile.scale_out
    if gpus_per_node is not None:
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
            raise InputError(named("gpus_per_node"), f"must be an integer >= 1, got "
                                                     f"{gpus_per_node!r}")
        domain = gpus_per_node if su.gpus_per_domain == su.gpus_per_node else su.gpus_per_domain
        su = dataclasses.replace(su, gpus_per_domain=domain, gpus_per_node=gpus_per_node)
    if gpu_memory_gb is not None:
        if not (_is_num(gpu_memory_gb) and gpu_memory_gb > 0):
            raise InputError(named("gpu_memory_gb"), f"must be a number > 0, got "
                                                     f"{gpu_memory_gb!r}")
        gpu = dataclasses.replace(gpu, memory_bytes=gpu_memory_gb * GIB)
    if nic_gbit_per_gpu is not None:
        if not (_is_num(nic_gbit_per_gpu) and nic_gbit_per_gpu > 0):
            raise InputError(named("nic_gbit_per_gpu"), f"must be a number > 0, got "
                                                        f"{nic_gbit_per_gpu!r}")
        so = dataclasses.replace(so, nic_bytes_per_s=nic_gbit_per_gpu * GBIT)
    return dataclasses.replace(profile, gpu=gpu, scale_up=su, scale_out=so)


def load_hardware(text: str) -> HardwareProfile:
    """A profile name or a path to a profile TOML (a CLI option, trusted)."""
    if text.endswith(".toml") or "/" in text:
        return load_profile_file(text, option="--hardware")
    return load_profile(text)
