"""End-to-end wall time of the `dtplan` CLI against the floor of its own imports.

The floor is `python -c "import numpy, pydantic, rich, typer"` in the same interpreter: no CLI
built on those four libraries can start faster. Each command runs `--repeats` times (default 10)
alternating with the floor so both see the same machine load; the medians are compared.
Bytecode caching is switched on for these runs (PYTHONDONTWRITEBYTECODE removed from the
child environment), as it is for an installed wheel; the first, cache-filling run of each is
a warm-up and not counted. Prints figures; asserts nothing.

    python benchmarks/cli_speed.py [--repeats 10] [--only fit] [--source DIR]

`--source DIR` times another checkout (``python -m planner`` with DIR first on the path), so
a before/after pair runs under the same load; `--only WORD` keeps the commands containing WORD.
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

FLOOR = [sys.executable, "-c", "import numpy, pydantic, rich, typer"]
COMMANDS = [
    ["fit", "--params", "70e9", "--gpus", "256"],
    ["fit", "--params", "70e9", "--gpus", "256", "-f", "json"],
    # the same question with the winner's split fixed: a small search, so what remains is the
    # CLI around it (imports, parsing, the winner's estimate, rendering)
    ["fit", "--params", "70e9", "--gpus", "256", "--tp", "2", "--pp", "4", "--cp", "1",
     "--zero", "2", "--micro-batch", "1", "--recompute", "none"],
    ["--help"],
    ["layout", "--gpus", "10000000", "--gpus-per-node", "8", "--tp", "8", "--pp", "4",
     "--show-groups"],
    ["fit", "--params", "70e9", "--gpus", "64..1024"],
    ["fit", "--params", "70e9", "--gpus", "256", "--top", "1000", "--all"],
    ["fit", "--from-plan", "examples/plans/llama3-70b-256xh100.yaml", "--gpus", "240"],
]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dtplan() -> list[str]:
    exe = shutil.which("dtplan", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "planner"]


def _wall(cmd: list[str], env: dict[str, str], cwd: str = REPO) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user + system): on a shared machine the CPU
    time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--only", default="", help="only the commands whose text contains this")
    ap.add_argument("--source", default=None, help="time the planner of this checkout instead")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base, cwd = _dtplan(), REPO
    if args.source:
        base, cwd = [sys.executable, "-m", "planner"], os.path.abspath(args.source)
        env["PYTHONPATH"] = cwd
    print(f"interpreter: {sys.executable}; {args.repeats} runs each, medians; os.cpu_count()="
          f"{os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; planner from {cwd}")
    for argv in COMMANDS:
        if args.only not in " ".join(argv):
            continue
        cmd = base + argv
        _wall(cmd, env, cwd), _wall(FLOOR, env)  # warm-up: fills the bytecode cache
        ours, floor = [], []
        for _ in range(args.repeats):
            floor.append(_wall(FLOOR, env))
            ours.append(_wall(cmd, env, cwd))
        m, f = (statistics.median(x[0] for x in ours), statistics.median(x[0] for x in floor))
        mc, fc = (statistics.median(x[1] for x in ours), statistics.median(x[1] for x in floor))
        print(f"dtplan {' '.join(argv)}\n    wall median {m * 1e3:6.1f} ms, floor {f * 1e3:6.1f} ms: "
              f"{m / f:4.2f}x   CPU median {mc * 1e3:6.1f} ms, floor {fc * 1e3:6.1f} ms: {mc / fc:4.2f}x")


if __name__ == "__main__":
    main()
