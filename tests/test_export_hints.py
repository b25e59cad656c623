"""Every `dtplan check …` line `dtplan export` prints passes, run as printed: for fit's winner of
five headline questions, each asked under the exporter's own framework (`--framework F --to
TARGET`, Accelerate under PyTorch FSDP2), through the real `dtplan` entry point. The same
winners are loaded in the engines' own parsers in tests/test_engine_parsers_*.py."""

from __future__ import annotations

import shlex

import pytest
from conftest import run_dtplan

from engine_exports import FRAMEWORK, HEADLINES, question


@pytest.mark.parametrize("to", FRAMEWORK)
@pytest.mark.parametrize("name", HEADLINES)
def test_the_check_line_export_prints_passes(tmp_path, name, to):
    out = tmp_path / f"{name}.cfg"
    r = run_dtplan("export", *question(name), "--framework", FRAMEWORK[to], "--to", to,
                   "-o", out, cwd=tmp_path)
    assert r.code == 0, r.err
    assert out.exists()
    hints = [x for x in r.err.splitlines() if "check it with: " in x]
    if to == "accelerate":   # dtplan check reads no Accelerate file, and says no line
        assert not hints
        return
    assert len(hints) == 1, r.err
    argv = shlex.split(hints[0].split("check it with: dtplan ", 1)[1])
    assert argv[:2] == ["check", str(out)]
    c = run_dtplan(*argv, cwd=tmp_path)
    assert c.code == 0, (hints[0], c.out[-1500:], c.err)
