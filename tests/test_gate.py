"""`dtplan check` / `dtplan schema`: verdicts, formats, engine configs and hostile input."""

from __future__ import annotations

import json
import os
import shlex
import tracemalloc
from pathlib import Path

import pytest
from conftest import run_dtplan

from planner.errors import InputError
from planner.gate.check import (CheckOptions, batch_accounting_rule, check_file, check_paths,
                          find_key_line)
from planner.specs.layout import Layout
from planner.io.parse import parse_text
from planner.io.read import MAX_FILE_BYTES
from planner.resolve.plan_file import json_schema, load_plan, validate_plan

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "examples" / "plans"
ENGINES = ROOT / "examples" / "engines"
GOOD = PLANS / "llama3-70b-256xh100.yaml"


def dtplan(*args, cwd: Path | str = ROOT):
    return run_dtplan(*args, cwd=cwd)


# ---- every example carries its expected verdict ------------------------------------------------

def _meta(path: Path) -> tuple[str, list[str], list[str]]:
    """(expected status, rule names, extra CLI args) from '# expect:' / '# dtplan-args:' lines,
    in the file or (JSON has no comments) in a '<file>.expect' sidecar."""
    src = Path(str(path) + ".expect") if path.suffix == ".json" else path
    expect, args = None, []
    for line in src.read_text().splitlines():
        if line.startswith("# expect:"):
            expect = line.split(":", 1)[1].split()
        elif line.startswith("# dtplan-args:"):
            args = shlex.split(line.split(":", 1)[1])
    assert expect, f"{src} has no '# expect:' line"
    return expect[0], expect[1:], args


EXAMPLES = sorted(p for d in (PLANS, ENGINES) for p in d.iterdir()
                  if p.is_file() and not p.name.endswith(".expect"))


def test_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert "llama3-70b-256xh100.yaml" in names
    assert sum(n.startswith("fail-") for n in names) >= 15
    kinds = {p.suffix for p in ENGINES.iterdir()}
    assert {".json", ".sh", ".toml"} <= kinds
    assert (ROOT / "examples" / "ci" / "dtplan-gate.yml").is_file()
    assert (ROOT / ".pre-commit-hooks.yaml").is_file()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_verdict(path):
    expect, rules, args = _meta(path)
    r = dtplan("check", path.relative_to(ROOT), *args, "--format", "json")
    assert r.code == {"pass": 0, "warn": 0, "fail": 1}[expect], r.err + r.out
    v = r.json()["files"][0]
    status = {x["name"]: x["status"] for x in v["rules"]}
    for rule in rules:
        assert status.get(rule) == expect, (rule, status)
    if expect != "fail":
        assert "fail" not in status.values()
    if path.name.startswith("fail-"):  # one failing file per rule, named after it
        assert path.stem.removeprefix("fail-") in rules


def test_ci_example_files_parse():
    import yaml
    wf = yaml.safe_load((ROOT / "examples/ci/dtplan-gate.yml").read_text())
    steps = wf["jobs"]["check"]["steps"]
    assert any("dtplan check" in s.get("run", "") and "--format github" in s.get("run", "")
               for s in steps)
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "dtplan-check" and hooks[0]["entry"].startswith("dtplan check")


# ---- formats -----------------------------------------------------------------------------------

def test_table_output_and_exit_zero():
    r = dtplan("check", GOOD)
    assert r.code == 0, r.err
    assert "PASS" in r.out and "fits-in-memory" in r.out and "layout.tp" in r.out


def test_json_verdict_is_stable():
    r = dtplan("check", GOOD, PLANS / "fail-layers-divisible-by-pp.yaml", "-f", "json")
    assert r.code == 1
    j = r.json()
    assert set(j) == {"schema_version", "command", "mode", "ok", "strict", "exit_code", "files",
                      "skipped"}
    assert j["schema_version"] == 1 and j["command"] == "check" and j["ok"] is False
    assert j["exit_code"] == 1 and j["strict"] is False
    good, bad = j["files"]
    assert good["ok"] is True and bad["ok"] is False and good["error"] is None
    for rule in good["rules"] + bad["rules"]:
        assert set(rule) == {"name", "status", "measured", "limit", "message", "key", "line"}
        assert rule["status"] in ("pass", "fail", "warn")
    failing = [x for x in bad["rules"] if x["status"] == "fail"]
    assert [x["name"] for x in failing] == ["layers-divisible-by-pp"]
    f = failing[0]
    assert f["key"] == "layout.pp" and f["measured"] and f["limit"]
    text = (PLANS / "fail-layers-divisible-by-pp.yaml").read_text().splitlines()
    assert text[f["line"] - 1].strip() == "pp: 6"
    assert bad["counts"]["fail"] == 1
    s = good["summary"]
    assert s["gpus"] == 256 and s["layout"]["dp"] == 8 and 0 < s["peak_memory_bytes"] < 80e9


def test_github_annotations_point_at_the_key_line():
    path = PLANS / "fail-tp-in-nvlink-domain.yaml"
    r = dtplan("check", path.relative_to(ROOT), "-f", "github")
    assert r.code == 1
    line = next(x for x in r.out.splitlines() if x.startswith("::error"))
    assert line.startswith(f"::error file=examples/plans/{path.name},line=")
    n = int(line.split("line=")[1].split(",")[0])
    assert path.read_text().splitlines()[n - 1].strip() == "tp: 16"
    assert "::tp-in-nvlink-domain:" in line
    w = dtplan("check", PLANS / "warn-checkpoint-interval.yaml", "-f", "github")
    assert w.code == 0 and w.out.startswith("::warning file=")


def test_markdown_output():
    r = dtplan("check", GOOD, "-f", "markdown")
    assert r.code == 0 and "| PASS | fits-in-memory |" in r.out


def test_strict_turns_warnings_into_failures():
    path = PLANS / "warn-checkpoint-interval.yaml"
    assert dtplan("check", path).code == 0
    r = dtplan("check", path, "--strict", "-f", "json")
    assert r.code == 1
    j = r.json()
    assert j["strict"] is True
    rule = next(x for x in j["files"][0]["rules"] if x["name"] == "checkpoint-interval")
    assert rule["status"] == "fail" and rule["message"].startswith("(strict)")


def test_schema_commands():
    r = dtplan("schema")
    assert r.code == 0
    s = json.loads(r.out)
    assert s["additionalProperties"] is False
    assert {"model", "hardware", "gpus", "layout", "batch", "seq_len", "checkpoint", "budget",
            "thresholds"} <= set(s["properties"])
    assert s["$defs"]["LayoutSection"]["additionalProperties"] is False
    assert s == json_schema()
    v = json.loads(dtplan("schema", "verdict").out)
    assert {"schema_version", "files"} <= set(v["properties"])


def test_plan_formats_toml_and_json(tmp_path):
    import yaml
    data = yaml.safe_load(GOOD.read_text())
    (tmp_path / "p.json").write_text(json.dumps(data))
    toml = ['model = "llama3-70b"', 'gpus = 256', 'seq_len = 8192', '[layout]', 'tp = 8',
            'pp = 4', 'zero = 1', 'sp = true', 'recompute = "selective"', '[batch]',
            'global_batch = 1024', 'micro_batch = 1']
    (tmp_path / "p.toml").write_text("\n".join(toml) + "\n")
    r = dtplan("check", tmp_path / "p.json", tmp_path / "p.toml", "-f", "json", cwd=tmp_path)
    assert r.code == 0, r.err
    dp = [f["summary"]["layout"]["dp"] for f in r.json()["files"]]
    assert dp == [8, 8]  # the TOML plan leaves dp out: 256 / (8·4)
    v = check_file(str(tmp_path / "p.toml"))
    assert find_key_line((tmp_path / "p.toml").read_text(), "layout.pp") == 6
    assert v.ok


def test_model_from_config_json_relative_to_plan(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(
        (ROOT / "examples/models/llama3-8b/config.json").read_text())
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "p.yaml").write_text("model: {config: ../models}\ngpus: 8\nseq_len: 4096\n"
                                  "layout: {tp: 8, zero: 1}\nbatch: {global_batch: 8}\n")
    r = dtplan("check", "plans/p.yaml", "-f", "json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert r.json()["files"][0]["summary"]["params"] == 8_030_261_248


def test_inline_model_shape(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("model: {layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, "
                 "vocab: 128256}\ngpus: 8\nseq_len: 4096\nlayout: {tp: 8}\n")
    v = check_file(str(p))
    assert v.ok and v.summary["params"] == 8_030_261_248


# ---- bad input: one line, exit 2 -----------------------------------------------------------------

def _bad(tmp_path, name, content, *extra):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    r = dtplan("check", name, *extra, cwd=tmp_path)
    assert r.code == 2, (r.code, r.out, r.err)
    assert r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("dtplan: error: ")
    assert "Traceback" not in r.err
    return r


BASE = "model: llama3-70b\ngpus: 256\nseq_len: 8192\n"


def test_unknown_key_names_path_and_suggests(tmp_path):
    r = _bad(tmp_path, "p.yaml", BASE + "layout:\n  tpp: 8\n")
    assert "layout.tpp: unknown key; did you mean 'layout.tp'?" in r.err
    r = _bad(tmp_path, "q.yaml", BASE + "thresholds: {min_mfuu: 0.3}\n")
    assert "thresholds.min_mfuu" in r.err and "thresholds.min_mfu" in r.err
    r = _bad(tmp_path, "r.yaml", BASE + "batchh: {global_batch: 8}\n")
    assert "batchh" in r.err and "'batch'" in r.err


def test_empty_file(tmp_path):
    assert "empty" in _bad(tmp_path, "p.yaml", "").err
    assert "empty" in _bad(tmp_path, "q.yaml", "   \n\n").err
    assert "empty document" in _bad(tmp_path, "r.yaml", "# only a comment\n").err


@pytest.mark.parametrize("text,needle", [
    ('model: llama3-70b\ngpus: "256"\nseq_len: 8192\n', "gpus: must be an integer"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nlayout: {tp: true}\n", "layout.tp"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192.5\n", "seq_len"),
    ("model: llama3-70b\ngpus: 0\nseq_len: 8192\n", "gpus: must be >= 1"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nlayout: {zero: 4}\n", "layout.zero"),
    ("model: llama3-70b\ngpus: 256\nseq_len: .nan\n", "seq_len"),
    ("model: 7\ngpus: 256\nseq_len: 8192\n", "model"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("model: [unclosed\n", "invalid YAML"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nlayout: {schedule: zigzag}\n",
     "layout.schedule: must be one of"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nprecision: mixd\n", "did you mean 'mixed'"),
    ("model: llama3-70x\ngpus: 256\nseq_len: 8192\n", "unknown model"),
    ("gpus: 256\nseq_len: 8192\n", "model: missing"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nhardware: h1000\n", "did you mean 'h100'"),
    ("model: llama3-70b\ngpus: 256\nseq_len: 8192\nlayout: {micro_batch: 2}\n"
     "batch: {micro_batch: 1}\n", "conflicts"),
])
def test_wrong_types_and_values(tmp_path, text, needle):
    assert needle in _bad(tmp_path, "p.yaml", text).err


def test_yaml_alias_bomb_is_refused_fast_and_small(tmp_path):
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "\n".join(lines) + "\n"
    r = _bad(tmp_path, "bomb.yaml", text)
    assert "alias" in r.err
    tracemalloc.start()
    with pytest.raises(InputError, match="alias"):
        parse_text(text, "yaml", "bomb.yaml")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 20e6
    many = "x: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(500))
    assert "aliases" in _bad(tmp_path, "many.yaml", many).err


@pytest.mark.parametrize("name,text", [
    ("flow.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("block.yaml", "".join("  " * i + f"k{i}:\n" for i in range(600))),
    ("deep.json", "[" * 200000 + "]" * 200000),
    ("deep.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n"),
])
def test_deep_nesting_is_refused(tmp_path, name, text):
    r = _bad(tmp_path, name, text)
    assert "nested deeper" in r.err


def test_huge_file_is_refused_before_reading(tmp_path):
    p = tmp_path / "big.yaml"
    with open(p, "wb") as f:
        f.truncate(100 * 2**20)  # sparse: 100 MB without writing them
    r = _bad(tmp_path, "big.yaml", None)
    assert "at most 1 MB" in r.err
    assert p.stat().st_size > MAX_FILE_BYTES


def test_binary_and_non_utf8(tmp_path):
    assert "binary" in _bad(tmp_path, "b.yaml", b"model: \x00\x01\x02\xff").err
    assert "not UTF-8" in _bad(tmp_path, "l.yaml", b"model: caf\xe9\n").err


def test_missing_path_and_directory(tmp_path):
    assert "file not found" in _bad(tmp_path, "nope.yaml", None).err
    (tmp_path / "d.yaml").mkdir()
    assert "is a directory" in _bad(tmp_path, "d.yaml", None).err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_fifo_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "f.yaml")
    assert "not a regular file" in _bad(tmp_path, "f.yaml", None).err


@pytest.mark.parametrize("ref,needle", [
    ("../../../../../../etc/passwd", "outside the plan's directory"),
    ("/etc/shadow", "outside the plan's directory"),
    ("/dev/zero", "outside the plan's directory"),
    ("missing/config.json", "file not found"),
])
def test_config_path_escaping_or_unreadable(tmp_path, ref, needle):
    r = _bad(tmp_path, "p.yaml", f"model: {{config: '{ref}'}}\ngpus: 8\nseq_len: 2048\n")
    assert "model.config" in r.err and needle in r.err


def test_config_path_symlink_escape(tmp_path):
    (tmp_path / "link.json").symlink_to("/etc/passwd")
    r = _bad(tmp_path, "p.yaml", "model: {config: link.json}\ngpus: 8\nseq_len: 2048\n")
    assert "outside" in r.err


def test_config_path_unreadable(tmp_path, monkeypatch):
    c = tmp_path / "config.json"
    c.write_text("{}")
    c.chmod(0)
    p = tmp_path / "p.yaml"
    p.write_text("model: {config: config.json}\ngpus: 8\nseq_len: 2048\n")
    real = os.access
    # root reads anything, so stand in for an unprivileged reader
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == c.resolve()
                        else real(path, mode))
    with pytest.raises(InputError, match="permission denied"):
        check_file(str(p))


def test_bad_file_among_good_ones_exits_2_and_reports_both(tmp_path):
    (tmp_path / "bad.yaml").write_text("layout: {tpp: 1}\n")
    r = dtplan("check", GOOD, tmp_path / "bad.yaml", "-f", "json")
    assert r.code == 2
    files = r.json()["files"]
    assert files[0]["ok"] is True and files[1]["ok"] is False
    assert "layout.tpp" in files[1]["error"] and "layout.tpp" in r.err


def test_bad_options():
    assert dtplan("check", GOOD, "--format", "yaml").code == 2
    assert dtplan("check", GOOD, "--gpus", "0").code == 2
    assert dtplan("check").code == 2


# ---- engine configs ----------------------------------------------------------------------------------

def _write(tmp_path, name, text) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_deepspeed_any_two_batch_keys(tmp_path):
    opts = CheckOptions(gpus=8, tp=2, pp=2, model="llama2-7b", seq_len=4096)
    ok = _write(tmp_path, "a.json", '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,'
                                    ' "zero_optimization": {"stage": 1}, "bf16": {"enabled": true}}')
    v = check_file(ok, opts)
    assert v.kind == "deepspeed" and v.ok and v.summary["accumulation"] == 4
    # DeepSpeed floors 30 // 4 // 2 = 3, then asserts 30 == 4 × 3 × 2 and fails
    bad = _write(tmp_path, "b.json", '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}')
    rule = next(r for r in check_file(bad, opts).rules if r.name == "ds-batch-consistency")
    assert rule.status == "fail" and rule.key == "train_batch_size" and rule.line == 1
    auto = _write(tmp_path, "c.json", '{"train_batch_size": "auto", '
                                      '"train_micro_batch_size_per_gpu": 2}')
    v = check_file(auto, opts)
    assert v.ok and any("auto" in n for n in v.notes)
    none = _write(tmp_path, "d.json", '{"zero_optimization": {"stage": 1}}')
    with pytest.raises(InputError, match="train_batch_size"):
        check_file(none, opts)
    with pytest.raises(InputError, match="--gpus"):
        check_file(ok, CheckOptions(model="llama2-7b", seq_len=4096))


def test_megatron_variables_and_unresolved(tmp_path):
    script = ("TP=8\nexport PP=${PP:-2}\n"
              "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\\n"
              "  --tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} \\\n"
              "  --micro-batch-size 1 --global-batch-size 16 --seq-length 4096  # comment\n")
    p = _write(tmp_path, "run.sh", script)
    v = check_file(p, CheckOptions(model="llama3-8b"))
    assert v.kind == "megatron" and v.summary["layout"]["tp"] == 8
    assert v.summary["layout"]["pp"] == 2 and v.summary["gpus"] == 16, v.summary
    assert v.ok, [r for r in v.rules if r.status != "pass"]
    p2 = _write(tmp_path, "run2.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP "
                                     "--micro-batch-size 1\n")
    with pytest.raises(InputError, match="shell variable"):
        check_file(p2, CheckOptions(model="llama3-8b", gpus=8))


def test_megatron_model_mismatch_with_model_option():
    args = _meta(ENGINES / "megatron-llama3-70b-256gpu.sh")[2]
    r = dtplan("check", ENGINES / "megatron-llama3-70b-256gpu.sh", *args, "--model",
               "llama3-8b", "-f", "json")
    assert r.code == 1
    names = {x["name"] for x in r.json()["files"][0]["rules"] if x["status"] == "fail"}
    assert {"megatron-model-layers", "megatron-model-hidden"} <= names


def test_torchtitan_fills_dp_shard_and_checks_schedule(tmp_path):
    base = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 4\n' \
           'seq_len = 4096\n[parallelism]\ntensor_parallel_degree = 2\n' \
           'pipeline_parallel_degree = 2\n'
    ok = _write(tmp_path, "a.toml", base + 'pipeline_parallel_schedule = "Interleaved1F1B"\n')
    v = check_file(ok, CheckOptions(gpus=32))
    assert v.kind == "torchtitan" and v.summary["layout"]["dp"] == 8
    assert v.summary["layout"]["schedule"] == "interleaved"
    bad = _write(tmp_path, "b.toml", base + 'pipeline_parallel_schedule = "ZigZag"\n')
    with pytest.raises(InputError, match="Unknown schedule name"):
        check_file(bad, CheckOptions(gpus=32))


def test_engine_forced_by_option(tmp_path):
    p = _write(tmp_path, "ds.conf", '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2}')
    r = dtplan("check", p, "--engine", "deepspeed", "--gpus", "8", "--model", "llama3-8b",
               "--seq-len", "2048", "-f", "json")
    assert r.code in (0, 1) and r.json()["files"][0]["kind"] == "deepspeed"


# ---- library pieces --------------------------------------------------------------------------------

def test_find_key_line_formats():
    yaml_text = "model: x\nlayout:\n  # tp: 2 (commented)\n  pp: 2\n  tp: 8\nbatch:\n  tp: 1\n"
    assert find_key_line(yaml_text, "layout.tp") == 5
    assert find_key_line(yaml_text, "batch.tp") == 7
    assert find_key_line(yaml_text, "layout.cp") == 2      # absent: the section's line
    assert find_key_line(yaml_text, "nothing.here") is None
    assert find_key_line('{\n  "layout": {\n    "tp": 8\n  }\n}', "layout.tp") == 3
    assert find_key_line("a: 1\nlayout: {tp: 8, pp: 4}\n", "layout.pp") == 2
    assert find_key_line("[parallelism]\ntensor_parallel_degree = 2\n",
                         "parallelism.tensor_parallel_degree") == 2
    assert find_key_line("x \\\n  --micro-batch-size 4\n", "--micro-batch-size") == 2
    assert find_key_line("--micro-batch-size-x 4\n--micro-batch-size=4\n",
                         "--micro-batch-size") == 2


def test_batch_accounting_names_the_inflation():
    lay = Layout(tp=8, pp=4, dp=8, micro_batch=1)
    assert batch_accounting_rule(1024, 1, 128, lay).status == "pass"
    r = batch_accounting_rule(1024 * 32, 1, 128, lay)
    assert r.status == "fail" and "inflated by TP×PP×CP = 32" in r.message


def test_validate_plan_library():
    plan = validate_plan({"model": "llama3-8b", "gpus": 8, "seq_len": 2048,
                          "layout": {"tp": 8}}, "x")
    assert plan.layout.tp == 8 and plan.layout.dp is None and plan.hardware == "h100"
    with pytest.raises(InputError) as e:
        validate_plan({"model": "llama3-8b", "gpus": 8, "seq_len": 2048,
                       "checkpoint": {"interval_mn": 3}}, "x")
    assert e.value.field == "x: checkpoint.interval_mn" and "interval_min" in e.value.message
    loaded, text = load_plan(GOOD)
    assert loaded.gpus == 256 and "tp: 8" in text


def test_check_paths_library():
    v = check_paths([str(GOOD), str(PLANS / "fail-fits-in-memory.yaml")])
    assert v.exit_code == 1 and [f.ok for f in v.files] == [True, False]
    bad = next(r for r in v.files[1].rules if r.status == "fail")
    assert bad.name == "fits-in-memory"


def test_checkpoint_needs_one_mtbf(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(GOOD.read_text().replace("gpu_mtbf_hours: 50000", "cost_min: 3"))
    with pytest.raises(InputError, match="mtbf"):
        check_file(str(p))


def test_budget_and_hardware_overrides(tmp_path):
    text = GOOD.read_text()
    tight = tmp_path / "tight.yaml"
    tight.write_text(text + "budget:\n  margin_fraction: 0.6\n")
    v = check_file(str(tight))
    assert not v.ok and [r.name for r in v.rules if r.status == "fail"] == ["fits-in-memory"]
    small = tmp_path / "small.yaml"
    small.write_text(text.replace("hardware: h100", "hardware: {profile: h100, gpu_memory_gb: 24}"))
    v = check_file(str(small))
    assert v.summary["capacity_bytes"] == 24 * 2**30 and not v.ok
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(text.replace("global_batch: 1024", f"tokens_per_batch: {1024 * 8192}"))
    v = check_file(str(tokens))
    assert v.ok and v.summary["global_batch"] == 1024


def test_a_resolved_job_carries_its_validated_budget(tmp_path, monkeypatch):
    # the plan's budget: is turned into a MemoryBudget once, where the file is resolved; the
    # estimate, the review and the fixes read that object (none rebuilds it from a dict)
    from planner.gate.check import evaluate_inputs
    from planner.resolve.job import resolve_plan
    from planner.resolve.sections import budget_from_section
    from planner.specs import records
    from planner.specs.budget import MemoryBudget

    p = tmp_path / "p.yaml"
    p.write_text(GOOD.read_text() + "budget:\n  margin_fraction: 0.25\n  context_gb: 2\n")
    plan, _ = load_plan(p)
    job = resolve_plan(plan, p.parent, str(p))
    assert job.budget == MemoryBudget(margin_fraction=0.25, context_bytes=2e9)
    monkeypatch.setattr(records, "adapter", None)  # validated once: not again
    assert evaluate_inputs(job, str(p)).estimate.budget is job.budget
    monkeypatch.undo()
    assert budget_from_section(None) == MemoryBudget()
    # the plan's own section bounds each key at least as tightly as MemoryBudget: a bad share
    # is refused where the file loads, with its line, and never reaches the constructor
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.read_text() + "budget:\n  margin_fraction: 1.5\n")
    with pytest.raises(InputError, match=r"budget\.margin_fraction"):
        load_plan(bad)


def test_checkpoint_waste_matches_the_seed():
    # DESIGN.md seed: δ = 3 min, M = 50 h, τ = 15 min → 20.25% wasted; optimum near 134 min.
    from planner.gate.check import checkpoint_figures
    from planner.resolve.job import resolve_plan
    path = PLANS / "warn-checkpoint-interval.yaml"
    plan, _ = load_plan(path)
    f = checkpoint_figures(resolve_plan(plan, path.parent, str(path)), str(path))
    assert f.waste == pytest.approx(0.2025)
    assert 125 * 60 < f.optimum_s < 140 * 60


def test_only_the_first_failing_files_get_a_fix(monkeypatch):
    """Each fix runs layout searches: past MAX_FIXES failing files a run names the command that
    gives the fix instead of computing it (check over a directory stays seconds)."""
    import planner.gate.check as gate

    monkeypatch.setattr(gate, "MAX_FIXES", 1)
    paths = [str(PLANS / "fail-world-size.yaml"),
             str(PLANS / "fail-layers-divisible-by-pp.yaml")]
    first, second = check_paths(paths).files
    assert first.fix is not None and not any("no fix computed" in n for n in first.notes)
    assert second.fix is None
    assert any(f"dtplan check {shlex.quote(paths[1])}" in n for n in second.notes)


def test_check_refuses_more_files_than_one_run_takes(tmp_path):
    """Positional files count against the same cap as a directory's (inputs.tree.MAX_FILES)."""
    from planner.io.tree import MAX_FILES

    names = [str(tmp_path / f"p{i}.yaml") for i in range(MAX_FILES + 1)]
    r = run_dtplan("check", *names)
    assert r.code == 2 and r.out == ""
    assert r.err.strip() == (f"dtplan: error: FILE: {MAX_FILES + 1:,} files to check; at most "
                             f"{MAX_FILES:,} in one run (split them over several check commands)")
