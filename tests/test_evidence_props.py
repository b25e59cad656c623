"""Invariants of the evidence readers, for generated inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.evidence.nccl import read_nccl
from planner.evidence.stats import spread, steady
from planner.evidence.trace import _step_breakdown

ROW = st.tuples(st.integers(0, 2**34), st.floats(0.5, 1e6), st.floats(0, 1e3), st.floats(0, 1e3))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=12), redop=st.booleans(), tags=st.booleans())
def test_nccl_rows_round_trip(tmp_path_factory, rows, redop, tags):
    """Rows printed as nccl-tests prints them (with or without redop/root, with launcher tags
    inside the row) read back to the same numbers."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5"]
    for size, t, alg, bus in rows:
        mid = "     sum      -1" if redop else ""
        tag = "[0]" if tags else ""
        lines.append(f"{tag} {size:>12} {size // 4:>12}     float{mid}{tag} {t:8.2f} {alg:7.2f} "
                     f"{bus:7.2f}      0{tag} {t:8.2f} {alg:7.2f} {bus:7.2f}    N/A")
    p = tmp_path_factory.mktemp("n") / "all_reduce_perf.txt"
    p.write_text("\n".join(lines) + "\n")
    t = read_nccl(p, p.read_bytes()).nccl
    assert [r.size_bytes for r in t.rows] == [r[0] for r in rows]
    for got, (_, tm, alg, bus) in zip(t.rows, rows):
        assert got.time_us == float(f"{tm:.2f}") and got.busbw_gbps == float(f"{bus:.2f}")
        assert got.inplace_busbw_gbps == float(f"{bus:.2f}")


@given(st.lists(st.floats(0.01, 1e4), min_size=1, max_size=50))
def test_spread_bounds(values):
    s = spread(values)
    assert s.min <= s.median <= s.max and s.n == len(values) and s.spread_pct >= 0


@given(st.integers(1, 20), st.integers(1, 30), st.integers(0, 5))
def test_warmup_drops_only_entries_covering_early_steps(interval, n, warmup):
    pts = [(interval * (i + 1), float(i)) for i in range(n)]
    kept, dropped = steady(pts, warmup)
    assert len(kept) + dropped == n
    if n > 1 and dropped:
        assert all(interval * (i + 1) - interval + 1 <= warmup for i in range(dropped))


KINDS = ["gemm", "attention", "other_compute", "comm:all_reduce", "comm:all_gather", "memcpy"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 300), st.sampled_from(KINDS)),
                min_size=1, max_size=40), st.floats(0, 500), st.floats(1, 1000))
def test_breakdown_partitions_the_window(ivs, t0, width):
    """Exclusive categories + idle add up to the window; overlapped + exposed <= busy; the
    window's events found by bisection (sorted starts, the longest event) give what a scan of
    every event gives."""
    ivs = sorted(ivs)
    iv = np.array([(a, a + d) for a, d, _ in ivs])
    codes = np.array([KINDS.index(k) for _, _, k in ivs])
    longest = float((iv[:, 1] - iv[:, 0]).max())
    ex, ov, busy = _step_breakdown(iv, codes, KINDS, KINDS, t0, t0 + width, longest)
    assert (ex, ov, busy) == _step_breakdown(iv, codes, KINDS, KINDS, t0, t0 + width, np.inf)
    assert abs(sum(ex.values()) - width) <= 1e-6 * max(1.0, width)
    for k in ov:
        assert ov[k] + ex[k] <= busy[k] + 1e-6
    assert all(v >= -1e-9 for v in ex.values())
