"""Must show 4 of issue 29: output under LC_ALL=C and a Latin-1 or ASCII stream encoding is the
same exit code as under UTF-8, never a UnicodeEncodeError (exit 3): characters the encoding
cannot hold ("—", "≥", "→") are written as their ASCII fallbacks. The Latin-1 locale itself
(LC_ALL=en_US.ISO-8859-1) is built with localedef into a temporary LOCPATH where the machine
can (none is installed on the test machines; skipped where it cannot be built);
PYTHONIOENCODING=latin-1 / ascii stand for it everywhere."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, Run, _command, child_env, run_in_process

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


@functools.cache
def _utf8(args: tuple[str, ...]) -> Run:
    """The UTF-8 reference in-process (byte-identical to a real process: test_cli_in_process),
    run once for both tests that compare a locale with it (they only read it)."""
    return run_in_process(list(args))


def _run(args: tuple[str, ...], **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_command() + list(args), capture_output=True, timeout=120,
                          env={**child_env(), **env}, cwd=ROOT)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_every_output_is_encodable_in_the_stream_encoding(args):
    # the UTF-8 reference in-process; each encoding under test is a real process, as the
    # interpreter sets its streams up
    utf8 = _utf8(args)
    assert utf8.code in (0, 1, 2), utf8.err[-300:]
    for env, encoding in (({"LC_ALL": "C"}, "utf-8"), ({"PYTHONIOENCODING": "latin-1"}, "latin-1"),
                          ({"PYTHONIOENCODING": "ascii"}, "ascii")):
        r = _run(args, **env)
        assert r.returncode == utf8.code, (env, r.stderr[-300:])
        out, err = r.stdout.decode(encoding), r.stderr.decode(encoding)   # encodable: decodes
        assert "UnicodeEncodeError" not in err and "internal error" not in err, (env, err)
        if encoding != "utf-8":
            assert "—" not in out and "≥" not in out
            assert len(out.splitlines()) == len(utf8.out.splitlines()), env


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_the_fallbacks_are_laid_out_within_the_width(encoding):
    # ">=" for "≥" is a cell wider: the tables are laid out in the characters the stream
    # writes, so 80 columns hold (a table laid out with "≥" was 82 wide once written)
    args = ("fit", "--model", "mixtral-8x7b", "--gpus", "64")
    utf8 = run_in_process(list(args), columns="80")   # as a real process (test_cli_in_process)
    r = _run(args, PYTHONIOENCODING=encoding, COLUMNS="80")
    assert r.returncode == utf8.code == 0, r.stderr[-300:]
    assert "≥" in utf8.out and ">=" in r.stdout.decode(encoding)
    assert max(len(x) for x in r.stdout.decode(encoding).splitlines()) <= 80


LATIN1 = "en_US.ISO-8859-1"


@pytest.fixture(scope="module")
def latin1_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a real Latin-1 locale: LC_ALL=en_US.ISO-8859-1 over a LOCPATH that
    localedef builds (glibc's en_US source and ISO-8859-1 charmap), nothing overriding it
    (PYTHONIOENCODING, PYTHONUTF8, other LC_ variables dropped); skipped where it cannot be
    built or Python does not take it up."""
    if shutil.which("localedef") is None:
        pytest.skip("no localedef: the Latin-1 locale cannot be built")
    where = tmp_path_factory.mktemp("locale")
    made = subprocess.run(["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(where / LATIN1)],
                          capture_output=True, timeout=120)
    if not (where / LATIN1).is_dir():
        pytest.skip(f"localedef could not build {LATIN1}: {made.stderr[-200:]!r}")
    env = {k: v for k, v in child_env().items()
           if not k.startswith("LC_") and k not in ("LANG", "LANGUAGE", "PYTHONIOENCODING",
                                                    "PYTHONUTF8")}
    env.update(LOCPATH=str(where), LC_ALL=LATIN1)
    took = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdout.encoding)"],
                          capture_output=True, text=True, env=env, timeout=60)
    if took.stdout.strip().lower() not in ("iso8859-1", "iso-8859-1", "latin-1"):
        pytest.skip(f"Python does not take up {LATIN1}: stdout encoding {took.stdout.strip()!r}")
    return env


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_every_output_is_encodable_under_a_real_latin1_locale(args, latin1_env):
    utf8 = _utf8(args)
    r = subprocess.run(_command() + list(args), capture_output=True, timeout=120,
                       env=latin1_env, cwd=ROOT)
    assert r.returncode == utf8.code, r.stderr[-300:]
    err = r.stderr.decode("latin-1")
    assert "UnicodeEncodeError" not in err and "internal error" not in err, err
    # Latin-1 bytes, not UTF-8 let through: no multi-byte "—", "≥", "→", "·" sequences
    for stream in (r.stdout, r.stderr):
        assert b"\xe2\x80" not in stream and b"\xe2\x89" not in stream and b"\xe2\x86" not in stream
    out = r.stdout.decode("latin-1")
    assert len(out.splitlines()) == len(utf8.out.splitlines())
    if "×" in utf8.out:   # what Latin-1 holds is written in Latin-1 (0xD7)
        assert "×" in out
