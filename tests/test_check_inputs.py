"""`dtplan check` as a CI user drives it (issues #12, #16): the one resolver reports every
missing input at once; Hugging Face DeepSpeed "auto" keys and the --micro-batch /
--global-batch / --recompute / --precision overrides (the flag wins, and says so) on plans and
engine configs alike; the cheapest fix on FAIL in every format; `-` for stdin; `check DIR`;
--gib on the rule tables. All through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan as dtplan

HF_AUTO = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
           "zero_optimization": {"stage": 3}}
ENGINES = Path(ROOT) / "examples" / "engines"
PLANS = Path(ROOT) / "examples" / "plans"
PLAN_8B = """model: llama3-8b
hardware: h100
gpus: 8
seq_len: 4096
layout: {tp: 1, pp: 1, zero: 3, micro_batch: 2}
batch: {global_batch: 64}
"""


def _ds(tmp_path: Path, cfg: dict = HF_AUTO) -> Path:
    p = tmp_path / "ds_config.json"
    p.write_text(json.dumps(cfg))
    return p


def _errors(err: str) -> list[str]:
    lines = err.strip().splitlines()
    assert lines and all(x.startswith("dtplan: error: ") for x in lines), err
    assert "Traceback" not in err
    return [x.removeprefix("dtplan: error: ") for x in lines]


def test_hf_auto_config_reports_every_missing_input_at_once(tmp_path):
    r = dtplan("check", _ds(tmp_path))
    assert r.code == 2, r
    lines = _errors(r.err)
    assert [x.split(":")[0] for x in lines[:3]] == ["--gpus", "--seq-len", "--model"]
    auto = [x for x in lines if '"auto"' in x]
    assert any("train_micro_batch_size_per_gpu" in x and "--micro-batch N" in x for x in auto)
    assert any("bf16.enabled" in x and "--precision" in x for x in auto)
    assert len(lines) == 5, lines


def test_hf_auto_config_resolves_with_the_options_it_names(tmp_path):
    r = dtplan("check", _ds(tmp_path), "--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096",
               "--micro-batch", "2", "--precision", "mixed", "-f", "json")
    assert r.code == 0, r
    f = r.json()["files"][0]
    s = f["summary"]
    # HF Trainer: train_batch_size = micro × accumulation (default 1) × world
    assert s["layout"]["micro_batch"] == 2 and s["global_batch"] == 16
    assert s["layout"]["zero"] == 3 and s["layout"]["precision"] == "mixed"
    notes = " ".join(f["notes"])
    assert '--micro-batch 2 fills "auto" of train_micro_batch_size_per_gpu' in notes
    assert 'gradient_accumulation_steps: "auto" → 1' in notes
    # with --global-batch the accumulation follows: 64 = 2 × a × 8 → a = 4
    r = dtplan("check", _ds(tmp_path), "--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096",
               "--micro-batch", "2", "--global-batch", "64", "--precision", "mixed", "-f", "json")
    s = r.json()["files"][0]["summary"]
    assert r.code == 0 and s["global_batch"] == 64 and s["accumulation"] == 4


def test_flag_wins_over_a_plan_and_says_so(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN_8B)
    r = dtplan("check", p, "--micro-batch", "8", "--recompute", "selective", "-f", "json")
    f = r.json()["files"][0]
    assert f["summary"]["layout"]["micro_batch"] == 8
    assert f["summary"]["layout"]["recompute"] == "selective"
    assert "--micro-batch 8 overrides layout.micro_batch = 2 (the flag wins)" in f["notes"]
    assert "--recompute selective overrides layout.recompute = none (the flag wins)" in f["notes"]
    r = dtplan("check", p, "--global-batch", "128", "--precision", "fp8", "-f", "json")
    s = r.json()["files"][0]["summary"]
    assert s["global_batch"] == 128 and s["layout"]["precision"] == "fp8"


def test_flag_wins_over_each_engine_config(tmp_path):
    ds = _ds(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                        "gradient_accumulation_steps": 2, "bf16": {"enabled": True}})
    common = ("--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096", "-f", "json")
    f = dtplan("check", ds, "--micro-batch", "2", "--global-batch", "64", *common).json()["files"][0]
    assert f["summary"]["layout"]["micro_batch"] == 2 and f["summary"]["accumulation"] == 4
    assert any("overrides train_micro_batch_size_per_gpu = 4" in n for n in f["notes"])
    # only the micro-batch: DeepSpeed's own assertion now fails, as DeepSpeed would
    f = dtplan("check", ds, "--micro-batch", "2", *common).json()["files"][0]
    assert [r["status"] for r in f["rules"] if r["name"] == "ds-batch-consistency"] == ["fail"]
    meg = dtplan("check", ENGINES / "megatron-llama3-70b-256gpu.sh", "--micro-batch", "2",
                 "--recompute", "full", "-f", "json").json()["files"][0]
    assert meg["summary"]["layout"]["micro_batch"] == 2
    assert meg["summary"]["layout"]["recompute"] == "full"
    assert "--micro-batch 2 overrides --micro-batch-size 1 (the flag wins)" in meg["notes"]
    tt = dtplan("check", ENGINES / "torchtitan-llama3-8b-64gpu.toml", "--gpus", "64",
                "--recompute", "none", "--global-batch", "256", "-f", "json").json()["files"][0]
    assert tt["summary"]["layout"]["recompute"] == "none" and tt["summary"]["global_batch"] == 256
    assert any("overrides activation_checkpoint.mode = selective" in n for n in tt["notes"])


def test_tp_pp_ep_fill_in_a_deepspeed_config_and_are_said_unapplied_elsewhere(tmp_path):
    """DeepSpeed configs do not record TP, PP or EP (the model code sets them): the flags supply
    them there; a plan or another engine's config states its own, so they are named as not
    applied, never silently dropped."""
    ds = _ds(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    f = dtplan("check", ds, "--gpus", "64", "--model", "mixtral-8x7b", "--seq-len", "4096",
               "--ep", "8", "-f", "json").json()["files"][0]
    assert f["summary"]["layout"]["ep"] == 8
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN_8B)
    f = dtplan("check", p, "--tp", "4", "--ep", "2", "-f", "json").json()["files"][0]
    assert f["summary"]["layout"]["tp"] != 4
    assert ("--tp 4, --ep 2 not applied: a plan file states its own layout (these options "
            "supply what a DeepSpeed config cannot)") in f["notes"]


def test_bad_override_values_are_all_reported(tmp_path):
    r = dtplan("check", _ds(tmp_path), "--micro-batch", "0", "--recompute", "some",
               "--precision", "fp4")
    assert r.code == 2
    lines = _errors(r.err)
    assert [x.split(":")[0] for x in lines] == ["--micro-batch", "--recompute", "--precision"]
    assert "none, selective, full" in lines[1]


def test_flags_of_every_command_report_all_problems_at_once():
    r = dtplan("estimate", "--model", "no-such-model", "--hardware", "no-such-gpu",
               "--seq-len", "0", "--gpus", "8")
    assert r.code == 2
    fields = [x.split(":")[0] for x in _errors(r.err)]
    assert fields == ["--model", "--hardware", "--seq-len"], r.err


def test_fail_prints_the_cheapest_fix_in_every_format(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN_8B.replace("micro_batch: 2", "micro_batch: 16").replace("64}", "128}"))
    j = dtplan("check", p, "-f", "json")
    assert j.code == 1
    fix = j.json()["files"][0]["fix"]
    assert fix["kind"] == "tune" and "--micro-batch" in " ".join(fix["options"])
    assert fix["peak_memory_bytes"] < j.json()["files"][0]["summary"]["usable_memory_bytes"]
    # the options it names pass when rerun, with the figures it states
    again = dtplan("check", p, *" ".join(fix["options"]).split(), "-f", "json")
    s = again.json()["files"][0]["summary"]
    assert again.code == 0 and s["step_time_s"] == pytest.approx(fix["step_time_s"])
    table = dtplan("check", p)
    assert "Cheapest fix (tune): fits with --micro-batch" in table.out
    md = dtplan("check", p, "-f", "markdown")
    assert "Cheapest fix (tune)" in md.out
    gh = dtplan("check", p, "-f", "github")
    assert any(x.startswith("::notice ") and "cheapest fix" in x for x in gh.out.splitlines())


def test_fix_needs_more_nodes_when_nothing_on_these_gpus_fits():
    j = dtplan("check", PLANS / "fail-fits-in-memory.yaml", "-f", "json").json()
    fix = j["files"][0]["fix"]
    assert fix["kind"] == "more-nodes" and fix["extra_nodes"] >= 1
    assert fix["gpus"] == 8 + 8 * fix["extra_nodes"]
    assert f"needs {fix['extra_nodes']} more node" in fix["summary"]


def test_passing_and_threshold_failures_carry_no_fix():
    j = dtplan("check", PLANS / "llama3-70b-256xh100.yaml", PLANS / "fail-min-mfu.yaml",
               "-f", "json").json()
    assert [f["fix"] for f in j["files"]] == [None, None]


def test_check_verdict_with_fix_validates_against_its_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = dtplan("schema", "check").json()
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN_8B.replace("micro_batch: 2", "micro_batch: 16").replace("64}", "128}"))
    out = dtplan("check", p, PLANS / "fail-fits-in-memory.yaml", "-f", "json").json()
    assert all(f["fix"] for f in out["files"])
    jsonschema.Draft202012Validator(schema).validate(out)
    assert "fix" in json.dumps(schema) and "extra_nodes" in json.dumps(schema)


def test_stdin_for_check_and_for_file_options(tmp_path):
    r = dtplan("check", "-", "-f", "json", stdin=PLAN_8B)
    assert r.code == 0, r
    assert r.json()["files"][0]["file"] == "-"
    r = dtplan("check", "-", "--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096",
               "--micro-batch", "1", "--precision", "mixed", stdin=json.dumps(HF_AUTO))
    assert r.code == 0 and "(deepspeed)" in r.out
    config = Path(ROOT) / "examples" / "models" / "llama3-8b" / "config.json"
    via_path = dtplan("memory", "--model-config", config, "--gpus", "8", "-f", "json")
    via_stdin = dtplan("memory", "--model-config", "-", "--gpus", "8", "-f", "json",
                       stdin=config.read_text())
    assert via_stdin.code == via_path.code, via_stdin
    assert via_stdin.json()["peak_memory_bytes"] == via_path.json()["peak_memory_bytes"]


def test_stdin_is_read_once():
    r = dtplan("check", "-", "-", stdin=PLAN_8B)
    assert r.code == 2
    assert "standard input was already read" in r.err


def test_hardware_file_from_stdin():
    toml = (Path(ROOT) / "hardware_profiles" / "h100.toml").read_text()
    a = dtplan("memory", "--model", "llama3-8b", "--gpus", "8", "--hardware-file", "-",
               "-f", "json", stdin=toml)
    b = dtplan("memory", "--model", "llama3-8b", "--gpus", "8", "-f", "json")
    assert a.code == b.code, a
    assert a.json()["peak_memory_bytes"] == b.json()["peak_memory_bytes"]


def test_check_dir_recurses_and_skips_what_is_not_a_plan(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "a" / "plan.yaml").write_text(PLAN_8B)
    (tmp_path / "a" / "b" / "ds.json").write_text(json.dumps(
        {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
         "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    (tmp_path / "a" / "b" / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "README.md").write_text("# not a plan\n")
    (tmp_path / ".git" / "x.yaml").write_text(PLAN_8B)
    r = dtplan("check", tmp_path, "--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096",
               "-f", "json")
    assert r.code == 0, r
    j = r.json()
    assert sorted(Path(f["file"]).name for f in j["files"]) == ["ds.json", "plan.yaml"]
    assert [Path(x).name for x in j["skipped"]] == ["config.json"]
    table = dtplan("check", tmp_path, "--gpus", "8", "--model", "llama3-8b", "--seq-len", "4096")
    assert "Skipped (neither a plan nor an engine config)" in table.out


def test_check_empty_dir_is_bad_input(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    r = dtplan("check", tmp_path)
    assert r.code == 2
    assert "no plan or engine config under it" in _errors(r.err)[0]


def test_gib_switches_the_rule_tables(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text(PLAN_8B)
    gb = dtplan("check", p).out
    gib = dtplan("check", p, "--gib").out
    mem = [x for x in gib.splitlines() if "fits-in-memory" in x][0]
    assert "GiB" in mem and " GB" not in mem
    assert any("fits-in-memory" in x and " GB" in x for x in gb.splitlines())
    est = dtplan("memory", "--model", "llama3-8b", "--gpus", "8", "--gib").out
    line = [x for x in est.splitlines() if x.startswith("fits-in-memory")][0]
    assert "GiB" in line and " GB" not in line


@pytest.mark.parametrize("path,args", [
    (ENGINES / "megatron-llama3-70b-256gpu.sh", []),
    (ENGINES / "torchtitan-llama3-8b-64gpu.toml", ["--gpus", "64"]),
    (ENGINES / "deepspeed-llama2-7b-tp2-pp2.json", ["--gpus", "8", "--tp", "2", "--pp", "2",
                                                    "--model", "llama2-7b", "--seq-len", "4096"]),
    (PLANS / "llama3-70b-256xh100.yaml", [])])
def test_rules_of_engine_configs_read_in_80_columns(path, args):
    # an 80-column pipe (in-process: byte-identical to a real process, test_cli_in_process.py)
    p = dtplan("check", path, *args, columns="80")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80 and "…" not in p.stdout
    status = [x.split()[0] for x in lines if x[:4] in ("PASS", "WARN", "FAIL")]
    assert status and set(status) <= {"PASS", "WARN", "FAIL"}   # never cut to P / A / S / S
    keys = [r["key"] for r in dtplan("check", path, *args, "-f", "json").json()["files"][0]["rules"]
            if r["key"]]
    words = p.stdout.split()
    assert all(any(w.startswith(k) for w in words) for k in keys)   # key:line never split


def test_gib_switches_checkpoint_size_and_budget_lines():
    args = ("estimate", "--model", "llama3-70b", "--gpus", "256", "--tp", "8", "--pp", "4",
            "--zero", "1")
    gb, gib = dtplan(*args).out, dtplan(*args, "--gib").out
    size = [x for x in gib.splitlines() if x.startswith("checkpoint size")][0]
    assert "TiB" in size and "GiB on the busiest rank" in size
    budget = [x for x in gib.splitlines() if "Budget: CUDA context" in x][0]
    assert "0.931 GiB and NCCL buffers 0.931 GiB" in budget
    assert "Budget: CUDA context 1 GB and NCCL buffers 1 GB" in gb
    assert any(x.startswith("checkpoint size") and " TB " in x for x in gb.splitlines())


@pytest.mark.parametrize("word,sp", [("off", False), ("on", True), ("no", False), ("yes", True)])
def test_yaml_1_1_words_are_text_in_string_fields_and_bools_in_bool_fields(tmp_path, word, sp):
    p = tmp_path / "plan.yaml"
    p.write_text(f"name: {word}\n" + PLAN_8B.replace("micro_batch: 2}", f"micro_batch: 2, "
                                                     f"tp: 2, sp: {word}}}").replace(
                                                         "tp: 1, ", ""))
    j = dtplan("check", p, "-f", "json").json()
    f = j["files"][0]
    assert f["error"] is None, f["error"]
    assert f["summary"]["layout"]["sequence_parallel"] is sp
    assert dtplan("report", p).out.count(word) >= 1


def test_export_converts_an_engine_config(tmp_path):
    out = tmp_path / "job.sh"   # torchtitan 0.3's command line
    r = dtplan("export", ENGINES / "megatron-llama3-70b-256gpu.sh", "--to", "torchtitan",
               "-o", out)
    assert r.code == 0, r
    back = dtplan("check", out, "--gpus", "256", "--model", "llama3-70b", "-f", "json")
    meg = dtplan("check", ENGINES / "megatron-llama3-70b-256gpu.sh", "-f", "json")
    a, b = (x.json()["files"][0]["summary"] for x in (back, meg))
    assert (a["layout"]["tp"], a["layout"]["pp"], a["layout"]["dp"], a["global_batch"]) == \
        (b["layout"]["tp"], b["layout"]["pp"], b["layout"]["dp"], b["global_batch"])
    r = dtplan("export", ENGINES / "torchtitan-llama3-8b-64gpu.toml", "--to", "megatron")
    assert r.code == 2 and "--gpus" in _errors(r.err)[0]
    # (not --to deepspeed: its profile has no selective recompute, which this job runs)
    r = dtplan("export", ENGINES / "torchtitan-llama3-8b-64gpu.toml", "--to", "megatron",
               "--gpus", "64")
    assert r.code == 0 and "--global-batch-size 128" in r.out
