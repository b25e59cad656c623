"""Evidence-reader speed (issue 18): MB/s of CPU time per reader on large generated files.

Writes, into a temporary directory removed afterwards, files in the shapes of the real
artifacts the readers take (../shared/fixtures/real/: a torchtitan and a Megatron-LM training
log, a torch.cuda.memory_summary() table repeated, a Kineto trace of ProfilerSteps), all
generated here, none copied; then reads each through planner.evidence.read_file and prints
its size, CPU seconds (time.process_time, best of --repeats) and MB per CPU second. Read the
CPU column: wall time is noisy on a shared machine. Asserts nothing (a benchmark).

    OPENBLAS_NUM_THREADS=1 python benchmarks/reader_speed.py [--mb 200] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TITAN = ("[rank0]:[titan] 2026-01-05 12:00:{s:02d},000 - root - INFO - step: {i}  loss: 10.0100  "
         "memory: 82.40GiB(86.75%)  tps: 5,762  tflops: 333.71  mfu: 33.73%\n")
MEGATRON = (" [2026-01-05 12:00:00] iteration {i:>8}/ 1000000 | consumed samples: {c:>12} | "
            "elapsed time per iteration (ms): 1234.5 | learning rate: 3.000E-04 | global batch "
            "size:  1024 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.321 | number "
            "of skipped iterations:   0 | number of nan iterations:   0 |\n")
SUMMARY = """|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |    {a:>4} MB |    4877 MB |   89299 MB |   88237 MB |
|       from large pool |    1048 MB |    4865 MB |   89263 MB |   88215 MB |
|       from small pool |      14 MB |      14 MB |      35 MB |      21 MB |
|---------------------------------------------------------------------------|
| Active memory         |    1062 MB |    4877 MB |   89299 MB |   88237 MB |
|       from large pool |    1048 MB |    4865 MB |   89263 MB |   88215 MB |
|       from small pool |      14 MB |      14 MB |      35 MB |      21 MB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |    5120 MB |    5120 MB |    5120 MB |       0 B  |
|       from large pool |    5100 MB |    5100 MB |    5100 MB |       0 B  |
|       from small pool |      20 MB |      20 MB |      20 MB |       0 B  |
|---------------------------------------------------------------------------|
"""


def _fill(path: Path, mb: int, line) -> None:
    """Write line(i) for i = 1, 2, … until the file holds `mb` MB."""
    with path.open("w") as fh:
        i, size = 1, 0
        while size < mb * 2**20:
            size += fh.write(line(i))
            i += 1


def write_inputs(tmp: Path, mb: int) -> dict[str, Path]:
    """The generated files, by reader."""
    files = {"training log (torchtitan)": tmp / "titan.log",
             "training log (Megatron-LM)": tmp / "megatron.log",
             "memory summary": tmp / "memory_summary.txt",
             "Kineto trace": tmp / "trace.json"}
    _fill(files["training log (torchtitan)"], mb, lambda i: TITAN.format(i=i, s=i % 60))
    _fill(files["training log (Megatron-LM)"], mb, lambda i: MEGATRON.format(i=i, c=i * 1024))
    _fill(files["memory summary"], mb // 2, lambda i: SUMMARY.format(a=1000 + i % 9000))
    _write_trace(files["Kineto trace"], mb)
    return files


def _write_trace(path: Path, mb: int) -> None:
    """A Kineto-shaped trace: ProfilerSteps over GEMM, attention and NCCL kernels, ~`mb` MB."""
    names = ("sm90_xmma_gemm_bf16bf16_bf16f32", "flash_fwd_kernel",
             "ncclDevKernel_AllGather_RING_LL")
    with path.open("w") as fh:
        fh.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}], '
                 '"traceEvents": [\n')
        t, k, size = 0.0, 0, 0
        while size < mb * 2**20:
            if k % 1000 == 0:
                size += fh.write(("" if k == 0 else ",\n") + json.dumps(
                    {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k // 1000}",
                     "ts": t, "dur": 30000.0, "pid": 1, "tid": 1}))
            size += fh.write(",\n" + json.dumps(
                {"ph": "X", "cat": "kernel", "name": names[k % 3], "ts": t, "dur": 25.0,
                 "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7, "correlation": k}}))
            t += 30.0
            k += 1
        fh.write("\n]}\n")


def measure(path: Path, repeats: int) -> float:
    """Best CPU seconds of read_file over `repeats` reads."""
    from planner.evidence import read_file
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        read_file(path)
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="size of each log and trace (MB)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--only", default="", help="readers whose name contains this")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dtplan-readers-"))
    try:
        files = write_inputs(tmp, args.mb)
        print(f"{'reader':28} {'MB':>7} {'CPU s':>8} {'MB/CPU s':>9}")
        for name, path in files.items():
            if args.only.lower() not in name.lower():
                continue
            mb = path.stat().st_size / 2**20
            cpu = measure(path, args.repeats)
            print(f"{name:28} {mb:7.1f} {cpu:8.2f} {mb / cpu:9.1f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
