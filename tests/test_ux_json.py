"""Every --format json output validates against `dtplan schema <command>`; one envelope with a
`mode` discriminator, unit-suffixed keys, whole counts as integers, layouts structured and as text."""

from __future__ import annotations

import json

import pytest

from conftest import run_dtplan

jsonschema = pytest.importorskip("jsonschema")

GOOD = "examples/plans/llama3-70b-256xh100.yaml"
BAD = "examples/plans/fail-layers-divisible-by-pp.yaml"

# (command for the schema, mode, arguments): every shape each command prints.
OUTPUTS = [
    ("fit", "search", ["fit", "--model", "llama3-8b", "--gpus", "8"]),
    ("fit", "search", ["fit", "--model", "llama3-70b", "--gpus", "8", "--seq-len", "8192"]),
    ("fit", "sweep", ["fit", "--model", "llama3-8b", "--gpus", "8,16"]),
    ("fit", "shrink", ["fit", "--from-plan", GOOD, "--gpus", "240"]),
    ("estimate", "estimate", ["estimate", "--model", "llama3-8b", "--gpus", "8"]),
    ("estimate", "estimate", ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "2",
                              "--ep", "8", "--train-tokens", "1e12", "--gpu-hour-cost", "2"]),
    ("memory", "budget", ["memory", "--model", "llama3-8b", "--gpus", "8"]),
    ("memory", "states", ["memory", "--params", "7e9", "--gpus", "8"]),
    ("check", "verdict", ["check", GOOD, BAD]),
    ("calibrate", "calibrate", ["calibrate"]),
    ("calibrate", "none", ["calibrate", "--hardware", "h100"]),
    ("models", "models", ["models"]),
    ("profiles", "list", ["profiles"]),
    ("profiles", "show", ["profiles", "show", "h100"]),
    ("layout", "layout", ["layout", "--gpus", "256", "--tp", "8", "--pp", "4"]),
    ("comm", "comm", ["comm", "--message-gb", "14", "--gpus", "8,64", "--bandwidth", "200"]),
    ("bubble", "bubble", ["bubble", "--stages", "4", "--micro-batches", "1,8"]),
    ("batch", "batch", ["batch", "--micro-batch", "4", "--accum", "8", "--dp", "8"]),
    ("scaling", "scaling", ["scaling", "--baseline-ms", "800", "--measured-ms", "140", "--gpus", "8"]),
    ("checkpoint", "simple", ["checkpoint", "--cost-min", "3", "--mtbf-hours", "50"]),
    ("checkpoint", "plan", ["checkpoint", "--model", "llama3-8b", "--gpus", "64",
                            "--gpu-mtbf-hours", "50000"]),
]

_SCHEMAS: dict[str, dict] = {}


def schema(command: str) -> dict:
    if command not in _SCHEMAS:
        r = run_dtplan("schema", command)
        assert r.code == 0, r.err
        _SCHEMAS[command] = r.json()
    return _SCHEMAS[command]


@pytest.mark.parametrize("command,mode,args", OUTPUTS, ids=lambda x: x if isinstance(x, str) else None)
def test_json_output_validates_against_its_schema(command, mode, args):
    r = run_dtplan(*args, "--format", "json")
    assert r.code in (0, 1), r.err
    out = r.json()
    assert out["schema_version"] == 1 and out["command"] == command and out["mode"] == mode
    s = schema(command)
    jsonschema.Draft202012Validator.check_schema(s)
    errors = sorted(jsonschema.Draft202012Validator(s).iter_errors(out), key=lambda e: e.path)
    assert not errors, [f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]]


def test_schema_catches_a_wrong_shape():
    out = run_dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "-f", "json").json()
    v = jsonschema.Draft202012Validator(schema("fit"))
    assert v.is_valid(out)
    for broken in ({**out, "mode": "sweep"}, {**out, "unexpected": 1},
                   {k: x for k, x in out.items() if k != "layouts"}):
        assert not v.is_valid(broken)


def test_units_in_keys_and_counts_as_integers():
    j = run_dtplan("estimate", "--model", "llama3-8b", "--gpus", "8", "-f", "json").json()
    assert "breakdown_s" in j and "breakdown" not in j
    assert all("items_bytes" in s and "items" not in s for s in j["stages"])
    assert isinstance(j["accumulation"], int) and isinstance(j["tokens_per_step"], int)
    assert j["layout_text"].startswith("TP1 PP1 DP8") and j["layout"]["dp"] == 8
    f = run_dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "-f", "json").json()
    assert all(isinstance(x["accumulation"], int) and x["layout_text"] for x in f["layouts"])
    m = run_dtplan("memory", "--params", "7e9", "--gpus", "8", "-f", "json").json()
    assert m["params"] == 7_000_000_000 and isinstance(m["params"], int)


def test_fit_modes_are_distinct():
    modes = {run_dtplan(*a, "-f", "json").json()["mode"] for c, _, a in OUTPUTS if c == "fit"}
    assert modes == {"search", "sweep", "shrink"}
    s = schema("fit")
    assert [b["properties"]["mode"]["const"] for b in s["oneOf"]] == ["search", "sweep", "shrink"]


def test_schema_rejects_unknown_command():
    r = run_dtplan("schema", "nonsense")
    assert r.code == 2 and "Traceback" not in r.err
    assert json.loads(run_dtplan("schema").out)["title"]       # the plan schema stays the default


def test_every_mode_printed_has_its_schema():
    """json_out.MODES (what the envelope names) and json_schema.OUTPUTS (a schema per mode) list
    the same modes of the same commands, in the same order (the first is the default)."""
    from planner.render.json_out import MODES
    from planner.render.json_schema import OUTPUTS
    assert {c: tuple(m for m, _ in OUTPUTS[c]) for c in OUTPUTS} == MODES
