"""What each framework runs, printed and enforced (issue #15's leftovers): the assumptions name
the profile's pipeline schedules, ZeRO beside PP, ring CP, EP and selective recompute for
fit, estimate and report; `--recompute selective` is refused (exit 2) where the framework has
no selective mode, and a plan file naming it fails the recompute-in-framework rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.specs.framework_text import capabilities as framework_capabilities
from planner.specs.framework import load_framework

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {
    "megatron": "pipeline schedules 1f1b, interleaved (not gpipe, zb-h1, dualpipe, dualpipev), "
                "ZeRO ≤ 3 with PP; "
                "ring context parallel; expert parallel over DeepEP (all-to-all hidden in paired "
                "chunks: "
                "interleaved, without PP); MoE under TP with sequence parallel only; "
                "selective recompute (core-attention).",
    "torchtitan": "pipeline schedules 1f1b, interleaved, gpipe, dualpipev (not zb-h1, "
                  "dualpipe), ZeRO ≤ 3 with PP; ZeRO stages 0, 2, 3 only; "
                  "ring context parallel; expert parallel (no expert TP: experts whole under EP; "
                  "EP within the shard group × TP); selective recompute (op-save-list).",
    "deepspeed": "pipeline schedules 1f1b (not interleaved, gpipe, zb-h1, dualpipe, dualpipev), "
                 "ZeRO ≤ 1 with PP; "
                 "no ring context parallel; expert parallel (an MoE under ZeRO-3 without TP "
                 "only); no selective recompute (none or full only).",
    "fsdp": "no pipeline parallel; ring context parallel; no expert parallel (experts "
            "replicated); no selective recompute (none or full only).",
}


def _line(name: str) -> str:
    return (f"Framework {name} runs (its profile, each key citing the framework's source): "
            f"{EXPECTED[name]} The search offers nothing else.")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_line_states_each_bundled_profile(name):
    assert framework_capabilities(load_framework(name)) == _line(name)


@pytest.mark.parametrize("name", ["megatron", "deepspeed"])
def test_fit_and_estimate_print_the_framework_capabilities(dtplan, name):
    fit = dtplan("fit", "--params", "8e9", "--gpus", "8", "--framework", name, "-f", "json")
    assert fit.code == 0, fit
    assert _line(name) in fit.json()["notes"]
    est = dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2",
                 "--framework", name, "-f", "json")
    assert est.code in (0, 1), est
    assert _line(name) in est.json()["notes"]
    # the selective mode is stated once, on this line (not again in the profile's time and
    # memory lines beside it)
    for notes in (fit.json()["notes"], est.json()["notes"]):
        assert [n for n in notes if "selective recompute" in n] == [_line(name)]


def test_report_prints_the_framework_capabilities(dtplan, tmp_path):
    out = tmp_path / "r.md"
    r = dtplan("report", ROOT / "examples/plans/llama3-70b-256xh100.yaml", "-o", out)
    assert r.code == 0, r
    assert "Framework megatron runs (its profile" in out.read_text()
    assert "(not gpipe, zb-h1, dualpipe, dualpipev)" in out.read_text()


def test_an_edited_profile_changes_the_line(dtplan, tmp_path):
    text = (ROOT / "framework_profiles/megatron.toml").read_text()
    assert 'pipeline_schedules = ["1f1b", "interleaved"]' in text
    edited = tmp_path / "mine.toml"
    edited.write_text(text.replace('pipeline_schedules = ["1f1b", "interleaved"]',
                                   'pipeline_schedules = ["1f1b", "zb-h1"]')
                      .replace("context_parallel = true", "context_parallel = false"))
    r = dtplan("fit", "--params", "8e9", "--gpus", "8", "--framework", edited, "-f", "json")
    assert r.code == 0, r
    line = next(n for n in r.json()["notes"] if " runs (its profile" in n)
    assert "pipeline schedules 1f1b, zb-h1 (not interleaved, gpipe, dualpipe, dualpipev)" in line
    assert "; no ring context parallel;" in line


REFUSED = ("--recompute: selective: framework {fw} has no selective recompute (its profile's "
           "selective_recompute is none); allowed: none, full")


@pytest.mark.parametrize("fw", ["deepspeed", "fsdp"])
@pytest.mark.parametrize("command", ["estimate", "memory", "fit"])
def test_selective_is_refused_where_the_framework_has_none(dtplan, fw, command):
    layout = [] if command == "fit" else ["--tp", "8"]
    r = dtplan(command, "--model", "llama3-70b", "--gpus", "64", *layout,
               "--recompute", "selective", "--framework", fw)
    assert r.code == 2, r
    assert r.err.strip().splitlines() == [f"dtplan: error: {REFUSED.format(fw=fw)}"]
    assert "Traceback" not in r.err


@pytest.mark.parametrize("fw", ["megatron", "torchtitan"])
def test_selective_is_priced_where_the_framework_has_it(dtplan, fw):
    r = dtplan("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4",
               "--recompute", "selective", "--framework", fw, "-f", "json")
    assert r.code == 0, r
    assert r.json()["layout"]["recompute"] == "selective"


def test_a_plan_naming_selective_under_deepspeed_fails_the_rule(dtplan):
    r = dtplan("check", ROOT / "examples/plans/fail-recompute-in-framework.yaml", "-f", "json")
    assert r.code == 1, r
    rules = {x["name"]: x for x in r.json()["files"][0]["rules"]}
    rule = rules["recompute-in-framework"]
    assert rule["status"] == "fail"
    assert rule["limit"] == "none or full"
    assert rule["key"] == "layout.recompute"


def test_the_same_plan_under_megatron_passes_the_rule(dtplan, tmp_path):
    text = (ROOT / "examples/plans/fail-recompute-in-framework.yaml").read_text()
    plan = tmp_path / "megatron.yaml"
    plan.write_text(text.replace("framework: deepspeed", "framework: megatron"))
    r = dtplan("check", plan, "-f", "json")
    assert r.code == 0, r
    rules = {x["name"]: x["status"] for x in r.json()["files"][0]["rules"]}
    assert rules["recompute-in-framework"] == "pass"
