"""What the outputs promise a user (issue #16's leftovers): a nudge when the batch is what holds
MFU back, citations only to files that ship, byte figures and counts as JSON integers with
schemas that say so, a schema for every JSON shape, and the README's commands still running."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan

jsonschema = pytest.importorskip("jsonschema")

EVIDENCE = Path(ROOT) / "tests" / "data" / "evidence"
GOOD = "examples/plans/llama3-70b-256xh100.yaml"
CAVEAT = "dtplan does not judge convergence"


def _valid(command: str, out: dict) -> list[str]:
    s = run_dtplan("schema", command).json()
    jsonschema.Draft202012Validator.check_schema(s)
    v = jsonschema.Draft202012Validator(s)
    return [f"{list(e.path)}: {e.message[:160]}" for e in v.iter_errors(out)][:5]


# ---- the batch nudge ------------------------------------------------------------------------

def test_405b_at_the_default_batch_is_told_a_bigger_batch_raises_mfu():
    """The audit's case: 405B on 16,384 H100 at the default 4M tokens ranks a 37.4% MFU winner
    (Megatron's schedules only: 1F1B and interleaved); the search at 2× the batch gives 43.9%
    and at 4× 48.1%, so fit names 2048 sequences. (The figures follow the Megatron profile's
    host time per optimizer step, refitted when the run set changes, and the overlap law:
    37.0 / 43.6 / 47.8% before compute was slowed beside overlapped collectives; 38.3 / 44.4 /
    48.3% before the host time; 35.3 / 42.5 / 47.6% before interleaving could leave the first and last chunk without a
    layer; 33.0 / 39.9 / 44.6% before the output layer was priced on the stage that holds it;
    35.1 / 42.4 / 47.5% before the h100 profile's kernel-level attention and NVLink constants.)"""
    r = run_dtplan("fit", "--model", "llama3.1-405b", "--gpus", "16384", "-f", "json")
    assert r.code == 0, r.err
    j = r.json()
    a = j["batch_advice"]
    assert a["factor"] == 2 and a["global_batch"] == 2048 and a["tokens_per_batch"] == 2048 * 4096
    assert round(a["base_mfu"], 3) == round(j["layouts"][0]["mfu"], 3) == 0.374
    assert round(a["mfu"], 3) == 0.439 and round(a["tried"]["4×"], 3) == 0.481
    assert a["gain_fraction"] > a["threshold_fraction"] == 0.10
    note = [n for n in j["notes"] if n.startswith("Bigger batch")]
    assert len(note) == 1 and "--global-batch 2048" in note[0] and CAVEAT in note[0]
    assert "critical batch size" in note[0] and "43.9%" in note[0] and "48.1%" in note[0]
    assert not _valid("fit", j)


def test_fit_advice_is_the_search_at_that_batch():
    """The advised MFU is what `fit --global-batch N` ranks first: no formula of its own."""
    base = ["fit", "--model", "llama3-8b", "--gpus", "512", "--seq-len", "4096"]
    a = run_dtplan(*base, "--global-batch", "256", "-f", "json").json()["batch_advice"]
    assert a is not None and a["global_batch"] in (512, 1024)
    again = run_dtplan(*base, "--global-batch", str(a["global_batch"]), "-f", "json").json()
    assert again["layouts"][0]["mfu"] == pytest.approx(a["mfu"], rel=1e-9)
    assert again["layouts"][0]["layout"] == a["layout"]


def test_estimate_advice_is_the_same_layout_at_the_bigger_batch():
    base = ["estimate", "--model", "llama3-70b", "--gpus", "2048", "--tp", "8", "--pp", "8",
            "--seq-len", "8192"]
    j = run_dtplan(*base, "--global-batch", "256", "-f", "json").json()
    a = j["batch_advice"]
    assert a["factor"] == 2 and a["global_batch"] == 512 and a["base_mfu"] == j["mfu"]
    bigger = run_dtplan(*base, "--global-batch", "512", "-f", "json").json()
    assert bigger["mfu"] == pytest.approx(a["mfu"], rel=1e-12)
    assert a["gain_fraction"] == pytest.approx(bigger["mfu"] / j["mfu"] - 1, rel=1e-12)
    assert not _valid("estimate", j)
    table = run_dtplan(*base, "--global-batch", "256").out
    assert "Bigger batch: --global-batch 512" in table and CAVEAT in table


def test_no_nudge_when_the_batch_is_not_the_problem():
    for args in (["fit", "--model", "llama3-8b", "--gpus", "8"],
                 ["estimate", "--model", "llama3-8b", "--gpus", "8"]):
        j = run_dtplan(*args, "-f", "json").json()
        assert j["batch_advice"] is None
        assert not any(n.startswith("Bigger batch") for n in j["notes"])


# ---- citations only to files that ship ------------------------------------------------------

UNSHIPPED = ("CALIBRATION.md", "ECOSYSTEM.md", "SOURCES.md", "calibration_modern.json",
             "gpu_specs.json", "hf_models.json", "shared/", "fixtures/real", "/work/shared")
COMMANDS = [
    ("calibrate",), ("calibrate", "-f", "json"), ("calibrate", "--hardware", "h100-96gb-500w"),
    ("profiles", "show", "h100-96gb-500w"), ("profiles", "show", "a100-80g", "-f", "markdown"),
    ("fit", "--model", "llama3-8b", "--gpus", "8", "-f", "markdown"),
    ("estimate", "--model", "llama3-8b", "--gpus", "8", "--train-tokens", "1e12"),
    ("memory", "--params", "7e9", "--gpus", "8"),
    ("checkpoint", "--model", "llama3-8b", "--gpus", "64", "--gpu-mtbf-hours", "50000"),
    ("check", GOOD, "-f", "json"),
    ("calibrate", "--from", str(EVIDENCE / "nccl_wrapped_tagged.txt"), "--hardware", "a100-40g"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:60])
def test_output_cites_no_file_a_user_lacks(args):
    r = run_dtplan(*args)
    assert r.code in (0, 1), r.err
    for word in UNSHIPPED:
        assert word not in r.out + r.err, word


def test_help_cites_no_file_a_user_lacks():
    names = re.findall(r"^│ (\w[\w-]*) ", run_dtplan("--help").out, re.M)
    assert {"fit", "estimate", "calibrate", "compare"} <= set(names)
    for name in names + ["profiles show"]:
        r = run_dtplan(*name.split(), "--help")
        assert r.code == 0, (name, r.err)
        for word in UNSHIPPED:
            assert word not in r.out, (name, word)


# ---- JSON integers, and a schema for every shape --------------------------------------------

def _byte_values(node, key=""):
    """(key, value) of every byte figure: *_bytes keys and the values of items_bytes."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k.endswith("_bytes") and isinstance(v, dict):
                yield from ((f"{k}.{kk}", vv) for kk, vv in v.items())
            elif k.endswith("_bytes"):
                yield k, v
            else:
                yield from _byte_values(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _byte_values(v, key)


@pytest.mark.parametrize("command,args", [
    ("estimate", ["estimate", "--model", "llama3-70b", "--gpus", "256", "--tp", "8", "--pp", "4",
                  "--seq-len", "8192", "--train-tokens", "1e12"]),
    ("fit", ["fit", "--model", "llama3-8b", "--gpus", "8"]),
    ("memory", ["memory", "--model", "llama3-8b", "--gpus", "8", "--zero", "3"]),
    ("check", ["check", GOOD]),
    ("profiles", ["profiles", "show", "h100"]),
    ("checkpoint", ["checkpoint", "--model", "llama3-8b", "--gpus", "64", "--gpu-mtbf-hours", "5e4"]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_byte_figures_and_counts_are_integers(command, args):
    j = run_dtplan(*args, "-f", "json").json()
    values = list(_byte_values(j))
    assert values
    bad = [(k, v) for k, v in values if v is not None and not isinstance(v, int)]
    assert not bad, bad[:5]
    for k in ("gpus", "global_batch", "seq_len", "tokens_per_step"):
        if k in j:
            assert isinstance(j[k], int), k
    assert not _valid(command, j)


def test_schemas_say_integer_for_bytes_and_whole_counts():
    props = run_dtplan("schema", "estimate").json()["properties"]
    for k in ("peak_memory_bytes", "headroom_bytes", "capacity_bytes", "tokens_per_step", "gpus"):
        assert props[k]["type"] == "integer", k
    stage = run_dtplan("schema", "estimate").json()["$defs"]["StageMemory"]["properties"]
    assert stage["items_bytes"]["additionalProperties"]["type"] == "integer"
    assert props["accumulation"]["type"] == "number"  # fractional for a layout whose batch fails
    j = run_dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "-f", "json").json()
    v = jsonschema.Draft202012Validator(run_dtplan("schema", "estimate").json())
    assert not v.is_valid({**j, "peak_memory_bytes": j["peak_memory_bytes"] + 0.5})


@pytest.mark.parametrize("command,mode,args", [
    ("compare", "compare", ["compare", EVIDENCE / "torchtitan_llama3.1-8b_8xh100.log",
                            "--plan", EVIDENCE / "llama3.1-8b-8xh100-fsdp8.yaml"]),
    ("calibrate", "evidence", ["calibrate", "--from", EVIDENCE / "nccl_wrapped_tagged.txt",
                               EVIDENCE / "torchtitan_llama3.1-8b_8xh100.log"]),
    ("calibrate", "profile-fit", ["calibrate", "--from", EVIDENCE / "nccl_wrapped_tagged.txt",
                                  "--hardware", "a100-40g"]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_compare_and_evidence_outputs_have_a_schema(command, mode, args):
    r = run_dtplan(*args, "-f", "json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["command"] == command and j["mode"] == mode
    assert not _valid(command, j)
    assert not jsonschema.Draft202012Validator(run_dtplan("schema", command).json()).is_valid(
        {**j, "unexpected": 1})


# ---- one spelling per figure ----------------------------------------------------------------

def test_capacity_and_mtbf_are_spelled_one_way():
    check = run_dtplan("check", GOOD, "-f", "json").json()
    measured = [r["measured"] for f in check["files"] for r in f["rules"]
                if r["name"] == "max-memory-fraction"]
    assert measured and "of 80 GiB (85.9 GB)" in measured[0] and "85.90" not in measured[0]
    fit = " ".join(run_dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "-f", "json").json()["notes"])
    est = run_dtplan("estimate", "--model", "llama3-8b", "--gpus", "8").out
    assert "MTBF of 50,677 h" in fit and "per-GPU MTBF 50,677 h" in est
    assert "50,700" not in fit + est + run_dtplan("estimate", "--help").out


# ---- the README's commands ------------------------------------------------------------------

def _readme_commands() -> list[tuple[str, int]]:
    """Each `$ dtplan …` line of the README's blocks, with the exit code its comment states
    (`# exit 1: …`; no exit stated: 0). Commands writing files (-o) are run to stdout."""
    out = []
    for line in (Path(ROOT) / "README.md").read_text().splitlines():
        if not line.startswith("$ dtplan "):
            continue
        cmd, _, comment = line[2:].partition("#")
        m = re.match(r"\s*exit (\d)", comment)
        out.append((cmd.strip(), int(m.group(1)) if m else 0))
    return out


@pytest.mark.parametrize("cmd,code", _readme_commands(), ids=lambda x: x if isinstance(x, str) else None)
def test_readme_command_runs_with_the_exit_code_it_shows(cmd, code, tmp_path):
    argv = shlex.split(cmd)[1:]
    if "-o" in argv:
        argv[argv.index("-o") + 1] = str(tmp_path / Path(argv[argv.index("-o") + 1]).name)
    expanded = []
    for a in argv:   # the shell's glob, as the README's reader runs it
        expanded += sorted(str(p) for p in Path(ROOT).glob(a)) if "*" in a else [a]
    r = run_dtplan(*expanded)
    assert r.code == code, (cmd, r.err[-300:])
