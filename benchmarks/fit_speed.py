"""Speed of the layout search, in-process (the CLI's start-up is benchmarks/cli_speed.py).

Per scenario, the complete space (planner.search.space: every split, ZeRO 0-3 with and without PP,
hybrid-shard groups, micro-batch, schedule and interleaving depth, SP, recompute with the
partial layer count solved): candidates enumerated, rejected by a structural rule (integer
arrays, counted but not in the throughput figures), evaluated (structurally valid, so priced by
the cost model: each one's fit decided, by its exact peak memory where two sound bounds leave
it open and by the bound where a floor already exceeds the usable memory or a ceiling is
within it; every one that may fit timed, or bounded by a step floor a surely fitting row
beats), valid (fit in memory), partial-recompute layouts solved, rows on the Pareto
front, median wall and CPU seconds of `search` over `--repeats` runs (on a shared machine CPU
time is the steadier), and two rates per CPU second:
- evaluated/CPU s: structurally valid candidates priced per CPU second, the figure issue #15
  must-show 2 asks for (at least 1,000,000 on the 70B/256 space);
- fit/CPU s: the stricter count, candidates that fit in memory (solved partial-recompute
  layouts included) per CPU second. For Llama 3.1 405B, DeepSeek-V3 and Qwen3-235B it also
says whether the published layouts are among the valid candidates. `--profile N` adds, per
scenario, the N functions with the most own time in one more search under cProfile (whose
overhead inflates them; read them as shares). `--digest` prints a digest of each answer, bit for
bit: equal before and after a change to the search, it answers the same. Asserts nothing.

    python benchmarks/fit_speed.py [--repeats 5] [--profile 5] [--digest]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

from planner.api import problem
from planner.search.fast import SearchSpace, search
from planner.specs.hardware_toml import load_profile
from planner.specs.model import model_from_params
from planner.specs.presets import get_preset

H100, H800 = load_profile("h100"), load_profile("h800")
# (name, model, hardware, GPUs, sequence, global batch, precision, the published (TP, PP, CP)
# for the check or None)
SCENARIOS = [
    ("70B (inferred) on 256 H100, 4K, 4M tokens", model_from_params(70e9), H100, 256, 4096, 1024,
     "mixed", None),
    ("Llama-3.1-405B on 16,384 H100, 8K, 16M tokens", get_preset("llama3.1-405b"), H100, 16384,
     8192, 2048, "mixed", (8, 16, 1)),
    ("Llama-3.1-405B on 16,384 H100, 128K, 16M tokens", get_preset("llama3.1-405b"), H100,
     16384, 131072, 128, "mixed", (8, 16, 16)),
    ("Mixtral-8x22B on 1,024 H100, 4K, EP", get_preset("mixtral-8x22b"), H100, 1024, 4096, 1024,
     "mixed", None),
    # DeepSeek-V3 report Sec. 3.2-3.3: 2,048 H800, FP8, 4K sequences, batch 15,360; no TP, PP 16
    ("DeepSeek-V3 on 2,048 H800, 4K, FP8, batch 15,360", get_preset("deepseek-v3"), H800, 2048,
     4096, 15360, "fp8", (1, 16, 1)),
    # Megatron-MoE-ModelZoo's Qwen3-235B-A22B run: 32 H100 nodes, TP 2, PP 8, batch 2,048 of 4K
    ("Qwen3-235B-A22B on 256 H100, 4K, batch 2,048", get_preset("qwen3-235b-a22b"), H100, 256,
     4096, 2048, "mixed", (2, 8, 1)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also list the N functions with the most own time (cProfile)")
    ap.add_argument("--digest", action="store_true",
                    help="also print a digest of each answer (counts, rows shown, their step "
                         "times and peaks, bit for bit): equal digests before and after a "
                         "change to the search show it answers the same")
    args = ap.parse_args()
    print(f"os.cpu_count()={os.cpu_count()}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, {args.repeats} runs, medians")
    head = ("scenario", "enumerated", "structural", "evaluated", "valid", "solved", "front",
            "wall s", "CPU s", "evaluated/CPU s", "fit/CPU s")
    print(f"{head[0]:50} " + " ".join(f"{h:>10}" for h in head[1:-2])
          + f" {head[-2]:>15} {head[-1]:>10}")
    for name, model, hw, gpus, seq, gb, precision, meta in SCENARIOS:
        p = problem(model, hw, gpus, seq_len=seq, global_batch=gb, precision=precision)
        search(p)  # warm-up: first-call imports and caches
        walls, cpus = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            res = search(p)
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        wall, sec = statistics.median(walls), statistics.median(cpus)
        evaluated = res.priced
        structural = res.enumerated - evaluated
        figures = (res.enumerated, structural, evaluated, res.valid, res.solved, len(res.order))
        print(f"{name:50} " + " ".join(f"{x:>10,}" for x in figures)
              + f" {wall:>10.3f} {sec:>10.3f} {evaluated / sec:>15,.0f}"
              + f" {(res.valid + res.solved) / sec:>10,.0f}")
        if args.digest:
            print(f"    digest {_digest(res)}")
        if args.profile:
            _profile(p, args.profile)
        if meta:
            tp, pp, cp = meta
            mine = search(p, SearchSpace(tp=tp, pp=pp, cp=cp), dominated=True)
            print(f"    published TP{tp} PP{pp} CP{cp} DP{gpus // (tp * pp * cp)}: "
                  f"{mine.valid + mine.solved} valid variants"
                  + (f", best {mine.results.time.step[mine.order[0]]:.2f} s/step vs the "
                     f"search's best {res.results.time.step[res.order[0]]:.2f} s"
                     if len(mine.order) else ""))


def _digest(res) -> str:
    """sha256 (first 16 hex digits) of a search's counts, every row it shows (each column),
    their order and first failing rule, and their step times and peaks, bit for bit."""
    h = hashlib.sha256()
    h.update(repr((res.enumerated, res.valid, res.solved, res.rejected.tolist())).encode())
    for name in sorted(vars(res.candidates)):
        h.update(name.encode() + getattr(res.candidates, name).tobytes())
    for a in (res.order, res.first_failure, res.results.time.step, res.results.memory.peak):
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _profile(p, top: int) -> None:
    """The `top` functions by own time in one search, with their share of it."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(search, p)
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values())
    for (path, line, name), v in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = f"{os.path.relpath(path) if path.startswith('/') else path}:{line}"
        print(f"    {v[2] / total:6.1%}  {v[1]:>6} calls  {name} ({where})")


if __name__ == "__main__":
    main()
