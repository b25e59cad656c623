"""Wall time of the evaluation core: one `estimate`, 1,000 `estimate` calls in-process, and one
vectorised `evaluate` over 1,000 candidate layouts. Prints figures; asserts nothing.

    PYTHONPATH=. python benchmarks/estimate_speed.py
"""

from __future__ import annotations

import itertools
import time

from planner.evaluation.candidates import Candidates, Problem
from planner.evaluation.estimate import estimate
from planner.evaluation.evaluate import evaluate
from planner.specs.hardware_toml import load_profile
from planner.specs.layout import Layout
from planner.specs.presets import get_preset


def main() -> None:
    hw = load_profile("a100-80g")
    model = get_preset("megatron-gpt-175b")
    lay = Layout(tp=8, pp=8, schedule="interleaved", chunks=3, sp=True, recompute="selective")
    kw = dict(seq_len=2048, global_batch=64)

    t0 = time.perf_counter()
    estimate(model, hw, 64, lay, **kw)
    first = time.perf_counter() - t0

    t0 = time.perf_counter()
    estimate(model, hw, 64, lay, **kw)
    one = time.perf_counter() - t0

    t0 = time.perf_counter()
    for _ in range(1000):
        estimate(model, hw, 64, lay, **kw)
    thousand = time.perf_counter() - t0

    # 1,000 distinct candidates on 1,024 GPUs (valid or not: evaluate scores them all).
    grid = itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2, 4, 8), (1, 2, 3),
                             ("none", "selective", "full"), (0, 1))
    layouts = []
    for tp, pp, mb, v, rec, zero in grid:
        dp = max(1024 // (tp * pp), 1)
        layouts.append(Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, chunks=v, zero=zero,
                              schedule="interleaved" if v > 1 else "1f1b", recompute=rec))
        if len(layouts) == 1000:
            break
    p = Problem(model=model, hardware=hw, gpus=1024, seq_len=2048, global_batch=2048)
    t0 = time.perf_counter()
    cands = Candidates.from_layouts(layouts)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = evaluate(p, cands)
    vec = time.perf_counter() - t0

    print(f"estimate, first call (imports warm): {first * 1e3:8.2f} ms")
    print(f"estimate, one call:                  {one * 1e3:8.2f} ms")
    print(f"estimate, 1,000 calls:               {thousand:8.3f} s  "
          f"({thousand:.3f} ms per call)")
    print(f"Candidates.from_layouts(1,000):      {build * 1e3:8.2f} ms")
    print(f"evaluate, 1,000 candidates at once:  {vec * 1e3:8.2f} ms  "
          f"({vec / len(layouts) * 1e6:.1f} µs per candidate, {int(r.rules.valid.sum())} valid)")


if __name__ == "__main__":
    main()
