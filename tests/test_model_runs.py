"""One published run per model family (the run set's `validation` rows, issue #27 Must-show 5):
each is a layout dtplan accepts, of the model type its preset's config names, and its residual
is dtplan's own prediction as `dtplan estimate` and `dtplan calibrate` print it."""

from __future__ import annotations

import json
import re

import pytest

from planner.calibration import lofo
from planner.calibration.model_runs import WHOLE_RUN, model_type_runs
from planner.calibration.runs import evaluate_run, load_runs
from planner.evaluation.rules import RULE_NAMES
from planner.specs.presets_modern import PUBLISHED_CONFIGS

HEX40 = re.compile(r"[0-9a-f]{40}")
TYPES = {name: mtype for name, _, mtype, *_ in PUBLISHED_CONFIGS}
VALIDATION = load_runs().validation


@pytest.fixture(scope="module")
def checks():
    return {c.run: c for c in model_type_runs()}


def test_validation_rows_cite_their_source_and_name_their_model_type():
    assert len({r.id for r in VALIDATION}) == len(VALIDATION) >= 4
    ids = {r.id for r in load_runs().runs} | {r.id for r in load_runs().memory_rows}
    for r in VALIDATION:
        assert r.id not in ids, r.id          # in no refit, no band
        assert "/" in r.source.repo and HEX40.fullmatch(r.source.commit), r.id
        assert r.source.section and (r.source.path or r.source.result_dir), r.id
        assert r.model.preset is not None and r.model_type == TYPES.get(r.model.preset, r.model_type)
        assert r.model_type, r.id
        assert r.family.split("/")[0] in load_runs().sources, r.id


def test_every_validation_layout_passes_the_structural_rules():
    for r in VALIDATION:
        ev = evaluate_run(r)
        failed = [n for n in RULE_NAMES if n != "fits-in-memory" and not ev.rules.passes[n][0]]
        assert not failed, f"{r.id}: {failed}"


def test_a_whole_run_figure_becomes_the_step_of_its_stated_batch():
    rows = [r for r in VALIDATION if r.measured.metric == WHOLE_RUN]
    assert rows
    for r in rows:
        m = r.measured
        assert m.tokens and m.step_time_s
        step = m.value * 3600 / r.gpus * r.global_batch * r.seq_len / m.tokens
        assert m.step_time_s == pytest.approx(step, rel=1e-4), r.id


def test_the_residual_is_the_prediction_against_the_measurement(checks):
    assert set(checks) == {r.id for r in VALIDATION}
    for r in VALIDATION:
        c = checks[r.id]
        assert c.model_type == r.model_type and c.measured_step_s == r.measured.step_time_s
        assert c.error_pct == pytest.approx((c.predicted_step_s / c.measured_step_s - 1) * 100)
        step = float(evaluate_run(r).time.step[0])
        if r.measured.metric == WHOLE_RUN:    # time to train: the step over the goodput
            assert step < c.predicted_step_s < step / 0.8, r.id
        else:
            assert c.predicted_step_s == step, r.id


def test_a_whole_run_prediction_is_what_estimate_prints_for_the_tokens(dtplan, checks):
    r = next(r for r in VALIDATION if r.id == "granite-3.0-8b-768xh100")
    lo = r.layout
    out = dtplan("estimate", "--model", r.model.preset, "--hardware", r.hardware, "--gpus",
                 r.gpus, "--tp", lo.tp, "--pp", lo.pp, "--zero", lo.zero, "--micro-batch",
                 lo.micro_batch, "--seq-len", r.seq_len, "--global-batch", r.global_batch,
                 "--framework", r.framework, "--train-tokens", r.measured.tokens, "-f", "json")
    assert out.code == 0, out.stderr
    gpu_hours = json.loads(out.stdout)["resilience"]["training"]["gpu_hours"]
    steps = r.measured.tokens / (r.global_batch * r.seq_len)
    assert gpu_hours == pytest.approx(checks[r.id].predicted_step_s * steps * r.gpus / 3600,
                                      rel=1e-9)


def test_calibrate_prints_the_model_family_rows(dtplan, checks):
    table = dtplan("calibrate", columns="100")
    assert table.code == 0, table.stderr
    assert "Model families" in table.stdout
    for c in checks.values():
        assert c.run in table.stdout and f"{c.error_pct:+.1f}%" in table.stdout
    data = json.loads(dtplan("calibrate", "--format", "json").stdout)
    got = {m["run"]: m for m in data["model_types"]}
    assert set(got) == set(checks)
    for run, m in got.items():
        assert m["model_type"] == checks[run].model_type and m["layout_text"]


def test_calibrate_framework_keeps_the_validation_rows_run_there(dtplan):
    """--framework filters the model-family rows as it filters the published ones."""
    runs = load_runs()
    for fw in ("megatron", "torchtitan"):
        data = json.loads(dtplan("calibrate", "--framework", fw, "--format", "json").stdout)
        want = {r.id for r in VALIDATION if runs.frameworks[r.framework].profile == fw}
        assert want and {m["run"] for m in data["model_types"]} == want


def test_validation_rows_leave_the_cross_validation_alone():
    """The bands and the refits read the `runs` alone: no validation row is an observation."""
    obs = {o for base, _ in (lofo._curves(p) for p in lofo._profiles()) for o in base}
    assert obs.isdisjoint({r.id for r in VALIDATION})
