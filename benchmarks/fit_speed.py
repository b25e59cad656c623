"""Speed of the layout search (issue: `dtplan fit` in well under a second).

Prints, per scenario: candidates enumerated, candidates evaluated (all of them, in one
vectorised pass), seconds, candidates per second; then the CLI's end-to-end wall time
(median of several runs, interpreter start included). Run: python benchmarks/fit_speed.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

from planner.api import problem
from planner.specs.hardware import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset
from planner.search import search

H100 = load_profile("h100")
SCENARIOS = [
    ("(a) 70B (inferred) on 256 H100, 4M tokens/step", model_from_params(70e9), 256, 4096, 1024),
    ("(b) Llama-3.1-405B on 16,384 H100, 8K seq, 16M tokens", get_preset("llama3.1-405b"), 16384, 8192, 2048),
    ("(c) Mixtral-8x22B on 1,024 H100 with EP", get_preset("mixtral-8x22b"), 1024, 4096, 1024),
]
CLI = [["fit", "--params", "70e9", "--gpus", "256"],
       ["fit", "--model", "llama3.1-405b", "--gpus", "16384", "--seq-len", "8192", "--tokens-per-batch", "16e6"]]


def main(repeats: int = 5) -> None:
    print(f"{'scenario':58} {'enumerated':>10} {'evaluated':>10} {'valid':>7} {'seconds':>8} {'cand/s':>10}")
    for name, model, gpus, seq, gb in SCENARIOS:
        p = problem(model, H100, gpus, seq_len=seq, global_batch=gb)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            res = search(p)
            times.append(time.perf_counter() - t)
        sec = statistics.median(times)
        n = len(res.candidates)
        print(f"{name:58} {n:>10,} {n:>10,} {len(res.order):>7,} {sec:>8.3f} {n / sec:>10,.0f}")
    exe = shutil.which("dtplan")
    base = [exe] if exe else [sys.executable, "-m", "planner"]
    for args in CLI:
        walls = []
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run(base + args, capture_output=True, check=True)
            walls.append(time.perf_counter() - t)
        print(f"CLI `dtplan {' '.join(args)}`: median {statistics.median(walls):.3f} s "
              f"(min {min(walls):.3f}, max {max(walls):.3f}, {repeats} runs)")


if __name__ == "__main__":
    main()
