"""End-to-end wall time of the `dtplan` CLI against the floor of its own imports.

The floor is `python -c "import numpy, pydantic, rich, typer"` in the same interpreter: no CLI
built on those four libraries can start faster. Each command runs `--repeats` times (default 10)
alternating with the floor so both see the same machine load; the medians are compared.
Bytecode caching is switched on for these runs (PYTHONDONTWRITEBYTECODE removed from the
child environment), as it is for an installed wheel; the first, cache-filling run of each is
a warm-up and not counted. Prints figures; asserts nothing.

    python benchmarks/cli_speed.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

FLOOR = [sys.executable, "-c", "import numpy, pydantic, rich, typer"]
COMMANDS = [
    ["fit", "--params", "70e9", "--gpus", "256"],
    ["fit", "--params", "70e9", "--gpus", "256", "-f", "json"],
    ["--help"],
    ["layout", "--gpus", "10000000", "--gpus-per-node", "8", "--tp", "8", "--pp", "4",
     "--show-groups"],
    ["fit", "--params", "70e9", "--gpus", "64..1024"],
]


def _dtplan() -> list[str]:
    exe = shutil.which("dtplan", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "planner"]


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base = _dtplan()
    print(f"interpreter: {sys.executable}; {args.repeats} runs each, medians; os.cpu_count()="
          f"{os.cpu_count()}")
    for argv in COMMANDS:
        cmd = base + argv
        _wall(cmd, env), _wall(FLOOR, env)  # warm-up: fills the bytecode cache
        ours, floor = [], []
        for _ in range(args.repeats):
            floor.append(_wall(FLOOR, env))
            ours.append(_wall(cmd, env))
        m, f = statistics.median(ours), statistics.median(floor)
        print(f"dtplan {' '.join(argv)}\n    median {m * 1e3:7.1f} ms   floor {f * 1e3:7.1f} ms   "
              f"ratio {m / f:5.2f}x   (min {min(ours) * 1e3:.1f}, max {max(ours) * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
