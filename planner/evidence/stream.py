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
from typing import Any, Iterator, Protocol

from planner.errors import InputError
from planner.evidence.source import Refused, bounded_int_hook, fail

CHUNK_CHARS = 1 << 20          # text read per refill (and the look-ahead kept before a decode)
MAX_VALUE_CHARS = 64 << 20     # one event, or all top-level values other than traceEvents
# Events in one file: a real trace holds ~200 bytes per event (108,936 events in the 25.8 MB
# HTA 16-rank trace), so the 512 MiB content ceiling is ~2.7 M events; 16 M leaves room for
# small events and still bounds what the caller collects.
MAX_EVENTS = 16_000_000
WHITESPACE = re.compile(r"[ \t\n\r]*")
LONG_DIGITS = re.compile(r"\d{21}")   # a literal the bounded decoder must see (MAX_INT_DIGITS)
# Where an element of traceEvents may end: a closing bracket, whitespace, a comma and the next
# element's opening bracket (`},{`, `}\n,{`, `}, {`, `],[`); with sorted keys `}, "cat"` closes
# an event's args, not the event. A candidate cut only: the batch decode proves it (_batch).
BOUNDARY = re.compile(r"[}\]][ \t\n\r]*,(?=[ \t\n\r]*[{\[])")
TAIL_CHARS = 4096              # the first window searched backwards for the last boundary


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
        # No batch is tried before this buffer offset: a failed try covered the text up to
        # it, so each character is in at most one failed batch (linear, whatever the layout).
        self._retry = 0
        self._header_chars = 0
        self.events_read = 0
        self.found = False   # whether the top-level object has a traceEvents array
        self.header: dict[str, Any] = {}

    # ---- buffer ---------------------------------------------------------------------------
    def _fill(self, ahead: int) -> None:
        """At least `ahead` characters after the position, unless the file ends first; the
        consumed part of the buffer is dropped (counting its lines for error messages)."""
        if self._pos > CHUNK_CHARS:
            drop = self._pos
            self._line += self._buf.count("\n", 0, drop)
            self._buf, self._pos = self._buf[drop:], 0
            self._retry = max(0, self._retry - drop)
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

    def line(self, at: int | None = None) -> int:
        """The 1-based line of the position (or of buffer offset `at`)."""
        return self._line + self._buf.count("\n", 0, self._pos if at is None else at)

    def _error(self, message: str, at: int | None = None) -> InputError:
        return fail(self.path, self.line(at), f"invalid trace JSON ({message})")

    def _needs_more(self, e: json.JSONDecodeError) -> bool:
        """Whether a decode failed because the value runs past the buffer (read further),
        rather than on a syntax error inside it (reported at once: no re-reading)."""
        return not self._eof and (e.pos >= len(self._buf) - 64
                                  or e.msg.startswith("Unterminated string"))

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
                if not self._needs_more(e):
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
                self.found = True
                yield from self._array()
            else:
                start = self._pos
                self.header[key] = self._value()
                self._header_chars += self._pos - start
                if self._header_chars > MAX_VALUE_CHARS:
                    raise fail(self.path, self.line(), "refused: top-level values other than "
                               f"traceEvents over {MAX_VALUE_CHARS >> 20} MiB in all")
            if self._expect(",}", "',' or '}'") == "}":
                break
        if self._skip():
            raise self._error("extra data after the top-level object")

    def _array(self) -> Iterator[Any]:
        if self._skip() == "]":
            self._pos += 1
            return
        while True:
            batch = self._batch()
            self._count(len(batch) + 1)
            yield from batch
            yield self._value()
            if self._expect(",]", "',' or ']' in traceEvents") == "]":
                return

    def _count(self, n: int) -> None:
        self.events_read += n
        if self.events_read > MAX_EVENTS:
            raise fail(self.path, self.line(), f"refused: more than {MAX_EVENTS:,} trace events "
                       "in one file; profile fewer steps or split it (one file per rank)")

    def _last_boundary(self) -> int:
        """Buffer offset of the last BOUNDARY match after the position (-1: none), searched
        backwards in growing windows: the look-ahead is not scanned from its start."""
        window, end = TAIL_CHARS, len(self._buf)
        while True:
            start = max(self._pos, end - window)
            last = None
            for last in BOUNDARY.finditer(self._buf, start):
                pass
            if last is not None:
                return last.start()
            if start == self._pos:
                return -1
            window *= 16

    def _batch(self) -> list[Any]:
        """The buffer's complete events up to its last `},`, decoded by one json.loads (a call
        per event was half the read), or [] to go on one value at a time. The batch is exact:
        a cut inside a string leaves it unterminated and a cut inside a nested value leaves a
        bracket open, so '[' + text + ']' parses only when the text is whole elements."""
        if self._pos < self._retry:
            return []
        self._fill(CHUNK_CHARS)
        cut = self._last_boundary()
        if cut < 0 or 0 <= self._long <= cut:   # a long digit run: the bounded decoder's
            self._retry = len(self._buf)
            return []
        try:
            batch = self._fast.decode("[" + self._buf[self._pos:cut + 1] + "]")
        except (ValueError, RecursionError):
            self._retry = len(self._buf)
            return []
        self._pos = self._buf.index(",", cut) + 1
        return batch
