"""Bounded work at the top of every allowed range (issue 18): one line per probe — the
command, its exit code, wall and CPU seconds and the child's own peak resident memory
(os.wait4, so each probe is measured alone, not the largest child so far). Read the CPU
column: wall time is noisy on a shared machine; probes over 2 s CPU are flagged.

Probes: `--gpus` 10^7 on every command (and a plan file with gpus 10^7 for check, report,
export), GPU sweeps (16 counts, the cap, and lists over it), `--top` at its maximum and
`--all`, `fit` with every axis fixed or free, `calibrate`, `report` with its scaling chart,
`compare` with 1024 run files, the evidence readers on a large generated log, trace (plain and
gzip), nccl-tests table and memory summary, issue 29's hostile evidence (a real trace re-saved
with sorted keys, a gzip expanding to 2 GiB, a 1 GiB trace, snapshot pickle bombs), comm at the
ends of its bandwidth range, the architecture flags at their maximum, and issue 29's planner
probes (fit --all --allow-offload for Mixtral on 8,192 GPUs on every framework, DeepSeek-V3
and Kimi-K2 up to 10^7 GPUs, the largest spaces one fit admits, what would fit where nothing
fits, a --all sweep, an elastic shrink). The generated inputs go to a temporary directory,
written only for the probes chosen (--only), removed afterwards. A probe over the time limit is
killed and shown as "> LIMIT". Asserts nothing (a benchmark, not a test); the budget the issue
sets is ~2 s and ~500 MB per probe.

    python benchmarks/bounds.py [--only SUBSTRING] [--limit 120] [--trace-mb 200]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
G = "10000000"  # validate.MAX_GPUS: the top of every GPU count and parallel degree
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "fsdp")
PLAN_10M = """model: llama3-70b
hardware: h100
gpus: 10000000
seq_len: 8192
layout: {tp: 8, pp: 4, dp: 312500, zero: 1, sp: true, micro_batch: 1, recompute: selective}
batch: {global_batch: 2500000, accumulation: 8}
"""


MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
           "intermediate_size": 14336, "model_type": "mixtral", "num_attention_heads": 32,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False,
           "vocab_size": 32000}   # Mixtral-8x7B's published config.json (size fields)
PLAN_SHRINK = """model: llama3-70b
hardware: h100
gpus: 8192
seq_len: 4096
layout: {tp: 8, pp: 4, dp: 256, zero: 1, sp: true, micro_batch: 1, recompute: selective}
batch: {global_batch: 735134720, accumulation: 2871620}
"""


def _paths(tmp: Path) -> dict[str, str]:
    """Every generated input's path (written by _write_inputs only when a chosen probe reads
    it: `--only fit` writes no 200 MB trace)."""
    names = {"plan": "plan-10m.yaml", "log": "train.log", "trace": "trace.json",
             "runs": "runs", "nccl": "all_reduce_perf.txt", "summary": "memory_summary.txt",
             "sorted": "sorted.json", "bomb": "bomb.json.gz", "big": "big.json",
             "hang": "hang.pickle", "oom": "oom.pickle", "memo": "memo.pickle",
             "mixtral": "mixtral-config.json", "shrink": "plan-shrink.yaml"}
    out = {k: str(tmp / v) for k, v in names.items()}
    out["evplan"] = str(ROOT / "tests" / "data" / "evidence" / "llama3.1-8b-8xh100-fsdp8.yaml")
    return out


def _write_inputs(f: dict[str, str], wanted: set[str], trace_mb: int) -> None:
    """The generated files of `wanted` (keys of _paths): a plan with gpus 10^7, a long training
    log, a large Kineto trace (plain and gzip), a directory of many runs, issue 29's hostile
    evidence, a Mixtral config.json and a plan whose elastic shrink searches a large space."""
    simple = {"plan": PLAN_10M, "mixtral": json.dumps(MIXTRAL), "shrink": PLAN_SHRINK}
    for k in wanted & set(simple):
        Path(f[k]).write_text(simple[k])
    if "log" in wanted:
        _write_log(Path(f["log"]))
    if "trace" in wanted or ("sorted" in wanted and not _real_trace().is_file()):
        _write_trace(Path(f["trace"]), trace_mb)
        with open(f["trace"], "rb") as src, gzip.open(f["trace"] + ".gz", "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst)
    if "nccl" in wanted:
        _write_nccl(Path(f["nccl"]))
    if "summary" in wanted:
        _write_summary(Path(f["summary"]))
    if "runs" in wanted:
        runs = Path(f["runs"])
        runs.mkdir()
        for i in range(1024):   # evidence.MAX_EVIDENCE_FILES: one per rank of a 1,024-GPU job
            shutil.copy(ROOT / "tests" / "data" / "evidence" / "torchtitan_llama3.1-8b_8xh100.log",
                        runs / f"rank{i:03d}.log")
    if wanted & {"sorted", "bomb", "big", "hang", "oom", "memo"}:
        _hostile_inputs(f, Path(f["trace"]))


def _write_log(log: Path) -> None:
    line = ("[rank0]:[titan] 2026-01-05 12:00:30,000 - root - INFO - step: {i}  loss: 10.0100  "
            "memory: 82.40GiB(86.75%)  tps: 5,762  tflops: 333.71  mfu: 33.73%\n")
    with log.open("w") as fh:  # ~1.5 M steps, ~200 MB: inside the 256 MiB text bound
        fh.write("[rank0]:[titan] 2026-01-05 12:00:00,000 - root - INFO - CUDA capacity: "
                 "NVIDIA H100 with 94.99GiB memory\n")
        for i in range(1, 1_400_001):
            fh.write(line.format(i=i))


def _write_nccl(nccl: Path) -> None:
    with nccl.open("w") as fh:   # 9,999 rows: just under evidence.nccl.MAX_ROWS
        fh.write("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)\n#       "
                 "size         count      type   redop    root     time   algbw   busbw #wrong"
                 "     time   algbw   busbw #wrong\n")
        for i in range(9_999):
            fh.write(f"{8 * (i + 1):>12} {2 * (i + 1):>13}     float     sum      -1    28.50    "
                     "0.00    0.00      0    27.90    0.00    0.00      0\n")


def _write_summary(summary: Path) -> None:
    with summary.open("w") as fh:   # ~100 MB of memory_summary() table rows
        fh.write("|      PyTorch CUDA memory summary, device ID 0      |\n"
                 "| Allocated memory      |  12345 MiB |  23456 MiB |  99999 GiB |  99998 GiB |\n")
        for _ in range(1_300_000):
            fh.write("|       from large pool |  12000 MiB |  23000 MiB |  99000 GiB |  99000 GiB |\n")


REAL_TRACE = ROOT.parent / "shared" / "fixtures" / "real" / "traces" / \
    "hta_a100-80gb_16rank_rank0.pt.trace.json.gz"


def _real_trace() -> Path:
    return REAL_TRACE if REAL_TRACE.is_file() else Path("/work/shared/fixtures/real/traces") \
        / REAL_TRACE.name


def _hostile_inputs(f: dict[str, str], trace: Path) -> None:
    """Issue 29's evidence files: a real trace re-saved with sorted keys, a gzip expanding to
    2 GiB (32 gzip members of 64 MiB of JSON whitespace: ~2 MB on disk), a 1 GiB trace (sparse),
    and snapshot pickle bombs (shared references, a 2^32 memo index)."""
    real = _real_trace()
    # re-saved in a child process: a parsed trace is large
    src = real if real.is_file() else trace
    subprocess.run([sys.executable, "-c", "import gzip, json, sys; raw = open(sys.argv[1], 'rb')"
                    ".read(); raw = gzip.decompress(raw) if raw[:2] == b'\\x1f\\x8b' else raw; "
                    "json.dump(json.loads(raw), open(sys.argv[2], 'w'), sort_keys=True)",
                    str(src), f["sorted"]], check=True)
    spaces = gzip.compress(b" " * (64 << 20), 9)
    with open(f["bomb"], "wb") as fh:
        fh.write(gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20), 9))
        for _ in range(31):
            fh.write(spaces)
    with open(f["big"], "wb") as fh:
        fh.write(b'{"traceEvents": [')
        fh.truncate(1 << 30)
    blk = {"state": "active_allocated", "size": 1}
    Path(f["hang"]).write_bytes(pickle.dumps(
        {"segments": [{"total_size": 2, "blocks": [blk] * 100_000}] * 100_000}, 4))
    Path(f["oom"]).write_bytes(pickle.dumps(
        {"segments": [], "device_traces": [[{"action": "alloc", "size": 1}] * 50_000] * 50_000}, 4))
    Path(f["memo"]).write_bytes(b"\x80\x04]r\xff\xff\xff\xff.")


def _write_trace(path: Path, mb: int) -> None:
    """A Kineto-shaped trace: ProfilerSteps of GEMM / attention / NCCL kernels, ~`mb` MB."""
    with path.open("w") as fh:
        fh.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}], '
                 '"traceEvents": [\n')
        t, step, first = 0.0, 0, True
        while fh.tell() < mb * 2**20:
            if step % 1000 == 0:
                fh.write(("" if first else ",\n") + json.dumps(
                    {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step // 1000}",
                     "ts": t, "dur": 1000 * 30.0, "pid": 1, "tid": 1}))
                first = False
            name = ("sm90_xmma_gemm_bf16", "flash_fwd_kernel", "ncclDevKernel_AllGather_RING")[step % 3]
            fh.write(",\n" + json.dumps({"ph": "X", "cat": "kernel", "name": name, "ts": t,
                                         "dur": 25.0, "pid": 0, "tid": 7,
                                         "args": {"device": 0, "correlation": step}}))
            t += 30.0
            step += 1
        fh.write("\n]}\n")


def probes(f: dict[str, str]) -> list[list[str]]:
    """Every command at the top of its range; the issue's must-show 3 is the first layout line."""
    m70 = ["--model", "llama3-70b"]
    return [
        ["memory", "--model", "gpt2", "--gpus", G],
        ["memory", *m70, "--gpus", G, "--tp", "8", "--pp", "4"],
        ["estimate", "--model", "gpt2", "--gpus", G, "--tp", G],
        ["estimate", "--model", "gpt2", "--gpus", G],
        ["estimate", *m70, "--gpus", G, "--tp", "8", "--pp", "4"],
        ["estimate", "--from-plan", f["plan"]],
        ["fit", "--model", "gpt2", "--gpus", G],
        ["fit", "--model", "llama3.1-405b", "--gpus", G],
        ["fit", *m70, "--gpus", G, "--tp", "8", "--pp", "4", "--cp", "1", "--zero", "1"],
        ["fit", *m70, "--gpus", "64.." + G],                       # 19 counts: refused
        ["fit", *m70, "--gpus", ",".join(str(64 * (i + 1)) for i in range(64))],   # refused
        ["fit", *m70, "--gpus", ",".join(str(256 * (i + 1)) for i in range(16))],
        ["fit", *m70, "--gpus", "64..2097152"],                   # 16 counts, the cap
        ["fit", *m70, "--gpus", ",".join(str(10**7 - 8 * i) for i in range(16))],  # worst
        ["fit", *m70, "--gpus", "1024", "--top", "1000"],
        ["fit", *m70, "--gpus", "1024", "--all"],
        ["fit", *m70, "--gpus", G, "--all", "-f", "json"],
        ["layout", "--gpus", G, "--gpus-per-node", "8", "--tp", "8", "--pp", "4", "--show-groups"],
        ["layout", "--gpus", G, "--show-groups", "-f", "json"],
        ["layout", "--gpus", G, "--tp", G, "--show-groups"],
        ["checkpoint", *m70, "--gpus", G, "--tp", G],
        ["checkpoint", "--cost-min", "1", "--mtbf-hours", "1",
         "--intervals", ",".join(str(i + 1) for i in range(64))],
        ["comm", "--gpus", "2.." + G, "--message-gb", "1", "--hardware", "h100"],
        ["comm", "--gpus", "2.." + G, "--message-gb", "1e6", "--bandwidth", "1e-6"],
        ["comm", "--gpus", "8", "--message-gb", "1", "--bandwidth", "5e-324"],   # refused
        ["bubble", "--stages", G, "--micro-batches", G],
        ["bubble", "--stages", G, "--micro-batches", ",".join(str(2**i) for i in range(24)),
         "--schedule", "interleaved", "--chunks", G],
        ["scaling", "--baseline-ms", "1000", "--measured-ms", "1", "--gpus", G],
        ["check", f["plan"], "-f", "json"],
        ["export", f["plan"], "--to", "megatron"],
        ["export", f["plan"], "--to", "deepspeed"],
        ["report", f["plan"], "-o", "-"],                  # one search, the sweep's budget spent
        ["report", f["plan"], "-o", str(Path(f["plan"]).with_name("review.html")), "--force"],
        ["report", *m70, "--gpus", G, "-o", str(Path(f["plan"]).with_name("r.md")), "--force"],
        ["calibrate"],
        ["calibrate", "--hardware", "h100"],
        ["calibrate", "--from", f["log"]],
        ["calibrate", "--from", f["trace"]],               # streamed event by event
        ["calibrate", "--from", f["trace"] + ".gz"],
        ["calibrate", "--from", f["nccl"]],
        ["calibrate", "--from", f["summary"]],
        ["compare", f["runs"], "--plan", f["evplan"]],
        # issue 29: hostile evidence, each read or refused in under 5 s with its peak memory
        ["calibrate", "--from", f["sorted"]],               # a real trace, sorted keys
        ["calibrate", "--from", f["bomb"]],                 # expands to 2 GiB: refused
        ["calibrate", "--from", f["big"]],                  # 1 GiB: over the 512 MiB ceiling
        ["calibrate", "--from", f["hang"]],                 # 400 kB of shared references
        ["calibrate", "--from", f["oom"]],                  # 200 kB: 2.5e9 trace entries
        ["calibrate", "--from", f["memo"]],                 # 8 bytes: a 2^32 memo index
        ["compare", f["trace"], "--plan", f["evplan"]],
        ["memory", "--layers", G, "--hidden", "8192", "--heads", "64"],
        ["memory", "--layers", "80", "--hidden", G, "--heads", "10"],
        ["memory", "--layers", "80", "--hidden", "8192", "--heads", "64", "--vocab", G],
        ["memory", *m70, "--seq-len", "100000000", "--global-batch", "1"],
        ["estimate", "--layers", G, "--hidden", G, "--heads", "10", "--gpus", G, "--pp", G],
        ["estimate", *m70, "--seq-len", "100000000", "--global-batch", "1", "--gpus", G,
         "--cp", G],
        ["fit", "--layers", G, "--hidden", "8192", "--heads", "64", "--gpus", G],
        ["fit", *m70, "--seq-len", "100000000", "--global-batch", "1", "--gpus", G],
        ["fit", *m70, "--gpus", G, "--global-batch", "1000000000"],
        # issue 29, class 6: the largest ranges of fit, --all and offload, every framework
        *[["fit", "--all", "--allow-offload", "--gpus", "8192", "--model-config", f["mixtral"],
           *fw] for fw in ([], *(["--framework", x] for x in FRAMEWORKS))],
        *[["fit", "--all", "--allow-offload", "--gpus", g, "--model", m, "--framework", "torchtitan"]
          for m in ("deepseek-v3", "kimi-k2") for g in ("8192", G)],
        ["fit", "--allow-offload", "--gpus", "8192", "--model-config", f["mixtral"],   # 11.0 M
         "--framework", "torchtitan", "--global-batch", "1000000000"],
        ["fit", "--model", "kimi-k2", "--gpus", "256", "--global-batch", "735134400",   # 14.4 M
         "--framework", "torchtitan"],
        ["fit", "--model", "kimi-k2", "--gpus", "64", "--global-batch", "735134400",    # none fits:
         "--framework", "torchtitan"],                              # what would fit, bounded
        ["fit", "--all", "--model-config", f["mixtral"], "--gpus", ",".join(   # --all sweep
            str(512 * (i + 1)) for i in range(16)), "--framework", "deepspeed"],
        ["fit", "--all", *m70, "--gpus", "256,512,1024,2048,4096,8192"],   # 1.34 M: refused
        # before any count is searched (each count alone is within the --all bound)
        ["fit", "--from-plan", f["shrink"], "--gpus", "7680"],     # elastic shrink, 7e8 sequences
    ]


def measure(cmd: list[str], argv: list[str], limit: float) -> tuple[int | None, float, float, float]:
    """(exit code or None when killed, wall s, CPU s, peak RSS MB) of one child, measured alone
    (CPU = the child's user + system time from os.wait4: wall time is noisy on a shared machine)."""
    env = {**os.environ, "COLUMNS": "100"}
    t = time.perf_counter()
    p = subprocess.Popen(cmd + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env, cwd=tempfile.gettempdir())
    deadline, code, ru = t + limit, None, None
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() > deadline:
            p.kill()
            _, _, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.02)
    p.returncode = code if code is not None else -9  # reaped here, not by Popen
    return code, time.perf_counter() - t, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the probes whose command contains this")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before a probe is killed")
    ap.add_argument("--trace-mb", type=int, default=200, help="size of the generated trace")
    ap.add_argument("--write-inputs", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write_inputs:
        _write_inputs(_paths(Path(args.write_inputs)), set(args.inputs), args.trace_mb)
        return
    exe = shutil.which("dtplan", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "planner"]
    with tempfile.TemporaryDirectory(prefix="dtplan-bounds-") as tmp:
        files = _paths(Path(tmp))
        chosen = [a for a in probes(files) if args.only in " ".join(a).replace(tmp, "$TMP")]
        wanted = sorted(k for k, path in files.items() if any(path in x for a in chosen for x in a))
        # written by a child: this process stays small, and each probe's child (forked from it)
        # starts from its resident set, which would show in every probe's peak
        subprocess.run([sys.executable, __file__, "--write-inputs", tmp, "--trace-mb",
                        str(args.trace_mb), *wanted], check=True)
        print(f"{'exit':>4} {'wall s':>8} {'CPU s':>7} {'peak MB':>8}  command")
        for argv in chosen:
            shown = " ".join(argv).replace(tmp, "$TMP")
            code, wall, cpu, mb = measure(cmd, argv, args.limit)
            status = "kill" if code is None else str(code)
            wall_s = f"> {args.limit:.0f}" if code is None else f"{wall:.2f}"
            flag = "  <-- over 2 s CPU" if cpu > 2 or code is None else ""
            print(f"{status:>4} {wall_s:>8} {cpu:7.2f} {mb:8.0f}  dtplan {shown}{flag}", flush=True)


if __name__ == "__main__":
    main()
