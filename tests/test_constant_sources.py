"""Every efficiency constant of every bundled hardware and framework profile carries a kind and
a source declared beside it (issue #30): listed here, one row per constant; a fitted one names
its data; no source points into this repository (a constant's source is public evidence, not
another of our files); the schema refuses a constant without them at its file:line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.review.assumptions import constant_rows
from planner.specs.constants import framework_constants, hardware_constants
from planner.specs.framework import list_frameworks, load_framework, parse_framework
from planner.specs.hardware_toml import list_profiles, load_profile, load_profile_file
from planner.specs.provenance import KINDS

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = list_profiles()
FRAMEWORKS = list_frameworks()


def _repo_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:   # an unpacked sdist: walk the tree instead
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                and ".venv" not in p.parts and ".git" not in p.parts]
    return out.stdout.split()


REPO_FILES = _repo_files()
FILE_TOKEN = re.compile(r"[\w./*-]+\.(?:toml|json|py|csv|yaml|yml|txt|md)\b")


def internal_paths(text: str) -> list[str]:
    """The file names in `text` that name a file of this repository (its path, a tail of its
    path, or its bare name), e.g. "h100-96gb-500w.toml" or "engine/compute.py"."""
    return [tok for tok in FILE_TOKEN.findall(text)
            if any(f == tok or f.endswith("/" + tok) for f in REPO_FILES)]


def _rows() -> list[tuple[str, str, float, str, str, str]]:
    rows = [(h.name, k, v, p.kind, p.source, p.data)
            for h in HARDWARE for k, v, p in hardware_constants(h)]
    rows += [(f.name, k, v, p.kind, p.source, p.data)
             for f in FRAMEWORKS for k, v, p in framework_constants(f)]
    return rows


ROWS = _rows()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}:{r[1]}" for r in ROWS])
def test_every_constant_has_a_kind_and_a_source(row):
    profile, key, value, kind, source, data = row
    assert kind in KINDS, row
    assert len(source) >= 20, f"{profile} {key}: a source names where, or the reason: {source!r}"
    assert not source.startswith("not stated"), row
    if kind == "fitted":
        assert len(data) >= 20, f"{profile} {key}: a fitted constant names its data"
    else:
        assert not data, row
    assert not internal_paths(source + " " + data), (profile, key, internal_paths(source + data))


def test_the_listing_covers_every_profile_and_key():
    names = {r[0] for r in ROWS}
    assert names >= {h.name for h in HARDWARE} | {f.name for f in FRAMEWORKS}
    h100 = {r[1] for r in ROWS if r[0] == "h100"}
    assert {"gpu.matmul_ceiling_tflops_bf16", "scale_up.bus_efficiency", "scale_out.latency_us",
            "efficiency.sustained_matmul_fraction", "efficiency.flash_attention_fraction",
            "efficiency.overlap_slowdown", "efficiency.uncalibrated_band"} <= h100
    assert {r[1] for r in ROWS if r[0] == "megatron"} >= {"time.bucket_params",
                                                          "time.selective_matmul_share"}


def test_the_internal_path_check_can_fail():
    assert internal_paths("H100 fit (h100-96gb-500w.toml)") == ["h100-96gb-500w.toml"]
    assert internal_paths("kernel class scales it, engine/compute.py") == ["engine/compute.py"]
    assert internal_paths("stas00/ml-engineering compute/accelerator/README.md") == []


TOY = """\
name = "toy"
[gpu]
name = "Toy"
memory_gb = 80
hbm_tbps = 3.35
peak_tflops = { bf16 = 989.4 }
power_w = 700
matmul_ceiling_tflops_bf16 = CEILING
[scale_up]
gpus_per_domain = 8
gpus_per_node = 8
bandwidth_gbps_uni = 450
latency_us = { value = 3.4, kind = "framework-source", source = "NCCL tuning.cc hwLatencies" }
bus_efficiency = { value = 0.8, kind = "kernel-benchmark", source = "nccl-tests busbw" }
[scale_out]
nic_gbit_per_gpu = 400
latency_us = { value = 5, kind = "judgement", source = "a round figure" }
bus_efficiency = { value = 0.9, kind = "judgement", source = "a round figure" }
[host]
pcie_gbps = 50
host_memory_gb = 2048
nvme_gbps = 50
[storage]
write_gbps = 100
read_gbps = 150
"""
GOOD_CEILING = '{ value = 794.5, kind = "kernel-benchmark", source = "MAMF" }'


def _load(tmp_path: Path, ceiling: str) -> Path:
    path = tmp_path / "toy.toml"
    path.write_text(TOY.replace("CEILING", ceiling), encoding="utf-8")
    return path


def test_a_declared_constant_loads_with_its_source(tmp_path):
    hw = load_profile_file(_load(tmp_path, GOOD_CEILING))
    rows = {k: p for k, _, p in hardware_constants(hw)}
    assert rows["gpu.matmul_ceiling_tflops_bf16"].kind == "kernel-benchmark"
    assert rows["scale_up.latency_us"].source == "NCCL tuning.cc hwLatencies"
    # keys the file leaves out are the defaults', with the default's own kind and source
    assert rows["efficiency.sustained_matmul_fraction"].kind == "judgement"


@pytest.mark.parametrize("ceiling,key,says", [
    ("794.5", "gpu.matmul_ceiling_tflops_bf16", 'kind = "<physics|kernel-benchmark'),
    ('{ value = 794.5, source = "MAMF" }', "gpu.matmul_ceiling_tflops_bf16.kind", "missing"),
    ('{ value = 794.5, kind = "kernel-benchmark" }', "gpu.matmul_ceiling_tflops_bf16.source",
     "missing"),
    ('{ value = 794.5, kind = "fitted", source = "a fit" }',
     "gpu.matmul_ceiling_tflops_bf16.data", "names the runs"),
    ('{ value = 794.5, kind = "guess", source = "MAMF" }', "gpu.matmul_ceiling_tflops_bf16.kind",
     "one of physics"),
    ('{ value = 794.5, kind = "judgement", source = " " }',
     "gpu.matmul_ceiling_tflops_bf16.source", "must name"),
    ('{ value = -1, kind = "judgement", source = "x" }', "gpu.matmul_ceiling_tflops_bf16.value",
     "> 0"),
    ('{ value = 794.5, kind = "judgement", source = "x", by = "me" }',
     "gpu.matmul_ceiling_tflops_bf16.by", "unknown key"),
])
def test_a_constant_without_kind_or_source_is_refused_at_its_line(tmp_path, ceiling, key, says):
    path = _load(tmp_path, ceiling)
    with pytest.raises(InputError) as e:
        load_profile_file(path)
    assert e.value.field == f"{path}:8", e.value.field       # the constant's own line
    assert e.value.message.startswith(key + ":") and says in e.value.message, e.value.message
    assert "\n" not in str(e.value)


def test_a_framework_constant_without_a_source_is_refused_at_its_line():
    text = (ROOT / "framework_profiles" / "megatron.toml").read_text(encoding="utf-8")
    bad = re.sub(r"^selective_matmul_share = .*$", "selective_matmul_share = 0.0", text,
                 flags=re.M)
    line = bad.splitlines().index("selective_matmul_share = 0.0") + 1
    with pytest.raises(InputError) as e:
        parse_framework(bad.encode(), "fw.toml")
    assert e.value.field == f"fw.toml:{line}"
    assert e.value.message.startswith("time.selective_matmul_share:")


def test_the_assumptions_print_each_constant_with_kind_and_source():
    hw, fw = load_profile("h100"), load_framework("megatron")
    rows = constant_rows(hw, fw)
    assert len(rows) == len(hardware_constants(hw)) + len(framework_constants(fw))
    assert all(r[2] in KINDS and r[3] for r in rows)


def test_estimate_prints_the_constants_by_kind(dtplan):
    r = dtplan("estimate", "--model", "llama3-8b", "--gpus", "8")
    assert "Efficiency constants by kind: h100" in " ".join(r.out.split())
