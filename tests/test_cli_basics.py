"""The issue-2 calculators through the installed `dtplan` entry point."""

from __future__ import annotations

import pytest


def test_memory_seed(dtplan):
    r = dtplan("memory", "--params", "7e9", "--gpus", "8")
    assert r.code == 0
    for figure in ("112.00", "38.50", "26.25", "14.00", "does not fit", "fits"):
        assert figure in r.out
    j = dtplan("memory", "--params", "7e9", "--gpus", "8", "--format", "json").json()
    assert [round(x["total_bytes"] / 1e9, 2) for x in j["rows"]] == [112.0, 38.5, 26.25, 14.0]
    assert [x["fits"] for x in j["rows"]] == [False, True, True, True]
    assert j["schema_version"] == 1 and j["command"] == "memory"


def test_memory_zero_paper(dtplan):
    j = dtplan("memory", "--params", "7.5e9", "--gpus", "64", "-f", "json").json()
    assert [round(x["total_bytes"] / 1e9, 1) for x in j["rows"]] == [120.0, 31.4, 16.6, 1.9]


def test_memory_verdict_exit_code(dtplan):
    assert dtplan("memory", "--params", "7e9", "--gpus", "8", "--zero", "0").code == 1
    assert dtplan("memory", "--params", "7e9", "--gpus", "8", "--zero", "3").code == 0


def test_memory_markdown(dtplan):
    r = dtplan("memory", "--params", "7e9", "--gpus", "8", "--format", "markdown")
    assert r.code == 0 and "| 3 (+ parameters, FSDP) | 1.75 | 1.75 | 10.50 | 14.00 | fits |" in r.out


def test_comm_seed(dtplan):
    r = dtplan("comm", "--message-gb", "14", "--gpus", "8", "--bandwidth", "200")
    assert "24.50" in r.out and "122.5" in r.out and "12.25" in r.out and "61.2" in r.out
    j = dtplan("comm", "--message-gb", "14", "--gpus", "8,64,512", "--bandwidth", "200",
               "-f", "json").json()
    ar = [x for x in j["rows"] if x["collective"] == "all-reduce"]
    assert [round(x["bytes_per_gpu"] / 1e9, 2) for x in ar] == [24.50, 27.56, 27.95]
    assert [round(x["time_s"] * 1e3, 1) for x in ar] == [122.5, 137.8, 139.7]
    lat = dtplan("comm", "--message-gb", "14", "--gpus", "8", "--bandwidth", "200",
                 "--latency", "10", "-f", "json").json()
    assert lat["rows"][0]["time_s"] == pytest.approx(0.1225 + 14 * 10e-6)


def test_bubble_seed(dtplan):
    r = dtplan("bubble", "--stages", "4", "--micro-batches", "8")
    assert "27.3%" in r.out and "72.7%" in r.out
    j = dtplan("bubble", "--stages", "4", "--micro-batches", "1,4,16,64", "-f", "json").json()
    assert [round(x["bubble_fraction"] * 100, 1) for x in j["rows"]] == [75.0, 42.9, 15.8, 4.5]
    k = dtplan("bubble", "--stages", "4", "--micro-batches", "8", "--schedule", "interleaved",
               "--chunks", "2", "-f", "json").json()
    assert k["rows"][0]["bubble_fraction"] == pytest.approx(3 / 19)


def test_batch_seed(dtplan):
    r = dtplan("batch", "--micro-batch", "4", "--accum", "8", "--dp", "8")
    assert r.code == 0 and "256" in r.out
    r = dtplan("batch", "--micro-batch", "4", "--accum", "8", "--dp", "8", "--tp", "4", "--pp", "2")
    assert "= 256" in r.out and "do not multiply" in r.out
    j = dtplan("batch", "--global-batch", "256", "--micro-batch", "4", "--dp", "8", "-f", "json").json()
    assert j["accumulation"] == 8
    bad = dtplan("batch", "--global-batch", "250", "--micro-batch", "4", "--dp", "8")
    assert bad.code == 2 and "--global-batch" in bad.err and "32" in bad.err
    assert bad.err.count("\n") == 1 and "Traceback" not in bad.err


def test_checkpoint_seed(dtplan):
    j = dtplan("checkpoint", "--cost-min", "3", "--mtbf-hours", "50", "-f", "json").json()
    assert [round(x["waste_fraction"] * 100, 3) for x in j["rows"]] == [20.25, 6.0, 5.25, 8.625]
    assert round(j["optimum"]["young_interval_s"] / 60) == 134
    assert round(j["optimum"]["daly_interval_s"] / 60, 1) == 132.2
    r = dtplan("checkpoint", "--cost-min", "3", "--mtbf-hours", "50")
    assert "20.25%" in r.out and "134.2" in r.out


def test_scaling_seed(dtplan):
    r = dtplan("scaling", "--baseline-ms", "800", "--measured-ms", "140", "--gpus", "8")
    assert "100.0" in r.out and "5.71×" in r.out and "71.4%" in r.out


def test_layout_seed(dtplan):
    j = dtplan("layout", "--gpus", "256", "--gpus-per-node", "8", "--tp", "8", "--pp", "4",
               "-f", "json").json()
    assert j["ok"] and j["layout"]["dp"] == 8 and j["replica_gpus"] == 32
    tp = next(g for g in j["groups"] if g["axis"] == "tp")
    assert tp["link"] == "nvlink" and tp["example"] == list(range(8))
    bad = dtplan("layout", "--gpus", "256", "--gpus-per-node", "8", "--tp", "16", "--pp", "4")
    assert bad.code == 1 and "tp-in-nvlink-domain" in bad.out
    ok64 = dtplan("layout", "--gpus", "64", "--tp", "4", "--pp", "2", "-f", "json").json()
    assert ok64["ok"] and ok64["layout"]["dp"] == 8


def test_layout_groups(dtplan):
    r = dtplan("layout", "--gpus", "64", "--tp", "4", "--pp", "2", "--show-groups", "-f", "json")
    m = r.json()["members"]
    assert m["tp"][0] == [0, 1, 2, 3] and m["dp"][0] == [0, 4, 8, 12, 16, 20, 24, 28]
    assert m["pp"][0] == [0, 32]


@pytest.mark.parametrize("args,option", [
    (("memory", "--params", "7e9", "--gpus", "0"), "--gpus"),
    (("memory", "--params", "-1", "--gpus", "8"), "--params"),
    (("memory", "--params", "nan", "--gpus", "8"), "--params"),
    (("memory", "--params", "inf", "--gpus", "8"), "--params"),
    (("memory", "--params", "1e30", "--gpus", "8"), "--params"),
    (("memory", "--params", "abc", "--gpus", "8"), "--params"),
    (("comm", "--message-gb", "14", "--bandwidth", "0"), "--bandwidth"),
    (("comm", "--message-gb", "14", "--bandwidth", "nan"), "--bandwidth"),
    (("comm", "--message-gb", "14", "--bandwidth", "200", "--gpus", "0"), "--gpus"),
    (("bubble", "--stages", "0", "--micro-batches", "8"), "--stages"),
    (("bubble", "--stages", "4", "--micro-batches", "x"), "--micro-batches"),
    (("bubble", "--stages", "4", "--micro-batches", "8", "--schedule", "zigzag"), "--schedule"),
    (("checkpoint", "--cost-min", "0", "--mtbf-hours", "50"), "--cost-min"),
    (("scaling", "--baseline-ms", "800", "--measured-ms", "-5", "--gpus", "8"), "--measured-ms"),
    (("layout", "--gpus", "100", "--tp", "8"), "--gpus"),
    (("batch", "--micro-batch", "4", "--dp", "8"), "--accum"),
    # a name longer than the file system allows is an unknown name, not an OSError
    (("memory", "--params", "7e9", "--hardware", "a" * 300), "--hardware"),
    (("memory", "--params", "7e9", "--framework", "a" * 300), "--framework"),
])
def test_bad_input_is_one_line_exit_2(dtplan, args, option):
    r = dtplan(*args)
    assert r.code == 2, r
    assert option in r.err and r.err.startswith("dtplan: error:")
    assert r.err.strip().count("\n") == 0 and "Traceback" not in r.err


def test_help_and_usage(dtplan):
    r = dtplan("--help")
    assert r.code == 0 and "Exit codes" in r.out
    assert dtplan("no-such-command").code == 2
    assert dtplan("memory").code == 2  # missing --params


def test_comm_on_a_profile_topology(dtplan):
    # OCI 2 × 8 H100 all-reduce of 16 GiB measured 69,338 µs (calibration_cases.json).
    j = dtplan("comm", "--message-gb", str(2**34 / 1e9), "--gpus", "8,16", "--hardware", "h100",
               "-f", "json").json()
    ar = {x["gpus"]: x for x in j["rows"] if x["collective"] == "all-reduce"}
    assert ar[8]["link"] == "nvlink" and ar[16]["link"] == "network"
    assert ar[16]["time_s"] == pytest.approx(0.069338, rel=0.15)
    r = dtplan("comm", "--message-gb", "14", "--gpus", "8")
    assert r.code == 2 and "--bandwidth" in r.err
