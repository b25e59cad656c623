"""ZeRO stages a framework implements (its profile's zero_stages): torchtitan's and torchtune's
FSDP2 shards gradients with the optimizer states or nothing, so they have no ZeRO-1 (the generic
PyTorch profile keeps it: DDP with ZeroRedundancyOptimizer). The search offers no other stage,
`check` fails one (sharding-valid), and `export` writes and judges the stage the engine runs."""

from __future__ import annotations

from planner.specs.framework import load_framework

PLAN = """name: zero1-under-torchtitan
model: llama3-8b
hardware: h100
framework: torchtitan
gpus: 64
seq_len: 8192
layout: {{tp: 1, cp: 1, pp: 2, dp: 32, zero: {zero}, micro_batch: 1, recompute: full}}
batch: {{global_batch: 256}}
"""


def test_the_profiles_state_their_stages():
    for name in ("torchtitan", "torchtune"):
        assert load_framework(name).time.zero_stages == (0, 2, 3)
    for name in ("megatron", "deepspeed", "fsdp"):
        assert load_framework(name).time.zero_stages == (0, 1, 2, 3)


def test_the_search_offers_no_zero1_under_fsdp2(dtplan):
    j = dtplan("fit", "--model", "llama3-8b", "--gpus", "64", "--framework", "torchtitan",
               "--all", "-f", "json").json()
    stages = {x["layout"]["zero"] for x in j["layouts"] if x["layout"]["dp"] > 1}
    assert stages and 1 not in stages
    j = dtplan("fit", "--model", "llama3-8b", "--gpus", "64", "--all", "-f", "json").json()
    assert 1 in {x["layout"]["zero"] for x in j["layouts"]}   # Megatron's distributed optimizer


def test_check_fails_a_stage_the_framework_does_not_run(dtplan, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(PLAN.format(zero=1), encoding="utf-8")
    r = dtplan("check", bad, "-f", "json")
    assert r.code == 1
    rule = next(x for x in r.json()["files"][0]["rules"] if x["name"] == "sharding-valid")
    assert rule["status"] == "fail" and "torchtitan has no ZeRO-1" in rule["limit"]
    assert rule["key"] == "layout.zero" and rule["line"] == 7
    good = tmp_path / "good.yaml"
    good.write_text(PLAN.format(zero=2), encoding="utf-8")
    assert dtplan("check", good).code == 0


def test_export_writes_and_judges_the_stage_torchtitan_runs(dtplan, tmp_path):
    """A Megatron plan with the distributed optimizer (ZeRO-1), exported to torchtitan: written
    as FSDP2 without resharding (ZeRO-2), judged as that, and `check` of the file agrees."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(zero=1).replace("framework: torchtitan\n", ""), encoding="utf-8")
    out = tmp_path / "train.sh"
    r = dtplan("export", plan, "--to", "torchtitan", "-o", out, cwd=tmp_path)
    assert r.code == 0, r.err
    assert "FSDP has no ZeRO-1" in r.err and "fsdp-reshard-after-forward never" in out.read_text()
    hint = next(x for x in r.err.splitlines() if "check it with: " in x)
    c = dtplan(*hint.split("check it with: dtplan ", 1)[1].split(), cwd=tmp_path)
    assert c.code == 0, c.out[-800:]
