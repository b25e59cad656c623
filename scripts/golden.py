"""Golden outputs: capture the JSON of representative dtplan invocations, compare two captures.

    python scripts/golden.py capture DIR     # one file per invocation: argv, exit code, stdout
    python scripts/golden.py compare DIR1 DIR2

Used to show a refactor changes no figure: compare is byte-for-byte on stdout and exit code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_EST = ["--model", "llama3-70b", "--gpus", "256", "--tp", "8", "--pp", "4", "--seq-len", "8192"]
_EST_CP = ["--model", "llama3-8b", "--gpus", "64", "--tp", "8", "--cp", "2", "--seq-len", "32768"]
# A TP8 x CP2 plan (our own), written at capture time: check and report must agree on it.
CP_PLAN = Path(tempfile.gettempdir()) / "dtplan-golden-cp-plan.yaml"
CP_PLAN_TEXT = """name: golden-cp
model: llama3-8b
hardware: h100
gpus: 64
seq_len: 32768
layout: {tp: 8, cp: 2, pp: 1, dp: 4, zero: 1, sp: true, micro_batch: 1, recompute: full}
batch: {global_batch: 64, accumulation: 16}
checkpoint: {interval_min: 30, gpu_mtbf_hours: 50000}
"""
_MOE = ["--model", "mixtral-8x7b", "--gpus", "64", "--tp", "2", "--ep", "8"]


def invocations() -> list[tuple[str, list[str]]]:
    """(name, argv after `dtplan`) for every command and every shipped plan/engine example."""
    inv: list[tuple[str, list[str]]] = [
        ("models", ["models", "-f", "json"]),
        ("profiles", ["profiles", "-f", "json"]),
        ("profiles-h100", ["profiles", "show", "h100", "-f", "json"]),
        ("schema", ["schema"]),
        ("schema-verdict", ["schema", "verdict"]),
        ("calibrate", ["calibrate", "-f", "json"]),
        ("comm", ["comm", "--message-gb", "1", "--gpus", "8,64", "--bandwidth", "50", "-f", "json"]),
        ("comm-hw", ["comm", "--message-gb", "2", "--gpus", "8,64,512", "--hardware", "h100",
                     "-f", "json"]),
        ("bubble", ["bubble", "--stages", "4", "--micro-batches", "1,4,16", "-f", "json"]),
        ("bubble-il", ["bubble", "--stages", "8", "--micro-batches", "32", "--schedule",
                       "interleaved", "--chunks", "2", "-f", "json"]),
        ("batch", ["batch", "--micro-batch", "2", "--dp", "16", "--accum", "8", "-f", "json"]),
        ("batch-solve", ["batch", "--micro-batch", "1", "--dp", "8", "--global-batch", "1024",
                         "--seq-len", "4096", "-f", "json"]),
        ("scaling", ["scaling", "--baseline-ms", "1000", "--measured-ms", "140", "--gpus", "8",
                     "-f", "json"]),
        ("layout", ["layout", "--gpus", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8",
                    "-f", "json"]),
        ("checkpoint-simple", ["checkpoint", "--cost-min", "2", "--mtbf-hours", "10", "-f", "json"]),
        ("checkpoint-derived", ["checkpoint", "--model", "llama3-70b", "--gpus", "256",
                                "--gpu-mtbf-hours", "50000", "--train-tokens", "1e12",
                                "--tokens-per-s", "3e5", "-f", "json"]),
        ("estimate", ["estimate", *_EST, "-f", "json"]),
        ("estimate-cp", ["estimate", *_EST_CP, "-f", "json"]),
        ("estimate-moe", ["estimate", *_MOE, "-f", "json"]),
        ("estimate-zero3", ["estimate", "--model", "llama3-8b", "--gpus", "64", "--zero", "3",
                            "--recompute", "full", "--train-tokens", "1e12", "--gpu-hour-cost",
                            "2", "-f", "json"]),
        ("estimate-il", ["estimate", "--model", "llama3-70b", "--gpus", "512", "--tp", "8",
                         "--pp", "8", "--schedule", "interleaved", "--chunks", "2",
                         "--hardware", "a100-80g", "-f", "json"]),
        ("estimate-offload", ["estimate", "--model", "llama3-8b", "--gpus", "8", "--zero", "3",
                              "--offload-optimizer", "cpu", "-f", "json"]),
        ("memory", ["memory", *_EST, "-f", "json"]),
        ("memory-cp", ["memory", *_EST_CP, "-f", "json"]),
        ("memory-zero", ["memory", "--model", "llama3-8b", "--gpus", "8", "--zero", "2",
                         "-f", "json"]),
        ("fit", ["fit", "--model", "llama3-70b", "--gpus", "256", "--seq-len", "8192",
                 "-f", "json"]),
        ("fit-8b", ["fit", "--model", "llama3-8b", "--gpus", "64", "--objective", "headroom",
                    "--top", "3", "-f", "json"]),
        ("fit-moe", ["fit", "--model", "mixtral-8x7b", "--gpus", "64", "--top", "3", "-f", "json"]),
        ("fit-fixed", ["fit", "--model", "llama3-70b", "--gpus", "128", "--tp", "8",
                       "--hardware", "a100-80g", "--top", "3", "-f", "json"]),
        ("fit-hf", ["fit", "--model-config", str(REPO / "examples/models/qwen2-7b"), "--gpus",
                    "16", "--top", "3", "-f", "json"]),
        ("estimate-bad", ["estimate", "--model", "llama3-8b", "--gpus", "8", "--nic-gbit", "-5",
                          "-f", "json"]),
        ("report-cp", ["report", str(CP_PLAN), "--no-charts", "-o", "-"]),
        ("check-cp", ["check", str(CP_PLAN), "-f", "json"]),
        ("report-json", ["report", str(REPO / "examples/plans/llama3-70b-256xh100.yaml"),
                         "--no-charts", "-o", "-"]),
    ]
    inv += _tables()
    for plan in sorted((REPO / "examples/plans").glob("*.yaml")):
        inv.append((f"check-{plan.stem}", ["check", str(plan), "-f", "json"]))
    for eng in sorted((REPO / "examples/engines").iterdir()):
        if eng.suffix == ".expect":
            continue
        args: list[str] = []
        expect = eng.with_name(eng.name + ".expect")
        text = (expect if expect.exists() else eng).read_text()
        for line in text.splitlines():
            if line.startswith("# dtplan-args:"):
                args = line.split(":", 1)[1].split()
        inv.append((f"check-{eng.name}", ["check", str(eng), *args, "-f", "json"]))
    return inv


def _tables() -> list[tuple[str, list[str]]]:
    """The text a person reads: tables, help screens, errors and the evidence commands."""
    plan = str(REPO / "examples/plans/llama3-70b-256xh100.yaml")
    ev = REPO / "tests/data/evidence"
    return [
        ("t-fit-params", ["fit", "--params", "70e9", "--gpus", "256"]),
        ("t-fit-405b", ["fit", "--model", "llama3.1-405b", "--gpus", "16384", "--seq-len", "8192",
                        "--tokens-per-batch", "16e6"]),
        ("t-fit-wide", ["fit", "--model", "llama3-8b", "--gpus", "64", "--wide", "--top", "5"]),
        ("t-fit-sweep", ["fit", "--model", "llama3-8b", "--gpus", "64,128"]),
        ("t-fit-md", ["fit", "--model", "llama3-8b", "--gpus", "64", "-f", "markdown"]),
        ("t-fit-nofit", ["fit", "--model", "llama3.1-405b", "--gpus", "8"]),
        ("t-fit-torchtitan", ["fit", "--model", "llama3-8b", "--gpus", "64", "--framework",
                              "torchtitan", "--hardware", "h100-96gb-500w"]),
        ("t-fit-shrink", ["fit", "--from-plan", plan, "--gpus", "240"]),
        ("t-estimate", ["estimate", *_EST]),
        ("t-estimate-405b", ["estimate", "--model", "llama3.1-405b", "--gpus", "16384", "--tp", "8",
                             "--pp", "16", "--zero", "1", "--seq-len", "8192",
                             "--tokens-per-batch", "16e6", "--schedule", "interleaved",
                             "--chunks", "4", "--recompute", "full", "--recompute-layers", "4",
                             "--train-tokens", "15.6e12", "--job-mtbf-hours", "3"]),
        ("t-memory", ["memory", *_EST]),
        ("t-memory-states", ["memory", "--params", "7e9", "--gpus", "8"]),
        ("t-check", ["check", plan]),
        ("t-check-github", ["check", "--format", "github",
                            str(REPO / "examples/plans/fail-fits-in-memory.yaml")]),
        ("t-check-fail", ["check", str(REPO / "examples/plans/fail-world-size.yaml")]),
        ("t-report-md", ["report", plan, "--no-charts", "-o", "-"]),
        ("t-models", ["models"]),
        ("t-profiles", ["profiles"]),
        ("t-profiles-show", ["profiles", "show", "h100"]),
        ("t-calibrate", ["calibrate"]),
        ("t-calibrate-from", ["calibrate", "--from", str(ev / "torchtitan_llama3.1-8b_8xh100.log"),
                              "--from", str(ev / "nccl_wrapped_tagged.txt")]),
        ("t-compare", ["compare", str(ev / "torchtitan_llama3.1-8b_8xh100.log"), "--plan",
                       str(ev / "llama3.1-8b-8xh100-fsdp8.yaml")]),
        ("t-comm", ["comm", "--message-gb", "14", "--gpus", "8,64", "--bandwidth", "200"]),
        ("t-bubble", ["bubble", "--stages", "4", "--micro-batches", "8"]),
        ("t-checkpoint", ["checkpoint", "--cost-min", "3", "--mtbf-hours", "50"]),
        ("t-layout", ["layout", "--gpus", "256", "--tp", "8", "--pp", "4"]),
        ("h-top", ["--help"]),
        ("h-fit", ["fit", "--help"]),
        ("h-estimate", ["estimate", "--help"]),
        ("h-check", ["check", "--help"]),
        ("h-export", ["export", "--help"]),
        ("e-unknown-command", ["fitt", "--gpus", "8"]),
        ("e-unknown-option", ["fit", "--params", "7e9", "--gpus", "8", "--bogus"]),
        ("e-bad-number", ["fit", "--params", "7e9", "--gpus", "eight"]),
        ("e-bad-choice", ["estimate", "--model", "llama3-8b", "--gpus", "8", "--recompute", "most"]),
        ("e-unknown-model", ["fit", "--model", "llama9", "--gpus", "8"]),
        ("e-missing-file", ["check", "/nonexistent/plan.yaml"]),
        ("e-missing-value", ["fit", "--gpus"]),
        ("e-unknown-hardware", ["fit", "--params", "7e9", "--gpus", "8", "--hardware", "h900"]),
        ("e-zero-gpus", ["estimate", "--params", "7e9", "--gpus", "0"]),
    ]


def exports() -> list[tuple[str, list[str]]]:
    """Exports write files: each into a fresh temp dir, whose file text is captured."""
    plan = str(REPO / "examples/plans/llama3-70b-256xh100.yaml")
    return [(f"export-{e}", ["export", plan, "--to", e]) for e in
            ("deepspeed", "megatron", "torchtitan", "accelerate")] + [
        ("export-fit-megatron", ["export", "--model", "llama3-8b", "--gpus", "64", "--to",
                                 "megatron"])]


def _run(argv: list[str], cwd: str) -> dict:
    proc = subprocess.run(["dtplan", *argv], capture_output=True, text=True, cwd=cwd,
                          env={"COLUMNS": "120", "PATH": _path(), "NO_COLOR": "1"})
    return {"argv": argv, "exit": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr}


def _path() -> str:
    import os

    return os.environ.get("PATH", "")


def capture(out: Path) -> None:
    """Write one JSON file per invocation into out."""
    out.mkdir(parents=True, exist_ok=True)
    CP_PLAN.write_text(CP_PLAN_TEXT)
    for name, argv in invocations():
        with tempfile.TemporaryDirectory() as tmp:
            rec = _run(argv, tmp)
        (out / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True))
    for name, argv in exports():
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "out.cfg"
            rec = _run([*argv, "-o", str(target)], tmp)
            rec["file"] = target.read_text() if target.exists() else None
            rec["stdout"] = rec["stdout"].replace(tmp, "TMP")
            rec["stderr"] = rec["stderr"].replace(tmp, "TMP")
            rec["argv"] = argv
        (out / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    """Print each invocation whose exit code, stdout, stderr or exported file differ."""
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    bad = 0
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.exists() and pb.exists()):
            print(f"{name}: only in {'first' if pa.exists() else 'second'}")
            bad += 1
            continue
        ra, rb = json.loads(pa.read_text()), json.loads(pb.read_text())
        diffs = [k for k in ("exit", "stdout", "stderr", "file") if ra.get(k) != rb.get(k)]
        if diffs:
            bad += 1
            print(f"{name}: differs in {', '.join(diffs)}")
    print(f"{len(names) - bad}/{len(names)} identical")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "capture":
        capture(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
