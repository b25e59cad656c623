"""A fuzz suite over the evidence readers and the writers (issue 29): mutated copies of the
repository's evidence files and of the real fixtures (made in a temporary directory, never
copied into the repository) are read, and each is an Evidence or one InputError — never
another exception; the writers either write what they were given (mode 0666 & ~umask, no
temporary file left) or refuse with an InputError; the TOML and escaping writers round-trip or
stay inert on any text. Seeded (derandomize) so CI is reproducible; DTPLAN_FUZZ=large runs the
bigger profile, as the CLI fuzz (tests/test_fuzz_cli.py) does."""

from __future__ import annotations

import gzip
import os
import stat
import tempfile
import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evidence_paths import DATA, real_dir
from fuzz_support import LARGE
from planner.errors import InputError
from planner.evidence import read_file
from planner.io.escape import UNSAFE, annotation, html_text, markdown, toml_string, visible
from planner.io.write import write_text

EXAMPLES = 1500 if LARGE else 60
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _sources() -> list[bytes]:
    files = [p for p in sorted(DATA.iterdir()) if p.is_file() and p.suffix != ".yaml"]
    d = real_dir()
    if d is not None:   # the small real fixtures (the large traces are the benchmark's)
        files += [p for p in sorted(d.rglob("*")) if p.is_file() and p.suffix != ".md"
                  and p.stat().st_size < 200_000]
    out = []
    for p in files:
        raw = p.read_bytes()
        out.append(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return out


SOURCES = _sources()
TOKENS = [b"1e308", b"9" * 400, b"-1", b"nan", b"\x1b]0;t\x07", b"\xc2\x9b", b"\xe2\x80\xae",
          b"}\n,", b"[", b"{", b'"', b"\x00", b"\n", b"2o5", b"\xff", b"\r\n", b"|", b"%"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A source file with a few edits: a byte replaced, a hostile token inserted, a cut."""
    data = bytearray(draw(st.sampled_from(SOURCES)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        kind = draw(st.sampled_from(["byte", "token", "cut", "dup"]))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = data[at:at + draw(st.integers(1, 400))]
    raw = bytes(data)
    return gzip.compress(raw, 1) if draw(st.booleans()) else raw


@FUZZ
@given(mutated(), st.sampled_from([".log", ".txt", ".json", ".json.gz", ".pickle"]))
def test_a_mutated_evidence_file_is_read_or_one_input_error(raw, suffix):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"run{suffix}"
        p.write_bytes(raw)
        try:
            read_file(p)
        except InputError as e:
            assert "\n" not in str(e) and "\x1b" not in visible(str(e))


NAMES = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)


@FUZZ
@given(NAMES, st.text(max_size=200), st.booleans(), st.sampled_from([0o022, 0o077, 0o002]))
def test_a_writer_writes_what_it_was_given_or_refuses(name, content, force, umask):
    old = os.umask(umask)
    try:
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / name.replace("/", "_")
            try:
                write_text(p, content, force=force)
            except InputError as e:
                assert "\n" not in str(e)
            else:
                assert p.read_bytes().decode("utf-8") == content
                assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask
            assert not [x for x in os.listdir(d) if x.endswith(".tmp")]
    finally:
        os.umask(old)


@FUZZ
@given(st.text(st.characters(blacklist_categories=["Cs"])))
def test_the_escaping_writers_round_trip_or_stay_inert(text):
    assert tomllib.loads("x = " + toml_string(text))["x"] == text
    for shown in (visible(text), markdown(text), html_text(text), annotation(text)):
        assert not UNSAFE.search(shown)
    assert "\n" not in annotation(text) and "<" not in html_text(text)
    assert visible(visible(text)) == visible(text)
