"""Every numeric option's range is declared once (cli/options.py, from validate's named bounds)
and enforced as it is parsed (issue 18, audit 3): a value outside it is one line naming the
option, exit 2; a value inside it never reaches a pydantic ValidationError, an overflow or a
numpy warning on stderr. Through the real `dtplan`."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan
from fuzz_support import contract_violation

JOB = ("--model", "llama3-8b", "--gpus", "16")
PLAN = Path(ROOT) / "examples" / "plans" / "llama3-70b-256xh100.yaml"


def _refused(r, flag: str) -> None:
    lines = r.err.strip().splitlines()
    assert r.code == 2, (r.code, r.err[-400:])
    assert len(lines) == 1 and lines[0].startswith(f"dtplan: error: {flag}: "), r.err
    assert "Warning" not in r.err and "internal error" not in r.err


def _clean(r) -> None:
    assert r.code in (0, 1), (r.code, r.err[-400:])
    assert "Warning" not in r.err and "Traceback" not in r.err, r.err[-400:]


# Each was exit 3 (OverflowError, NaN to integer, a multi-line ValidationError) or printed a
# RuntimeWarning from engine/nccl.py or timing.py on main 4381f50.
@pytest.mark.parametrize("argv, flag", [
    (("memory", "--params", "7e9", "--gpus", "8", "--gpu-memory-gib", "1e300"),
     "--gpu-memory-gib"),
    (("report", *JOB, "-o", "-", "--gpu-memory-gib", "1e308"), "--gpu-memory-gib"),
    (("memory", *JOB, "--context-gb", "1e300"), "--context-gb"),
    (("estimate", *JOB, "--comm-buffer-gb", "1e300"), "--comm-buffer-gb"),
    (("memory", *JOB, "--micro-batch", "1e16"), "--micro-batch"),
    (("estimate", *JOB, "--chunks", "1e16"), "--chunks"),
    (("fit", *JOB, "--ep", "1e13"), "--ep"),
    (("memory", *JOB, "--nic-gbit-per-gpu", "5e-324"), "--nic-gbit-per-gpu"),
    (("estimate", *JOB, "--nic-gbit-per-gpu", "1e300"), "--nic-gbit-per-gpu"),
    (("fit", "--params", "7e9", "--gpus", "16", "--nic-gbit-per-gpu", "1e-300"),
     "--nic-gbit-per-gpu"),
    (("checkpoint", "--params", "7e9", "--gpus", "64", "--storage-gbs", "5e-324"),
     "--storage-gbs"),
    (("estimate", *JOB, "--gpu-mtbf-hours", "1e300"), "--gpu-mtbf-hours"),
    (("fit", "--model", "llama3-70b", "--gpus", "256", "--tokens-per-batch", "1e13"),
     "--tokens-per-batch"),
], ids=lambda x: x if isinstance(x, str) else " ".join(x[:1] + x[-2:]))
def test_outside_the_range_is_one_line_naming_the_option(argv, flag):
    _refused(run_dtplan(*argv), flag)


def test_the_range_is_stated_with_its_bounds():
    r = run_dtplan("estimate", *JOB, "--gpu-memory-gib", "0")
    assert "must be between 0.0009765625 and 1048576, got '0'" in r.err, r.err


def test_the_edges_of_the_ranges_are_planned_without_warnings():
    _clean(run_dtplan("estimate", *JOB, "--nic-gbit-per-gpu", "0.001", "--gpu-memory-gib",
                      "1048576", "--context-gb", "1e6", "--comm-buffer-gb", "1e6"))
    _clean(run_dtplan("memory", *JOB, "--nic-gbit-per-gpu", "1e7", "--gpu-memory-gib",
                      "0.0009765625", "--micro-batch", "10000000"))
    # 10^9 sequences over 4 data-parallel ranks: the search no longer offers micro-batches of
    # 2.5e8 its Layout refuses (exit 3 on main)
    _clean(run_dtplan("fit", "--model", "gpt2", "--gpus", "8", "--global-batch", "1000000000"))


def test_a_plan_file_has_the_options_ranges(tmp_path):
    text = PLAN.read_text().replace("hardware: h100\n", "hardware:\n  profile: h100\n"
                                    "  gpu_memory_gb: 1.0e+300\n")
    (tmp_path / "p.yaml").write_text(text)
    r = run_dtplan("check", "p.yaml", cwd=tmp_path)
    assert r.code == 2 and "hardware.gpu_memory_gb: must be <= 1048576" in r.err, r.err
    assert "internal error" not in r.err


def test_the_fuzz_contract_fails_on_a_warning():
    err = "/x/planner/engine/nccl.py:108: RuntimeWarning: overflow encountered in multiply\n"
    why = contract_violation(["memory"], 1, "", err, {"--gpus"})
    assert why and "warning reached stderr" in why
    assert contract_violation(["memory"], 1, "", "", {"--gpus"}) is None
