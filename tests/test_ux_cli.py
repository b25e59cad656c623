"""What a user sees in a terminal, a pipe and a CI log (issue #16), through the real entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import ROOT, TERMINAL_ENV, _command, run_dtplan

GOOD = "examples/plans/llama3-70b-256xh100.yaml"
BAD = "examples/plans/fail-layers-divisible-by-pp.yaml"
ANSI = re.compile(r"\x1b\[")


def run(*args, columns: str | None = "80", stdout=subprocess.PIPE, cwd=ROOT, env_extra=None):
    """Run dtplan with COLUMNS set (or unset with columns=None); no stream is a terminal (rich
    takes a terminal's width from stdin too) and nothing asks rich to treat the pipe as one.
    Output to a pipe at a stated width runs in this process (conftest.run_dtplan: the console
    script's function, byte-identical to the process, tests/test_cli_in_process.py); a closed
    pipe, an unset width or a shell's completion request is a real process."""
    if stdout is subprocess.PIPE and columns is not None and not env_extra:
        return run_dtplan(*args, cwd=cwd, columns=columns)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", *TERMINAL_ENV)}
    if columns is not None:
        env["COLUMNS"] = columns
    env.update(env_extra or {})
    return subprocess.run(_command() + [str(a) for a in args], stdout=stdout,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                          cwd=str(cwd), env=env, timeout=120)


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


# ---- 80 columns, plain when piped ------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("fit", "--params", "70e9", "--gpus", "256"),
    ("fit", "--model", "mixtral-8x7b", "--gpus", "64"),
    ("check", GOOD), ("check", BAD), ("profiles",), ("calibrate",),
    ("estimate", "--model", "llama3-8b", "--gpus", "8"),
], ids=lambda a: " ".join(a))
def test_80_columns_no_cut_cells(args):
    r = run(*args)
    assert r.returncode in (0, 1), r.stderr
    assert widest(r.stdout) <= 80, [ln for ln in r.stdout.splitlines() if len(ln) > 80][:3]
    assert "…" not in r.stdout
    assert not ANSI.search(r.stdout)                       # piped: plain text, no colour codes


def test_fit_table_columns_at_80():
    out = run("fit", "--params", "70e9", "--gpus", "256").stdout
    header = next(ln for ln in out.splitlines() if ln.startswith("#"))
    cols = header.split()
    for c in ("TP", "PP", "DP", "ZeRO", "mb", "acc", "sched", "recomp", "peak", "free", "MFU"):
        assert c in cols, (c, cols)
    for c in ("EP", "ckpt", "goodput", "tok/s"):  # constant here (or --wide only)
        assert c not in cols, (c, cols)
    assert "Same in every row above: EP 1" in out.replace("\n", " ")
    assert "--wide shows every column" in out.replace("\n", " ")     # the legend line
    # the winner's row: step time and MFU printed whole
    row1 = next(ln for ln in out.splitlines() if ln.startswith("1 "))
    assert re.search(r"\b\d+\.\d{3}\b", row1) and re.search(r"\d+\.\d%", row1)


def test_fit_wide_shows_every_column():
    out = run("fit", "--params", "70e9", "--gpus", "256", "--wide", columns="250").stdout
    header = next(ln for ln in out.splitlines() if ln.startswith("#")).split()
    for c in ("CP", "EP", "tok/s", "ckpt", "goodput"):
        assert c in header


def test_piped_output_honours_columns():
    r = run("fit", "--params", "70e9", "--gpus", "256", columns="120")
    assert 80 < widest(r.stdout) <= 120
    r = run("fit", "--params", "70e9", "--gpus", "256", columns=None)     # no COLUMNS: 80
    assert widest(r.stdout) <= 80
    assert not any(line != line.rstrip() for line in r.stdout.splitlines())  # no trailing blanks


def test_markdown_numbers_right_aligned():
    out = run("fit", "--params", "70e9", "--gpus", "256", "-f", "markdown").stdout
    sep = next(ln for ln in out.splitlines() if ln.startswith("|--") or ln.startswith("|---"))
    cells = sep.strip("|").split("|")
    header = out.splitlines()[out.splitlines().index(sep) - 1].strip("|").split("|")
    align = dict(zip((h.strip() for h in header), cells))
    assert cells[0] == "---"                                # the rank label
    for c in ("TP", "PP", "DP", "mb", "acc", "step s", "MFU"):
        assert align[c] == "--:", (c, align)                # numbers right-aligned
    assert align["sched"] == align["recomp"] == "---"       # text left-aligned


# ---- user strings printed literally ----------------------------------------------------------

def test_bracketed_paths_and_notes_print_literally(tmp_path):
    src = json.loads((Path(ROOT) / "examples/models/llama3-8b/config.json").read_text())
    # the model is named from the config's own _name_or_path (not from its folder, issue 26)
    src["_name_or_path"] = "[red]ckpt"
    d = tmp_path / "[/bold]" / "[red]ckpt"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(src))
    r = run("fit", "--model-config", d / "config.json", "--gpus", "8", columns="400")
    assert r.returncode == 0, r.stderr
    assert "[/bold]/[red]ckpt/config.json" in r.stdout
    assert "[red]ckpt on 8 × h100" in r.stdout.splitlines()[0]


def test_preset_provenance_and_inferred_shape_survive():
    out = run("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
              columns="400").stdout
    assert "[meta-llama/Meta-Llama-3-70B" in out
    out = run("fit", "--params", "70e9", "--gpus", "256", columns="400").stdout
    assert "[shape inferred from a bare parameter count" in out


# ---- broken pipes keep the verdict -----------------------------------------------------------

def _closed_pipe_run(*args) -> subprocess.CompletedProcess:
    """stdout is a pipe whose reader is already gone: every write fails with EPIPE."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        return run(*args, stdout=wr)
    finally:
        os.close(wr)


@pytest.mark.parametrize("args,code", [(("check", GOOD), 0), (("check", BAD), 1),
                                       (("check", GOOD, "-f", "json"), 0),
                                       (("fit", "--params", "70e9", "--gpus", "256"), 0),
                                       (("models",), 0)])
def test_closed_pipe_exits_with_the_verdict(args, code):
    r = _closed_pipe_run(*args)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and "Broken pipe" not in r.stderr


def test_head_under_pipefail():
    exe = " ".join(_command())
    for plan, code in ((GOOD, 0), (BAD, 1)):
        p = subprocess.run(["bash", "-o", "pipefail", "-c", f"{exe} check {plan} | head -1"],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == code, p.stderr
        assert p.stdout.count("\n") == 1


# ---- one capacity per GPU --------------------------------------------------------------------

def test_default_hardware_is_the_h100_profile():
    a = run("memory", "--params", "14.73e9", "--gpus", "8", "--zero", "1", columns="200")
    b = run("memory", "--params", "14.73e9", "--gpus", "8", "--zero", "1", "--hardware", "h100",
            columns="200")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
    assert "fits in 81.60 GB usable of 80 GiB (85.9 GB)" in a.stdout


def test_gib_switches_the_quick_memory_lines():
    out = run("memory", "--params", "14.73e9", "--gpus", "8", "--zero", "1", "--gib",
              columns="200").stdout
    assert "Per GPU (GiB)" in out and "GiB of model state" in out
    assert "27.44" in out                                  # 29.46e9 bytes of weights in GiB
    out = run("memory", "--model", "llama3-8b", "--gpus", "8", "--gib", columns="300").stdout
    assert "usable of 80 GiB (85.9 GB)" in out


def test_profiles_list_capacity_as_the_vendor_states_it():
    out = run("profiles", columns="120").stdout
    assert "80 GiB (85.9 GB)" in out and "141 GiB (151.4 GB)" in out


def test_calibrate_never_compares_other_gpus_runs():
    # h100 has the MLPerf runs (calibration_runs.json): their families only, no other GPU's rows
    r = run("calibrate", "--hardware", "h100", columns="200")
    assert r.returncode == 0, r.stderr
    assert "mlperf-nvidia/megatron/H100" in r.stdout
    # the tables compare H100 runs only; a framework constant's note may name the other
    # families it was refitted on (megatron.step_host_s), which is its source, not a comparison
    tables, notes = r.stdout.split("\n· ", 1)
    assert "/A100" not in tables and "/B200" not in tables and "korthikanti" not in r.stdout
    assert all("/B200" not in n for n in notes.split("\n· ") if "step_host_s" not in n)
    r = run("calibrate", "--hardware", "mi300x", columns="200")   # AMD's MLPerf LoRA run only
    assert r.returncode == 0, r.stderr
    tables = r.stdout.split("\n· ", 1)[0]
    assert "mlperf-amd/megatron/MI300X" in tables and "/MI355X" not in tables
    r = run("calibrate", "--hardware", "l4", columns="200")            # no run on its GPU at all
    assert r.returncode == 0, r.stderr
    assert "No published run on NVIDIA L4" in r.stdout and "%" not in r.stdout
    r = run("calibrate", "--hardware", "a100", columns="200")          # an alias of the cases' GPU
    assert r.returncode == 0 and "Median |error|" in r.stdout


# ---- help: panels, metavars, examples ---------------------------------------------------------

COMMANDS = ("fit", "estimate", "memory", "check", "report", "export", "schema", "checkpoint",
            "comm", "bubble", "batch", "scaling", "layout", "calibrate", "completion", "models")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_what_to_type(command):
    r = run(command, "--help", columns="120")
    assert r.returncode == 0, r.stderr
    for raw in ("<bool>", "<str>", "<int>", "<float>", "<list[str]>"):
        assert raw not in r.stdout, (command, raw)
    assert "Examples:" in r.stdout and f"dtplan {command}" in r.stdout.split("Examples:")[1]


def test_fit_help_panels_in_order():
    out = run("fit", "--help", columns="120").stdout
    panels = re.findall(r"(?:╭─|\+-) (.+?) [─-]", out)   # rich's ASCII box where the locale's
    # encoding has no box drawing (a Latin-1 locale)
    assert panels == ["Model", "Hardware and GPUs", "Batch", "Layout", "Search", "Output"]
    assert re.search(r"--gpus\s+N\|LIST", out) and re.search(r"--model-config\s+PATH", out)


def test_count_suffixes():
    a = run("memory", "--params", "70B", "--gpus", "8", "-f", "json").stdout
    b = run("memory", "--params", "70e9", "--gpus", "8", "-f", "json").stdout
    assert a == b and json.loads(a)["params"] == 70_000_000_000
    j = json.loads(run("fit", "--model", "llama3-8b", "--gpus", "8", "--tokens-per-batch", "4Mi",
                       "-f", "json").stdout)
    assert j["global_batch"] * j["seq_len"] == 4 * 2 ** 20
    r = run("memory", "--params", "7x", "--gpus", "8")
    assert r.returncode == 2 and "--params" in r.stderr and "suffixes" in r.stderr


# ---- version, completion, report suffixes ----------------------------------------------------

def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"dtplan {version('dtplan')}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell):
    r = run("completion", shell)
    assert r.returncode == 0 and "_DTPLAN_COMPLETE" in r.stdout


def test_completion_answers_the_shell():
    r = run(env_extra={"_DTPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "dtplan fit --gp",
                       "COMP_CWORD": "2"})
    assert r.returncode == 0
    assert "--gpus" in r.stdout.split()
    r = run("completion", "tcsh")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_report_refuses_an_unknown_suffix(tmp_path):
    for name in ("review.pdf", "review"):
        r = run("report", Path(ROOT) / GOOD, "-o", tmp_path / name)
        assert r.returncode == 2 and "--output" in r.stderr and ".md or .html" in r.stderr
        assert not (tmp_path / name).exists()


# ---- citations only to files that ship -------------------------------------------------------

UNSHIPPED = ("CALIBRATION.md", "ECOSYSTEM.md", "SOURCES.md", "shared/reference", "gpu_specs.json",
             "hf_models.json", "/work/")


@pytest.mark.parametrize("args", [
    ("calibrate",), ("models",), ("profiles",),
    *[("profiles", "show", p.stem) for p in sorted((Path(ROOT) / "hardware_profiles").glob("*.toml"))],
    ("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2"),
    ("fit", "--model", "mixtral-8x7b", "--gpus", "64", "-f", "json"),
    ("check", GOOD), ("report", GOOD, "-o", "-"),
], ids=lambda a: " ".join(a))
def test_output_cites_only_shipped_files(args):
    r = run(*args, columns="200")
    assert r.returncode in (0, 1), r.stderr
    for word in UNSHIPPED:
        assert word not in r.stdout + r.stderr, word


# ---- CI examples work from the repository ----------------------------------------------------

def test_ci_workflow_runs_as_written(tmp_path):
    import yaml
    wf = yaml.safe_load((Path(ROOT) / "examples/ci/dtplan-gate.yml").read_text(encoding="utf-8"))
    runs = [s["run"].strip() for s in wf["jobs"]["check"]["steps"] if "run" in s]
    assert any(r.startswith("pip install .") for r in runs)       # from the checkout
    dtplan_runs = [r for r in runs if r.startswith("dtplan ")]
    assert len(dtplan_runs) >= 3
    for line in dtplan_runs:
        cmd, _, target = line.partition(">")
        out = tmp_path / Path(target.strip()).name if target else None
        r = run(*cmd.split()[1:], columns="200")
        assert r.returncode == 0, (line, r.stdout[-500:], r.stderr)
        if out is not None:
            out.write_text(r.stdout)
            assert json.loads(out.read_text())["ok"] is True


def test_pre_commit_hooks_at_the_root():
    import yaml
    hooks = yaml.safe_load((Path(ROOT) / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    by_id = {h["id"]: h for h in hooks}
    h = by_id["dtplan-check"]
    assert h["language"] == "python" and (Path(ROOT) / "pyproject.toml").is_file()
    assert re.search(h["files"], GOOD) and not re.search(h["files"], "examples/ci/dtplan-gate.yml")
    r = run(*h["entry"].split()[1:], GOOD)
    assert r.returncode == 0, r.stderr
    m = by_id["dtplan-check-megatron"]
    script = "examples/engines/megatron-llama3-70b-256gpu.sh"
    assert re.search(m["files"], script)
    assert run(*m["entry"].split()[1:], script).returncode == 0
