"""`dtplan layout --show-groups` at very large GPU counts: wall time and peak memory.

Rank groups are closed-form (planner.engine.ranks), so the cost does not grow with the GPU
count; `--show-groups` lists the first 64 groups per axis, each cut to 1,024 ranks (said in
the output). Runs each command `--repeats` times; prints the median wall time and the child's
peak resident memory. Asserts nothing.

    python benchmarks/layout_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

CASES = [
    ["layout", "--gpus", "10000000", "--gpus-per-node", "8", "--tp", "8", "--pp", "4", "--show-groups"],
    ["layout", "--gpus", "10000000", "--gpus-per-node", "8", "--tp", "8", "--pp", "4", "--show-groups",
     "-f", "json"],
    ["layout", "--gpus", "16384", "--tp", "8", "--pp", "16", "--show-groups", "-f", "json"],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    exe = shutil.which("dtplan", path=os.path.dirname(sys.executable))
    base = [exe] if exe else [sys.executable, "-m", "planner"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for argv in CASES:
        walls, size = [], 0
        for _ in range(args.repeats + 1):  # the first run fills the bytecode cache
            t = time.perf_counter()
            p = subprocess.run(base + argv, env=env, capture_output=True, check=False)
            walls.append(time.perf_counter() - t)
            size = len(p.stdout)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"dtplan {' '.join(argv)}\n    median {statistics.median(walls[1:]):.3f} s, "
              f"output {size:,} bytes, peak RSS of the largest child so far {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
