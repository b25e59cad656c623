"""Work an option multiplies is capped or reused (issue 18): the review runs one search and
a scaling sweep within its budget, a fit sweep has at most MAX_FIT_COUNTS counts, an evidence
run at most MAX_EVIDENCE_FILES files, and comm's link bandwidth and message stay in a range
where the α-β time is finite. Timings are benchmarks/bounds.py's, never asserted here."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan
from planner.specs.records import dump
from test_hostile import _exit2

PLAN = Path(ROOT) / "examples" / "plans" / "llama3-70b-256xh100.yaml"


@pytest.fixture(scope="module")
def plan_inputs():
    from planner.review.build import inputs_from_plan
    return inputs_from_plan(str(PLAN))


def _count_searches(monkeypatch) -> list[int]:
    import planner.search.fit
    import planner.search.fast
    calls: list[int] = []
    real = planner.search.fast.search

    def counted(p, *a, **k):
        calls.append(p.gpus)
        return real(p, *a, **k)
    monkeypatch.setattr(planner.search.fast, "search", counted)
    monkeypatch.setattr(planner.search.fit, "search", counted)
    return calls


def test_review_runs_one_search_for_alternatives_chart_and_rejections(plan_inputs, monkeypatch):
    pytest.importorskip("matplotlib")
    from planner.review.build import build_review
    calls = _count_searches(monkeypatch)
    r = build_review(plan_inputs, source="plan file x", scaling=False)
    assert calls == [plan_inputs.gpus] and "pareto" in r.charts


def test_a_review_of_the_fit_winner_reuses_the_fit_search(monkeypatch):
    pytest.importorskip("matplotlib")
    from planner.review.build import build_review, inputs_from_fit
    from planner.specs.hardware_toml import load_profile
    from planner.specs.model import model_from_params
    calls = _count_searches(monkeypatch)
    inp, res = inputs_from_fit(model_from_params(1e9), load_profile("h100"), 8, seq_len=1024,
                               global_batch=16)
    assert res.search_result is not None and res.search_result.valid == res.valid
    r = build_review(inp, source="fit", fit_result=res, scaling=False)
    assert calls == [8] and "pareto" in r.charts
    assert "search_result" not in dump(res)


def test_scaling_sweep_searches_within_its_budget_and_names_the_rest(plan_inputs, monkeypatch):
    from planner.review.build import build_review
    from planner.review import sections
    from planner.review.render import render_review_markdown
    calls = _count_searches(monkeypatch)
    full = render_review_markdown(build_review(plan_inputs, source="plan file x", charts=False))
    counts = sections.scaling_counts(plan_inputs.gpus, plan_inputs.hardware.scale_up.gpus_per_node)
    assert sorted(calls) == sorted(counts) and "not computed" not in full
    calls.clear()
    monkeypatch.setattr(sections, "SWEEP_MAX_ENUMERATED", 1)   # the plan's own search spends it
    md = render_review_markdown(build_review(plan_inputs, source="plan file x", charts=False))
    assert calls == [plan_inputs.gpus]
    others = [n for n in counts if n != plan_inputs.gpus]
    assert f"not computed at {', '.join(f'{n:,}' for n in others)} GPUs" in md
    assert (f"`dtplan fit --model llama3-70b --hardware h100 --gpus {','.join(map(str, others))} "
            f"--seq-len {plan_inputs.seq_len} --global-batch {plan_inputs.global_batch}`") in md
    assert md.count("not searched") == len(others)
    # the plan's own row is the same search's winner either way
    own = [ln for ln in md.splitlines() if ln.startswith(f"| {plan_inputs.gpus} ")]
    assert own and own == [ln for ln in full.splitlines()
                           if ln.startswith(f"| {plan_inputs.gpus} ")]


def test_fit_sweep_cap_is_one_line_naming_the_option():
    from planner.cli.options import MAX_FIT_COUNTS
    counts = ",".join(str(8 * (i + 1)) for i in range(MAX_FIT_COUNTS + 1))
    _exit2(run_dtplan("fit", "--model", "gpt2", "--gpus", counts), "--gpus: ",
           f"at most {MAX_FIT_COUNTS} GPU counts", f"got {MAX_FIT_COUNTS + 1}")
    _exit2(run_dtplan("fit", "--model", "gpt2", "--gpus", "64..10000000"), "--gpus: ", "got 19")
    assert f"at most {MAX_FIT_COUNTS}" in run_dtplan("fit", "--help").out


def test_evidence_file_count_is_capped(tmp_path, monkeypatch):
    from planner import evidence
    from planner.errors import InputError
    for i in range(5):
        (tmp_path / f"r{i}.log").write_text("x\n")
    monkeypatch.setattr(evidence, "MAX_EVIDENCE_FILES", 4)
    with pytest.raises(InputError, match="at most 4 evidence files") as e:
        evidence.expand([tmp_path], "RUNS")
    assert e.value.field == "RUNS"
    monkeypatch.setattr(evidence, "MAX_EVIDENCE_FILES", 5)
    assert len(evidence.expand([tmp_path])) == 5


@pytest.mark.parametrize("args, needle", [
    (["--bandwidth", "5e-324"], "--bandwidth: must be between 1e-06 and 1e+06 GB/s"),
    (["--bandwidth", "2e6"], "--bandwidth: must be between"),
    (["--bandwidth", "100", "--latency", "1e300"], "--latency: must be between 0 and"),
])
def test_comm_ranges_keep_the_time_finite(args, needle):
    _exit2(run_dtplan("comm", "--gpus", "8", "--message-gb", "1", *args), needle)


def test_comm_at_the_ends_of_its_ranges_prints_no_warning():
    for bw, msg in (("1e-6", "1e6"), ("1e6", "5e-324")):
        r = run_dtplan("comm", "--gpus", "2,10000000", "--message-gb", msg, "--bandwidth", bw)
        assert r.code == 0 and "Warning" not in r.err and "inf" not in r.out, r


def _nccl_text(rows: int) -> str:
    head = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5\n"
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)\n")
    body = "".join(f"{8 << i:>12} {2 << i:>13}     float     sum      -1    28.50    0.50    "
                   f"0.90      0    27.90    0.51    0.92      0\n" for i in range(rows))
    return head + body + "# Avg bus bandwidth    : 0.9\n"


def test_nccl_rows_are_capped_and_the_largest_is_found_by_position(tmp_path, monkeypatch):
    from planner.evidence import read_file
    from planner.evidence import nccl
    from planner.errors import InputError
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(_nccl_text(6) + _nccl_text(0).splitlines()[-1] + "\n")
    t = read_file(path).nccl
    assert len(t.rows) == 6 and t.largest is t.rows[-1] and t.largest.size_bytes == 8 << 5
    monkeypatch.setattr(nccl, "MAX_ROWS", 5)
    with pytest.raises(InputError, match="more than 5 nccl-tests rows") as e:
        read_file(path)
    assert e.value.field.endswith("all_reduce_perf.txt:9")
