"""Reading measured artifacts safely: bounded size, gzip or plain, ANSI colour and launcher
prefixes removed, and every complaint naming the file and line.

Evidence files come from other machines (log collectors, `kubectl logs`, `srun -l`, mpirun
`--tag-output`), so the readers see the same text decorated in several ways; the helpers here
remove the decoration once so each format's parser sees the tool's own output.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import zlib
from contextlib import closing
from operator import itemgetter
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable, Generator, Iterator

from planner.errors import InputError
from planner.io.read import open_regular
from planner.io.read import read_bytes as read_regular

# Bounds: a text log or nccl-tests table of a long job is a few MB; a Kineto trace of a few
# steps of one rank is tens to hundreds of MB raw (the streamed reader takes ~10 s per 100 MB
# on one core). Larger inputs are refused, not truncated.
MAX_TEXT_BYTES = 256 * 1024 * 1024
MAX_JSON_BYTES = 512 * 1024 * 1024
# Gunzipped content per compressed byte: real profiler traces expand 13-19x (the sample traces
# of PyTorch's Holistic Trace Analysis), text logs ~10x; a stream of one repeated byte ~1000x. Past
# GZIP_PROBE_BYTES of content a higher ratio is refused as a bomb, before the byte ceiling.
MAX_GZIP_RATIO = 200
GZIP_PROBE_BYTES = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"
# A number in a log: steps, ranks, times, throughputs, memory in MB or bytes. The largest
# real one is a byte count (~1e11 for an 80 GB device); 1e15 leaves room and keeps every
# product (x 2^30 for GiB) finite. A token longer than 40 characters is no printed number.
MAX_LOG_NUMBER = 1e15
MAX_TOKEN_CHARS = 40
LINE_BLOCK_BYTES = 1 << 20  # iter_lines decodes this much at a time: bounded, few calls
PROBE_BLOCK_BYTES = 1 << 16  # kind detection's few hundred lines are well within this
READ_BYTES = 1 << 16  # a streamed text file is read this much at a time into its block

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# Launcher tags: `[0]` / `[1,0]<stdout>:` (mpirun --tag-output), `0: ` (srun -l),
# Anywhere in the line for tables: mpirun interleaves them with the output.
MPI_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<std(?:out|err)>)?:?")
SRUN_TAG = re.compile(r"^\s{0,3}\d{1,5}: ")
# At the start of a line also torchrun's `[default7]:` and `[rank3]:` tags.
MPI_TAG_LEAD = re.compile(r"^\s*(?:\[(?:\d+(?:,\d+)?|default\d+|rank\d+)\](?:<std(?:out|err)>)?:?\s?)+")
# A leading timestamp added by a log collector (`2024-05-01T12:00:00.123Z `,
# `[2024-05-01 12:00:00,123] `); the frameworks' own mid-line timestamps stay.
COLLECTOR_TS = re.compile(r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
                          r"(?:Z|[+-]\d\d:?\d\d)?\]?\s")


def where(path: str | Path, line: int) -> str:
    """The `file:line` an error names (line 1 when the whole file is at fault)."""
    return f"{path}:{max(1, int(line))}"


def fail(path: str | Path, line: int, message: str) -> InputError:
    """An InputError naming file and line; the CLI prints it on one line and exits 2."""
    return InputError(where(path, line), message)


def _too_large(path: str | Path, limit: int) -> InputError:
    return fail(path, 1, f"larger than {limit // 2**20} MiB; split it (one file per rank)")


def open_content(path: str | Path, limit: int,
                 option: str = "--from") -> tuple["Bounded", Callable[[], None]]:
    """(binary stream of the file's content, a function closing it): the regular-file checks
    of every reader (planner.io.read), gunzipped when it starts with the gzip magic, and at
    most `limit` bytes of content. A gzip file is refused up front when its trailer's ISIZE
    (RFC 1952: the last member's size mod 2^32, so a lower bound of the content) is over the
    limit, and while decompressing when it expands more than MAX_GZIP_RATIO times."""
    raw = open_regular(path, what="measured evidence file", option=option, max_bytes=limit)
    try:
        gz = raw.read(2) == GZIP_MAGIC
        size = os.fstat(raw.fileno()).st_size
        if gz and size >= 20:
            raw.seek(size - 4)
            if struct.unpack("<I", raw.read(4))[0] > limit:
                raise _too_large(path, limit)
        raw.seek(0)
    except BaseException:
        raw.close()
        raise
    fh: gzip.GzipFile | BinaryIO = gzip.GzipFile(fileobj=raw) if gz else raw

    def close() -> None:
        fh.close()
        raw.close()
    return Bounded(fh, limit, path, raw if gz else None), close


class Bounded:
    """A read-only stream refusing content past `limit` bytes (a growing file, a gzip bomb)
    and, for gzip, content expanding more than MAX_GZIP_RATIO times its compressed bytes."""

    def __init__(self, fh: gzip.GzipFile | IO[bytes], limit: int, path: str | Path,
                 compressed: IO[bytes] | None = None) -> None:
        self._fh, self._left, self._limit, self._path = fh, limit, limit, path
        self._compressed, self._out = compressed, 0
        self.gzipped = compressed is not None

    def read(self, n: int) -> bytes:
        try:
            data = self._fh.read(n)
        except (OSError, EOFError, zlib.error) as e:
            raise fail(self._path, 1, f"cannot read ({getattr(e, 'strerror', None) or e})") from None
        self._left -= len(data)
        self._out += len(data)
        if self._left < 0:
            raise _too_large(self._path, self._limit)
        if self._compressed is not None and self._out > GZIP_PROBE_BYTES \
                and self._out > MAX_GZIP_RATIO * max(1, self._compressed.tell()):
            raise fail(self._path, 1, f"refused: gzip content expands over {MAX_GZIP_RATIO}x "
                       "(a real trace or log expands 10-20x): a decompression bomb")
        return data


def read_bytes(path: str | Path, limit: int = MAX_TEXT_BYTES, option: str = "--from") -> bytes:
    """The file's content (gunzipped when gzip), at most `limit` bytes (see open_content);
    ``-`` is standard input, read with the same bounds."""
    if str(path) == "-":
        data = read_regular(path, what="measured evidence file", option=option,
                            max_bytes=limit)[1]
        if data[:2] != GZIP_MAGIC:
            return data
        try:
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit + 1)
        except zlib.error as e:
            raise fail(path, 1, f"cannot read ({e})") from None
        if len(out) > limit:
            raise _too_large(path, limit)
        return out
    fh, close = open_content(path, limit, option)
    try:
        chunks, total = [], 0
        while chunk := fh.read(1 << 20):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        close()


def load_json(path: str | Path, raw: bytes | str, what: str = "JSON") -> Any:
    """json.loads with the bounds every reader keeps (planner.io.parse): an integer literal
    over MAX_INT_DIGITS digits and nesting the C parser cannot recurse into are one InputError
    at file:line (a 5,000-digit `ts` was a ValueError, 5,000 nested objects a RecursionError).
    No node count or character pre-scan: a real trace has millions of values."""
    try:
        return json.loads(raw, parse_int=bounded_int_hook())
    except json.JSONDecodeError as e:
        raise fail(path, e.lineno, f"invalid {what} ({e.msg})") from None
    except Refused as e:
        raise fail(path, 1, f"refused: {e}") from None
    except RecursionError:
        raise fail(path, 1, "refused: nested too deeply to parse") from None


class Refused(Exception):
    """A JSON literal over a bound, raised from inside the parser's hook."""


def bounded_int_hook() -> Callable[[str], int]:
    """The parse_int hook of every evidence JSON reader (load_json, the trace stream): an
    integer literal over MAX_INT_DIGITS digits raises Refused with the reason
    (planner.io.parse), any other is int()."""
    from planner.io.bounds import MAX_INT_DIGITS, int_bound_reason

    def bounded(literal: str) -> int:
        if len(literal) > MAX_INT_DIGITS and (reason := int_bound_reason(literal)):
            raise Refused(reason)
        return int(literal)
    return bounded


def clean_line(line: str, tags_anywhere: bool = False) -> str:
    """One line without colour codes, launcher tags, a collector timestamp or a CR.
    `tags_anywhere` also removes `[0]` tags inside the line (mpirun splits table rows). Each
    pattern runs only where what it cannot match without is there (ESC, CR, a bracket, a
    leading digit or space, a bracketed digit): the same text, a fraction of the calls."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if "\r" in line:
        line = line.replace("\r", "")
    if line[:1].isdigit() or line[:1] == "[" and line[1:2].isdigit():
        line = COLLECTOR_TS.sub("", line)
    if "[" in line:
        line = MPI_TAG.sub(" ", line) if tags_anywhere else MPI_TAG_LEAD.sub("", line)
    head = line[:1]
    return SRUN_TAG.sub("", line) if head.isspace() or head.isdigit() else line


def text_lines(path: str | Path, data: bytes | None = None, tags_anywhere: bool = False,
               limit: int | None = None) -> list[tuple[int, str]]:
    """(line number, cleaned text) for every line of a text file (the first `limit` lines: what
    kind detection looks at; `data` None: streamed from the file, only those lines read)."""
    if limit is None:
        return list(iter_lines(path, data, tags_anywhere))
    # kind detection reads a few hundred lines: small blocks, not a whole one cleaned for them
    with closing(iter_lines(path, data, tags_anywhere, block_bytes=PROBE_BLOCK_BYTES)) as lines:
        return [x for _, x in zip(range(limit), lines)]


def iter_lines(path: str | Path, data: bytes | None = None, tags_anywhere: bool = False,
               block_bytes: int | None = None, skip_empty: bool = False
               ) -> Generator[tuple[int, str], None, None]:
    """(line number, cleaned text), one line at a time (from line_blocks): a log of a million
    steps is never held as one list. `skip_empty`: lines empty once cleaned are left out (a
    gap in the numbers says where), in C, not a Python step each (10^8 newlines read in
    seconds, not minutes)."""
    for first, lines in line_blocks(path, data, tags_anywhere, block_bytes):
        if skip_empty:
            if any(lines):
                yield from filter(itemgetter(1), enumerate(lines, first))
        else:
            yield from enumerate(lines, first)


def line_blocks(path: str | Path, data: bytes | None = None, tags_anywhere: bool = False,
                block_bytes: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """LineBlocks(...) as an iterator (the callers that need not know how the content ends)."""
    return iter(LineBlocks(path, data, tags_anywhere, block_bytes))


class LineBlocks:
    """(first line number, cleaned lines) of about LINE_BLOCK_BYTES (or `block_bytes`) of
    whole lines at a time: block k ends at the first '\n' at or past `block_bytes` into it
    (the last block: the rest), each decoded once and split on '\n' (a '\n' byte is never
    inside a UTF-8 sequence, so decoding per block equals decoding per line). With `data`
    None the file is streamed (open_content, at most MAX_TEXT_BYTES of content): a block and
    one read kept, whatever the file's size. After iteration `newline_end` says whether the
    content ended with '\n' (a job killed mid-write leaves a last line without one)."""

    def __init__(self, path: str | Path, data: bytes | None = None, tags_anywhere: bool = False,
                 block_bytes: int | None = None) -> None:
        self.path, self.data, self.tags = path, data, tags_anywhere
        self.size = block_bytes or LINE_BLOCK_BYTES
        self.newline_end = False

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        i = 1
        for block in self._raw():
            lines = [clean_line(x, self.tags) if x else x   # an empty line stays empty
                     for x in block.decode("utf-8", errors="replace").split("\n")]
            yield i, lines
            i += len(lines)

    def _raw(self) -> Iterator[bytes | bytearray]:
        if self.data is None:
            yield from self._streamed()
            return
        raw = self.data
        self._no_nul(raw[:4096])
        self.newline_end = raw.endswith(b"\n")
        start = 0
        while True:
            end = raw.find(b"\n", start + self.size)
            yield raw[start:] if end < 0 else raw[start:end]
            if end < 0:
                return
            start = end + 1

    def _streamed(self) -> Iterator[bytearray]:
        """_raw's blocks read from the file: each '\n' searched for once (`scan`: where the
        bytes not yet searched start), the buffer a block and one read."""
        fh, close = open_content(self.path, MAX_TEXT_BYTES)
        try:
            buf, scan, eof = bytearray(), self.size, False
            # gzip: its first GZIP_PROBE_BYTES read before any line is parsed, so a bomb is
            # refused (Bounded's ratio) unparsed; plain text: what the NUL check reads
            while not eof and len(buf) <= (GZIP_PROBE_BYTES if fh.gzipped else 4096):
                eof = not self._fill(fh, buf)
            self._no_nul(buf[:4096])
            while True:
                end = buf.find(b"\n", scan)
                if end < 0 and not eof:
                    scan = max(self.size, len(buf))
                    eof = not self._fill(fh, buf)
                    continue
                if end < 0:
                    yield buf
                    return
                yield buf[:end]
                del buf[:end + 1]
                scan = self.size
        finally:
            close()

    def _fill(self, fh: "Bounded", buf: bytearray) -> bool:
        """One read appended to buf (False at the end of the content)."""
        chunk = fh.read(READ_BYTES)
        if chunk:
            buf += chunk
            self.newline_end = chunk.endswith(b"\n")
        return bool(chunk)

    def _no_nul(self, head: bytes | bytearray) -> None:
        if b"\x00" in head:
            raise fail(self.path, 1, "binary data where text was expected")


def _shown_token(token: str) -> str:
    return repr(token) if len(token) <= 40 else f"{token[:20]!r}… ({len(token)} characters)"


def number(token: str, path: str | Path, line: int, what: str) -> float:
    """A finite float of at most MAX_LOG_NUMBER in magnitude from a log token (thousands
    separators allowed), or an InputError at file:line naming the field."""
    if len(token) > MAX_TOKEN_CHARS:
        raise fail(path, line, f"{what}: {_shown_token(token)} is not a number a log prints")
    try:
        value = float(token.replace(",", ""))
    except ValueError:
        raise fail(path, line, f"{what}: {_shown_token(token)} is not a number") from None
    if not abs(value) <= MAX_LOG_NUMBER:     # also NaN
        raise fail(path, line, f"{what}: {token} is out of range (at most "
                   f"{MAX_LOG_NUMBER:g} in magnitude)")
    return value


def integer(token: str, path: str | Path, line: int, what: str) -> int:
    """A non-negative integer of at most MAX_LOG_NUMBER from a log token (a step, a rank, a
    world size), or an InputError at file:line naming the field: never int() of 5,000 digits."""
    if not token.isascii() or not token.isdigit() or len(token) > 16 \
            or int(token) > MAX_LOG_NUMBER:
        raise fail(path, line, f"{what}: {_shown_token(token)} is not an integer from 0 to "
                   f"{MAX_LOG_NUMBER:g}")
    return int(token)
