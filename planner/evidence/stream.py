"""A profiler trace read event by event, in bounded memory.

A Kineto trace is one JSON object whose ``traceEvents`` array holds millions of small events;
``json.loads`` of a 200 MB trace built ~1.4 GB of Python objects (a 2 GiB trace would need
~14 GB). Here the file is decoded through a sliding text buffer: the top-level object's keys are
read one at a time, every value but ``traceEvents`` kept whole (they are small: device
properties, distributed info), and each element of ``traceEvents`` decoded alone with
``json.JSONDecoder.raw_decode`` and handed to the caller, so memory holds one buffer (about
``CHUNK_CHARS``) plus what the caller keeps. The bounds of ``source.load_json`` hold for every
value (integer literals of at most MAX_INT_DIGITS digits, nesting the parser can recurse into),
and no single value may exceed ``MAX_VALUE_CHARS``.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from planner.errors import InputError
from planner.evidence.source import Refused, bounded_int_hook, fail

CHUNK_CHARS = 1 << 20          # text read per refill (and the look-ahead kept before a decode)
MAX_VALUE_CHARS = 64 << 20     # one event, or one top-level value other than traceEvents
WHITESPACE = re.compile(r"[ \t\n\r]*")
LONG_DIGITS = re.compile(r"\d{21}")   # a literal the bounded decoder must see (MAX_INT_DIGITS)


class ByteSource(Protocol):
    """What the trace reader needs of a binary file: up to n bytes a read, b"" at its end."""

    def read(self, n: int, /) -> bytes: ...


class TraceStream:
    """The top-level object of one trace file, read incrementally from a binary file object.

    ``events()`` yields each ``traceEvents`` element (any JSON value) in file order; afterwards
    ``header`` holds every other top-level key (those after the array too). ``path`` names the
    file in errors (line numbers are counted as the buffer slides)."""

    def __init__(self, fh: ByteSource, path: str | Path):
        self._fh, self.path = fh, path
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Decoded without a hook first (a Python call per integer costs a quarter of the
        # read); a value whose text holds a longer digit run is decoded again with the bound.
        self._fast, self._dec = json.JSONDecoder(), json.JSONDecoder(parse_int=bounded_int_hook())
        self._buf, self._pos, self._eof, self._line = "", 0, False, 1
        self._long = -1    # where the buffer's next 21-digit run starts (-1: none after _pos)
        self.header: dict[str, Any] = {}

    # ---- buffer ---------------------------------------------------------------------------
    def _fill(self, ahead: int) -> None:
        """At least `ahead` characters after the position, unless the file ends first; the
        consumed part of the buffer is dropped (counting its lines for error messages)."""
        if self._pos > CHUNK_CHARS:
            drop = self._pos
            self._line += self._buf.count("\n", 0, drop)
            self._buf, self._pos = self._buf[drop:], 0
            if self._long >= 0:
                self._long -= drop
        while not self._eof and len(self._buf) - self._pos < ahead:
            data = self._fh.read(CHUNK_CHARS)
            self._eof = not data
            old = len(self._buf)
            self._buf += self._utf8.decode(data, final=self._eof)
            if self._long < 0:   # a run may straddle the old end: look 20 characters back
                self._long = self._find_long(max(self._pos, old - 20))

    def _find_long(self, start: int) -> int:
        m = LONG_DIGITS.search(self._buf, start)
        return m.start() if m else -1

    def _skip(self) -> str:
        """The next non-whitespace character (not consumed), or '' at the end of the file."""
        while True:
            m = WHITESPACE.match(self._buf, self._pos)   # `[ \t\n\r]*` matches everywhere
            self._pos = m.end() if m else self._pos
            if self._pos < len(self._buf) or self._eof:
                return self._buf[self._pos] if self._pos < len(self._buf) else ""
            self._fill(1)

    def _expect(self, chars: str, what: str) -> str:
        c = self._skip()
        if not c or c not in chars:
            raise self._error(f"expected {what}, found {c!r}" if c else f"expected {what}, "
                              "found the end of the file")
        self._pos += 1
        return c

    def _error(self, message: str, at: int | None = None) -> InputError:
        line = self._line + self._buf.count("\n", 0, self._pos if at is None else at)
        return fail(self.path, line, f"invalid trace JSON ({message})")

    def _value(self) -> Any:
        """One JSON value at the position, decoded alone (the buffer grown until it holds it)."""
        self._skip()
        ahead = CHUNK_CHARS
        while True:
            self._fill(ahead)
            try:
                try:
                    value, end = self._fast.raw_decode(self._buf, self._pos)
                    if 0 <= self._long < end:   # the value's text holds a long digit run
                        raise ValueError("a long digit run")
                except ValueError as e:   # (JSONDecodeError is one: decoded again below)
                    if isinstance(e, json.JSONDecodeError) and not self._eof:
                        raise
                    value, end = self._dec.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                if self._eof:
                    raise self._error(e.msg, e.pos) from None
                if ahead >= MAX_VALUE_CHARS:
                    raise fail(self.path, self._line, "refused: one JSON value over "
                               f"{MAX_VALUE_CHARS >> 20} MiB") from None
                ahead *= 4      # a value longer than the look-ahead: read further, decode again
                continue
            except Refused as e:
                raise fail(self.path, self._line, f"refused: {e}") from None
            except RecursionError:
                raise fail(self.path, self._line, "refused: nested too deeply to parse") from None
            if end >= len(self._buf) and not self._eof:   # a number may continue past the
                ahead = len(self._buf) - self._pos + CHUNK_CHARS    # buffer: decode it again
                continue
            self._pos = end
            if 0 <= self._long < end:
                self._long = self._find_long(end)
            return value

    # ---- structure ------------------------------------------------------------------------
    def events(self) -> Iterator[Any]:
        """Every element of the top-level ``traceEvents`` array; the other keys go to header."""
        self._expect("{", "a JSON object")
        if self._skip() == "}":
            self._pos += 1
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise self._error("an object key must be a string")
            self._expect(":", "':' after a key")
            if key == "traceEvents" and self._skip() == "[":
                self._pos += 1
                yield from self._array()
            else:
                self.header[key] = self._value()
            if self._expect(",}", "',' or '}'") == "}":
                break
        if self._skip():
            raise self._error("extra data after the top-level object")

    def _array(self) -> Iterator[Any]:
        if self._skip() == "]":
            self._pos += 1
            return
        while True:
            yield from self._batch()
            yield self._value()
            if self._expect(",]", "',' or ']' in traceEvents") == "]":
                return

    def _batch(self) -> list[Any]:
        """The buffer's complete events up to its last `},`, decoded by one json.loads (a call
        per event was half the read), or [] to go on one value at a time. The batch is exact:
        a cut inside a string leaves it unterminated and a cut inside a nested value leaves a
        bracket open, so '[' + text + ']' parses only when the text is whole elements."""
        self._fill(CHUNK_CHARS)
        cut = self._buf.rfind("},", self._pos)
        if cut < 0 or 0 <= self._long <= cut:   # a long digit run: the bounded decoder's
            return []
        try:
            batch = self._fast.decode("[" + self._buf[self._pos:cut + 1] + "]")
        except (ValueError, RecursionError):
            return []
        self._pos = cut + 2
        return batch


def open_trace(path: Path, limit: int, option: str) -> tuple[ByteSource, Callable[[], None]]:
    """(binary stream of the file's content, gunzipped when it starts with the gzip magic, and
    a function closing it); the regular-file checks of every reader, and at most `limit` bytes
    of content (the stream raises past it)."""
    import gzip

    from planner.io.read import open_regular
    raw = open_regular(path, what="measured evidence file", option=option, max_bytes=limit)
    magic = raw.read(2)
    raw.seek(0)
    if magic != b"\x1f\x8b":
        return _Limited(raw, limit, path), raw.close
    unzipped = gzip.GzipFile(fileobj=raw)

    def close() -> None:
        unzipped.close()
        raw.close()
    return _Limited(unzipped, limit, path), close


class _Limited:
    """A read-only stream refusing content past `limit` bytes (a gzip bomb, a growing file)."""

    def __init__(self, fh: ByteSource, limit: int, path: Path) -> None:
        self._fh, self._left, self._limit, self._path = fh, limit, limit, path

    def read(self, n: int) -> bytes:
        try:
            data = self._fh.read(n)
        except (OSError, EOFError) as e:
            raise fail(self._path, 1, f"cannot read ({getattr(e, 'strerror', None) or e})") from None
        self._left -= len(data)
        if self._left < 0:
            raise fail(self._path, 1, f"larger than {self._limit // 2**20} MiB; split it "
                       "(one file per rank)")
        return data
