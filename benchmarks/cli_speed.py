"""End-to-end wall time of the `dtplan` CLI against the floor of its own imports.

The floor is `python -c "import numpy, pydantic, rich, typer"` in the same interpreter: no CLI
built on those four libraries can start faster. Each command runs `--repeats` times (default 10)
alternating with the floor so both see the same machine load; the medians are compared.
Bytecode caching is switched on for these runs (PYTHONDONTWRITEBYTECODE removed from the
child environment), as it is for an installed wheel; the first, cache-filling run of each is
a warm-up and not counted. Prints figures; asserts nothing.

    python benchmarks/cli_speed.py [--repeats 10] [--only fit] [--source DIR] [--baseline DIR]
                                   [--phases]

`--source DIR` times another checkout (``python -m planner`` with DIR first on the path);
`--baseline DIR` times a second checkout interleaved with the first, so a before/after pair
runs under the same load; `--only WORD` keeps the commands containing WORD. The floor is timed
twice: as the libraries start it (OpenBLAS starts a thread per core, which inflates its CPU
time) and with one BLAS thread, as dtplan starts numpy. typer parses every command line; each
command's line also says whether its run loaded pydantic's validators (typer coerces each
option through a pydantic TypeAdapter: the first one built loads pydantic's schema machinery,
which the floor's lazy `import pydantic` does not). `--phases` splits each command's CPU
in-process: numpy's import, the search proper, and the rest of dtplan.
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
# The floor of any typer CLI that parses an option: typer (>= 0.2x) coerces every option through
# a pydantic TypeAdapter, so parsing loads pydantic's fields, types and schema machinery (and
# importlib.metadata) whatever the program itself imports.
TYPER_FLOOR = [sys.executable, "-c", "import numpy, pydantic, rich, typer\n"
               "app = typer.Typer(add_completion=False)\n"
               "@app.command()\ndef main(gpus: int = 8, params: str = ''):\n    pass\n"
               "app(['--gpus', '256', '--params', '70e9'], standalone_mode=False)"]
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


_PROBE = ("import sys, io; from planner.cli import main; sys.argv = ['dtplan'] + {argv!r}; "
          "out, sys.stdout = sys.stdout, io.StringIO()\n"
          "try:\n    main()\nexcept SystemExit:\n    pass\n"
          "sys.stdout = out; print('pydantic.type_adapter' in sys.modules)")


def _loads_validators(argv: list[str], cwd: str, env: dict[str, str]) -> str:
    """Whether one run of argv loaded pydantic's TypeAdapter ("yes"/"no"), in-process in a
    fresh interpreter."""
    p = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)], env=env, cwd=cwd,
                       capture_output=True, text=True, check=False)
    return {"True": "yes", "False": "no"}.get(p.stdout.strip().splitlines()[-1:][0]
                                              if p.stdout.strip() else "", "?")


# In-process CPU of one run, split: numpy's import, the search proper (planner.search.fast.search,
# wrapped where the modules that call it hold it, as each new import passes) and everything
# else dtplan does (its imports, parsing, profiles, the winner's estimate, rendering). One BLAS
# thread, so no pool's spinning is counted.
_CALLERS = ("planner.search.fast", "planner.search.fit", "planner.advice.batch",
            "planner.advice.shrink")
_PHASES = ("import os, sys, io, time, importlib.abc\n"
           "os.environ.setdefault('OPENBLAS_NUM_THREADS', '1'); T = time.process_time\n"
           "t0 = T(); import numpy; t1 = T(); spent = [0.0]; timed = {{}}\n"
           "class Wrap(importlib.abc.MetaPathFinder):\n"
           "    def find_spec(self, name, path, target=None):\n"
           "        s = sys.modules.get('planner.search.fast')\n"
           "        f = getattr(s, 'search', None)\n"
           "        if f is not None and f not in timed and f not in timed.values():\n"
           "            def w(*a, **k):\n"
           "                s = T(); r = f(*a, **k); spent[0] += T() - s; return r\n"
           "            timed[f] = w\n"
           f"        for c in {_CALLERS!r}:\n"
           "            m = sys.modules.get(c)\n"
           "            if getattr(m, 'search', None) in timed:\n"
           "                m.search = timed[m.search]\n"
           "        return None\n"
           "sys.meta_path.insert(0, Wrap())\n"
           "from planner.cli import main; sys.argv = ['dtplan'] + {argv!r}\n"
           "out, sys.stdout = sys.stdout, io.StringIO()\n"
           "try:\n    main()\nexcept SystemExit:\n    pass\n"
           "t2 = T(); sys.stdout = out\n"
           "print(t1 - t0, spent[0], t2 - t1 - spent[0])")


def _phases(argv: list[str], cwd: str, env: dict[str, str], repeats: int) -> str:
    """Medians over fresh interpreters: numpy's import, planner.search.fast.search, and the rest."""
    runs = []
    for _ in range(repeats):
        p = subprocess.run([sys.executable, "-c", _PHASES.format(argv=argv)], env=env, cwd=cwd,
                           capture_output=True, text=True, check=False)
        if p.returncode == 0:
            runs.append([float(x) for x in p.stdout.split()[-3:]])
    if not runs:
        return "in-process phases: the probe failed"
    n, s, rest = (statistics.median(r[i] for r in runs) * 1e3 for i in range(3))
    return (f"in-process CPU: import numpy {n:5.1f} ms, search {s:6.1f} ms, the rest of dtplan "
            f"{rest:5.1f} ms (imports, parsing, profiles, estimate, rendering)")


def _median_ms(runs: list[tuple[float, float]], i: int) -> float:
    return statistics.median(x[i] for x in runs) * 1e3


def _contenders(args: argparse.Namespace, env: dict[str, str]) -> list[tuple[str, list[str], str,
                                                                           dict[str, str]]]:
    """(label, command prefix, cwd, env) of each planner timed: this install (or --source), and
    the --baseline checkout when given."""
    def checkout(path: str) -> tuple[list[str], str, dict[str, str]]:
        cwd = os.path.abspath(path)
        return [sys.executable, "-m", "planner"], cwd, {**env, "PYTHONPATH": cwd}
    out = [("dtplan", *checkout(args.source)) if args.source else ("dtplan", _dtplan(), REPO, env)]
    if args.baseline:
        out.append(("baseline", *checkout(args.baseline)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--only", default="", help="only the commands whose text contains this")
    ap.add_argument("--source", default=None, help="time the planner of this checkout instead")
    ap.add_argument("--baseline", default=None, help="also time this checkout, interleaved")
    ap.add_argument("--phases", action="store_true", help="also split each run's CPU in-process: "
                    "numpy's import, the search, the rest")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # the floor as dtplan starts it: one BLAS thread (dtplan's main sets the same default)
    env1 = {**env, **{k: env.get(k, "1") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}}
    who = _contenders(args, env)
    print(f"interpreter: {sys.executable}; {args.repeats} runs each, medians; os.cpu_count()="
          f"{os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; planner from "
          + ", ".join(f"{label} {cwd}" for label, _, cwd, _ in who))
    for argv in COMMANDS:
        if args.only not in " ".join(argv):
            continue
        for _, base, cwd, e in who:   # warm-up: fills the bytecode cache
            _wall(base + argv, e, cwd)
        _wall(FLOOR, env), _wall(TYPER_FLOOR, env1)
        floor, floor1, typer_floor, ours = [], [], [], {label: [] for label, _, _, _ in who}
        for _ in range(args.repeats):
            floor.append(_wall(FLOOR, env))
            floor1.append(_wall(FLOOR, env1))
            typer_floor.append(_wall(TYPER_FLOOR, env1))
            for label, base, cwd, e in who:
                ours[label].append(_wall(base + argv, e, cwd))
        f, fc, f1c = _median_ms(floor, 0), _median_ms(floor, 1), _median_ms(floor1, 1)
        tc = _median_ms(typer_floor, 1)
        print(f"dtplan {' '.join(argv)}\n    floor wall {f:6.1f} ms, CPU {fc:6.1f} ms (one BLAS "
              f"thread {f1c:6.1f} ms); a typer app parsing two options CPU {tc:6.1f} ms")
        for label, base, cwd, e in who:
            runs = ours[label]
            m, mc = _median_ms(runs, 0), _median_ms(runs, 1)
            src = e.get("PYTHONPATH", REPO) if base[-1] == "planner" else REPO
            print(f"    {label:8s} wall {m:6.1f} ms = {m / f:4.2f}x floor;  CPU {mc:6.1f} ms = "
                  f"{mc / fc:4.2f}x floor, {mc / f1c:4.2f}x one-thread floor, {mc / tc:4.2f}x "
                  f"typer floor; pydantic validators: {_loads_validators(argv, src, e)}")
            if args.phases:
                print(f"    {label:8s} {_phases(argv, src, e, args.repeats)}")
        if args.baseline:
            print(f"    dtplan / baseline CPU: {_median_ms(ours['dtplan'], 1) / _median_ms(ours['baseline'], 1):4.2f}")


if __name__ == "__main__":
    main()
