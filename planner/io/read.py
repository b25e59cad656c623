"""Safe reading of the files the CLI takes: special files refused, size bounded before reading.

A CI gate reads files from pull requests, so every file the CLI reads (plan files, engine
configs, Hugging Face config.json, hardware profiles) comes through ``read_file``: an empty
path, a NUL byte or a path over the OS limit is refused; the file is opened non-blocking and
checked with ``fstat`` on the open descriptor, so a FIFO, a device, a socket or a directory
where a file is meant is refused without ever blocking (and without a check-then-open race);
at most ``max_bytes + 1`` bytes are read; binary and non-UTF-8 content is refused. Parsing is
bounded in ``inputs.parse``. Every problem is one ``InputError`` naming the option (when the
path came from one) and then the path: ``--model-config: 16: file not found; ...``.

``-`` is standard input for every option that takes a file (``check -``, ``--model-config -``,
``--from-plan -``, ``--hardware-file -``), read with the same bounds; it can be read once per
run, so a second ``-`` is refused rather than read as empty.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Optional

from planner.errors import InputError
from planner.io.escape import visible
from planner.io.parse import detect_format, parse_text

MAX_FILE_BYTES = 1_000_000      # plan, engine-config and profile files; real ones are a few kB
MAX_CONFIG_BYTES = 5 * 2**20    # a Hugging Face config.json is a few kB; some carry label maps
_SHOWN_CHARS = 120              # a longer path is shown cut, with its length


def shown(path: str | Path) -> str:
    """A user-supplied path as printed in one error line: control, C1 and bidi characters
    escaped (planner.io.escape.visible), a very long one cut (with its length) so the
    message stays readable."""
    s = visible(path)
    if len(s) > _SHOWN_CHARS:
        s = f"{s[:60]}…{s[-20:]} ({len(s)} characters)"
    return s


def _error(option: Optional[str], path: str | Path, message: str) -> InputError:
    if option:
        return InputError(option, f"{shown(path)}: {message}")
    return InputError(shown(path), message)


def _os_problem(e: OSError, what: str) -> str:
    if e.errno == errno.ENAMETOOLONG:
        return ("path too long for the operating system (at most 255 bytes per name, "
                f"4096 in all); expected a {what}")
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return f"file not found; expected a {what}"
    if isinstance(e, PermissionError):
        return "not readable (permission denied)"
    if e.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    return f"cannot read ({e.strerror or e})"


def file_kind(mode: int) -> Optional[str]:
    """What a non-regular file is (None for a regular file)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "a special file"


def _not_regular(mode: int, what: str) -> str:
    kind = file_kind(mode)
    if kind == "a directory":
        return f"is a directory; expected a {what}"
    return f"is {kind}, not a regular file; expected a {what}"


def _open_regular(path: str, what: str, option: Optional[str],
                  dir_file: Optional[str]) -> tuple[str, int, os.stat_result]:
    """(path opened, descriptor, its fstat) of a regular file; a directory is replaced by its
    ``dir_file`` when one is given (a model directory holding config.json)."""
    if not path.strip():  # a positional argument has no option to name: its metavar
        raise InputError(option or "FILE", f"empty path; expected a {what}")
    if "\x00" in path:
        raise _error(option, path, "path contains a NUL byte")
    try:
        # stat first so a special file is never opened; O_NONBLOCK so even a FIFO swapped in
        # after the stat cannot block the open, and fstat below decides on what was opened.
        before = os.stat(path)
        if stat.S_ISDIR(before.st_mode) and dir_file:
            return _open_regular(os.path.join(path, dir_file), what, option, None)
        if file_kind(before.st_mode):
            raise _error(option, path, _not_regular(before.st_mode, what))
        if not os.access(path, os.R_OK):
            raise _error(option, path, "not readable (permission denied)")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _error(option, path, _os_problem(e, what)) from None
    st = os.fstat(fd)
    if file_kind(st.st_mode):
        os.close(fd)
        raise _error(option, path, _not_regular(st.st_mode, what))
    return path, fd, st


STDIN = "-"
# The stream already read and who read it: a stream can be read once (a second `-` in one
# command line gets nothing). Keyed on the stream, so a caller that gives this process a new
# standard input (a test, an embedding program) can read that one.
_stdin_read: list[tuple[object, str]] = []


def _read_stdin(what: str, option: Optional[str], max_bytes: int) -> tuple[str, bytes]:
    """(``-``, bytes) of standard input, bounded like a file; a second reading is refused."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise _error(option, STDIN, f"no standard input to read; expected a {what}")
    for read, reader in _stdin_read:
        if read is stream:
            raise _error(option, STDIN, f"standard input was already read for {reader}; "
                                        f"give a file path for the {what}")
    _stdin_read[:] = [(stream, option or "the file argument")]
    try:
        raw = stream.read(max_bytes + 1)
    except (OSError, ValueError) as e:   # closed, or not readable here (a captured test run)
        raise _error(option, STDIN, f"cannot read standard input ({e}); expected a {what}") from None
    if len(raw) > max_bytes:
        raise _error(option, STDIN, f"more than {max_bytes:,} bytes on standard input; a {what} "
                                    "must be smaller")
    return STDIN, raw


def read_bytes(path: str | Path, *, what: str, option: Optional[str] = None,
               dir_file: Optional[str] = None,
               max_bytes: int = MAX_FILE_BYTES) -> tuple[str, bytes]:
    """(path read, bytes) of a regular file of at most ``max_bytes`` bytes, refused before
    reading when its size says so (and when it grows past the limit while being read);
    ``-`` reads standard input."""
    if str(path) == STDIN:
        return _read_stdin(what, option, max_bytes)
    opened, fd, st = _open_regular(str(path), what, option, dir_file)
    limit = f"{max_bytes / 1e6:g} MB" if max_bytes % 2**20 else f"{max_bytes // 2**20} MiB"
    if st.st_size > max_bytes:
        os.close(fd)
        raise _error(option, opened, f"file is {st.st_size} bytes; a {what} must be at most {limit}")
    try:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as e:
        raise _error(option, opened, _os_problem(e, what)) from None
    if len(raw) > max_bytes:
        raise _error(option, opened, f"file is larger than {limit}")
    return opened, raw


def open_regular(path: str | Path, *, what: str, option: Optional[str] = None,
                 max_bytes: int = MAX_FILE_BYTES) -> BinaryIO:
    """A binary file object of a regular file of at most ``max_bytes`` bytes (the checks of
    read_bytes, for a reader that streams: evidence.stream); the caller closes it."""
    opened, fd, st = _open_regular(str(path), what, option, None)
    if st.st_size > max_bytes:
        os.close(fd)
        raise _error(option, opened, f"file is {st.st_size} bytes; a {what} must be at most "
                                     f"{max_bytes // 2**20} MiB")
    return os.fdopen(fd, "rb")


def read_file(path: str | Path, *, what: str = "plan file", option: Optional[str] = None,
              dir_file: Optional[str] = None, max_bytes: int = MAX_FILE_BYTES) -> tuple[str, str]:
    """(path read, text) of a regular, non-empty UTF-8 text file (see read_bytes)."""
    opened, raw = read_bytes(path, what=what, option=option, dir_file=dir_file,
                             max_bytes=max_bytes)
    if not raw.strip():
        raise _error(option, opened, f"file is empty; expected a {what}")
    if b"\x00" in raw:
        raise _error(option, opened, f"binary data (NUL bytes), not UTF-8 text; expected a {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(option, opened, f"not UTF-8 text (bad byte at offset {e.start})") from None
    return opened, text.removeprefix("\ufeff")


def read_text(path: str | Path, *, what: str = "plan file", option: Optional[str] = None) -> str:
    """The text of a plan or engine-config file (see read_file)."""
    return read_file(path, what=what, option=option)[1]


def load_document(path: str | Path, *, what: str = "plan file",
                  option: Optional[str] = None) -> tuple[str, str, Any]:
    """(text, format, parsed data) of a plan or engine-config file."""
    text = read_text(path, what=what, option=option)
    fmt = detect_format(path, text)
    where = f"{option}: {shown(path)}" if option else shown(path)
    return text, fmt, parse_text(text, fmt, where)


# ---- paths referenced by a plan ----------------------------------------------------------------

def safe_reference(ref: str, base_dir: Path, key: str, what: str) -> Path:
    """Resolve a path written in a plan: relative to the plan's directory, it must stay inside
    that directory or the working directory, and be a readable regular file (or a directory
    holding config.json for models)."""
    if not ref.strip() or "\x00" in ref:
        raise InputError(key, "must be a non-empty path")
    p = Path(ref)
    p = (base_dir / p) if not p.is_absolute() else p
    try:
        resolved = p.resolve(strict=False)
    except (OSError, RuntimeError) as e:
        raise InputError(key, f"{shown(ref)}: cannot resolve ({e})") from None
    roots = [base_dir.resolve(), Path.cwd().resolve()]
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise InputError(key, f"{shown(ref)}: resolves outside the plan's directory and the working "
                              "directory; refusing to read it")
    # The same checks as reading (special files, permissions), under the plan's key; size,
    # encoding and content are checked when the file is read.
    opened, fd, _st = _open_regular(str(resolved), what, key,
                                    "config.json" if what == "config.json" else None)
    os.close(fd)
    return Path(opened)


def looks_like_path(text: str, suffix: str) -> bool:
    """Whether an option that takes a name or a path (``check --model``) was given a path: it
    has a separator, ends in ``suffix`` or names something that exists. Never raises (a name
    too long for the OS is a path, so the reader says so)."""
    if os.sep in text or text.endswith(suffix) or any(len(part.encode()) > 255
                                                      for part in text.split(os.sep)):
        return True
    try:
        return os.path.exists(text)
    except (OSError, ValueError):
        return True
