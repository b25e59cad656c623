"""Must show 4 of issue 29: output under LC_ALL=C and a Latin-1 or ASCII stream encoding (no
en_US.ISO-8859-1 locale on the test machines, so PYTHONIOENCODING=latin-1 / ascii stands for
it) is the same exit code as under UTF-8, never a UnicodeEncodeError (exit 3): characters the
encoding cannot hold ("—", "≥", "→") are written as their ASCII fallbacks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, _command, child_env

PLAN = Path(ROOT) / "examples" / "plans" / "llama3-70b-256xh100.yaml"
COMMANDS = [
    ("estimate", "--model", "llama3-8b", "--gpus", "8"),
    ("estimate", "--model", "llama3-8b", "--gpus", "8", "-f", "markdown"),
    ("fit", "--model", "llama3-8b", "--gpus", "8"),
    ("memory", "--model", "llama3-70b", "--gpus", "64", "--tp", "8"),
    ("check", str(PLAN)),
    ("check", str(PLAN), "-f", "github"),
    ("report", str(PLAN), "-o", "-"),
    ("models",),
    ("calibrate",),
    ("estimate", "--model", "llama3-8b", "--gpus", "7", "--tp", "3"),   # an error line
]


def _run(args: tuple[str, ...], **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_command() + list(args), capture_output=True, timeout=120,
                          env={**child_env(), **env}, cwd=ROOT)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_every_output_is_encodable_in_the_stream_encoding(args):
    utf8 = _run(args)
    assert utf8.returncode in (0, 1, 2), utf8.stderr[-300:]
    for env, encoding in (({"LC_ALL": "C"}, "utf-8"), ({"PYTHONIOENCODING": "latin-1"}, "latin-1"),
                          ({"PYTHONIOENCODING": "ascii"}, "ascii")):
        r = _run(args, **env)
        assert r.returncode == utf8.returncode, (env, r.stderr[-300:])
        out, err = r.stdout.decode(encoding), r.stderr.decode(encoding)   # encodable: decodes
        assert "UnicodeEncodeError" not in err and "internal error" not in err, (env, err)
        if encoding != "utf-8":
            assert "—" not in out and "≥" not in out
            assert len(out.splitlines()) == len(utf8.stdout.decode().splitlines()), env
