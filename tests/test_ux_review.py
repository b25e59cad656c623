"""The design review as a reviewer meets it: summary first, the plan beside its alternatives, and
the HTML's first screen in a real browser (headless Chromium; skipped where none is installed)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT, run_dtplan
from planner.evaluation.error_band import band_for, shown_band
from planner.specs.hardware_toml import load_profile

PLAN = Path(ROOT) / "examples/plans/llama3-70b-256xh100.yaml"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "headless_shell")


def _browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


@cache
def _md() -> str:
    """The example plan's markdown review: one run for the four tests that read it (a str,
    which no test can change)."""
    r = run_dtplan("report", PLAN, "-o", "-", "--train-tokens", "15e12", "--gpu-hour-cost", "2")
    assert r.code == 0, r.err
    return r.out


def test_summary_comes_first_with_every_question():
    md = _md()
    head = md.split("## 1. Inputs and assumptions")[0]
    assert head.index("## Summary") < head.index("**PASS")
    for q in ("decision", "step time", "MFU", "time and cost to train",
              "gap to the best alternative", "risks"):
        assert re.search(rf"^\| {q} \| .+ \|$", head, re.M), q
    # the known gap of the example plan (issue #16: "21% slower than the best alternative")
    gap = re.search(r"the plan is (\d+)% slower than the best alternative, (.+?) at ([\d.]+) s/step",
                    head)
    assert gap and 10 <= int(gap.group(1)) <= 40
    assert "days for 15.00T tokens" in head and "cost " in head
    # no "uncalibrated profile": the band the estimate prints, and which kind it is
    assert "uncalibrated" not in head.lower()
    band = shown_band(load_profile("h100"), "megatron")
    assert re.search(rf"^\| step time \| .+ \(± {band:g}%\) on 256 GPUs \|$", head, re.M)
    assert re.search(rf"^\| MFU \| [\d.]+% ± {band:g}% \((calibrated band of this regime|wide band: "
                     r"no published run of this regime)\) \|$", head, re.M)


def test_plan_is_row_zero_and_its_gap_matches_the_table():
    md = _md()
    sec = md.split("## 2. Chosen layout and alternatives")[1].split("## 3.")[0]
    rows = [ln for ln in sec.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    plan = [c.strip() for c in rows[1].strip("|").split("|")]
    best = [c.strip() for c in rows[2].strip("|").split("|")]
    assert plan[0] == "plan" and best[0] == "1"
    for col in ("ckpt", "goodput"):   # the plan's row is priced like every other row
        assert plan[header.index(col)] and plan[header.index(col)][-1] == best[header.index(col)][-1]
    step = header.index("step s")
    gap = float(best[step]) / float(plan[step]) - 1
    assert best[header.index("vs plan")] == f"{gap:+.1%}"
    summary_gap = re.search(r"the plan is (\d+)% slower", md).group(1)
    assert round(float(plan[step]) / float(best[step]) * 100 - 100) == int(summary_gap)


def test_plan_scaling_agrees_with_the_plan():
    md = _md()
    sec = md.split("## 9. Throughput versus GPU count")[1].split("## 10.")[0]
    row = next(ln for ln in sec.splitlines() if ln.startswith("| 256 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    summary_step = re.search(r"\| step time \| ([\d.]+) s per step", md).group(1)
    assert float(cells[2]) == pytest.approx(float(summary_step), abs=0.006)
    assert cells[4] == "100%"                                # the plan's own point is the ideal


def test_markdown_right_aligns_numbers():
    md = _md()
    sec = md.split("## 9. Throughput versus GPU count")[1]
    sep = next(ln for ln in sec.splitlines() if ln.startswith("|--") or ln.startswith("|---"))
    assert sep.strip("|").split("|")[:5] == ["---", "--:", "--:", "--:", "--:"]


def test_html_has_pareto_and_loglog_scaling(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "review.html"
    r = run_dtplan("report", PLAN, "-o", out)
    assert r.code == 0, r.err
    html = out.read_text()
    assert "Step time against peak memory" in html and "Pareto front" in html
    assert "ideal (linear from the plan)" in html
    assert html.index('id="summary"') < html.index('class="verdict')
    assert '<div class="wide">' in html and "break-after:avoid" in html


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# Positions read by the browser itself: a copy of the review with a script that writes the
# bounding boxes of the decision and gap rows into the DOM, which --dump-dom prints.
PROBE = """<script>
addEventListener('load', () => { const out = {};
  for (const id of ['summary-decision', 'summary-gap']) {
    const r = document.getElementById(id).getBoundingClientRect();
    out[id] = [r.top, r.bottom, r.left, r.right]; }
  out.viewport = [innerWidth, innerHeight];
  const p = document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify(out);
  document.body.appendChild(p); });
</script></body>"""


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed "
                    "(Debian: apt-get install chromium)")
def test_first_screen_in_chromium_holds_decision_and_gap(tmp_path):
    pytest.importorskip("matplotlib")
    browser = _browser()
    html = tmp_path / "review.html"
    assert run_dtplan("report", PLAN, "-o", html).code == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1280,800", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "first-screen.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", html.as_uri()], capture_output=True,
                   timeout=120)
    assert shot.is_file() and _png_size(shot) == (1280, 800)
    probe = tmp_path / "probe.html"
    probe.write_text(html.read_text().replace("</body>", PROBE))
    dom = subprocess.run([browser, *flags, "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    boxes = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom).group(1))
    assert boxes["viewport"][0] == 1280
    for key in ("summary-decision", "summary-gap"):
        top, bottom, left, right = boxes[key]
        assert 0 <= top < bottom <= 800 and right <= 1280, (key, boxes)


def test_a_calibrated_regime_prints_its_own_band_and_no_wide_band_risk(tmp_path):
    # the same plan on a100-80g: megatron has runs there (its band from `dtplan calibrate`)
    band = band_for(load_profile("a100-80g"), "megatron")
    assert band is not None and band < load_profile("a100-80g").efficiency.uncalibrated_band
    plan = tmp_path / "a100.yaml"
    plan.write_text(PLAN.read_text().replace("hardware: h100", "hardware: a100-80g"))
    r = run_dtplan("report", plan, "-o", "-")
    assert r.code in (0, 1), r.err
    head = r.out.split("## 1. Inputs and assumptions")[0]
    assert re.search(rf"^\| MFU \| [\d.]+% ± {band:g}% \(calibrated band of this regime\) \|$",
                     head, re.M)
    assert f"(± {band:g}%) on 256 GPUs" in head
    assert "wide band" not in head and "uncalibrated" not in head.lower()


def test_a_regime_without_runs_lists_the_wide_band_and_its_reason_among_the_risks(tmp_path):
    hw = load_profile("rtx4090")
    assert band_for(hw, "megatron") is None
    plan = tmp_path / "r.yaml"
    plan.write_text(PLAN.read_text().replace("hardware: h100", "hardware: rtx4090"))
    r = run_dtplan("report", plan, "-o", "-")
    head = r.out.split("## 1. Inputs and assumptions")[0]
    wide = hw.efficiency.uncalibrated_band
    assert f"± {wide:g}% (wide band: no published run of this regime)" in head
    assert f"wide band ± {wide:g}% on step time, tokens/s and MFU" in head
    assert "measure the first steps" in head and "uncalibrated" not in head.lower()
