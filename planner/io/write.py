"""Writing output files: atomically, never over an existing file without ``--force``.

A file is written to a temporary file in the destination's directory and then moved into
place, so a reader (or a crash) never sees half a file. Without ``force`` the move is a hard
link, which fails if the destination exists (no check-then-write race); with ``force`` it is
``os.replace`` (atomic on POSIX, https://docs.python.org/3/library/os.html#os.replace).
``-`` means standard output.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.errors import InputError
from planner.io.stdout import write_stdout
from planner.io.read import shown

STDOUT = "-"


def is_stdout(path: str) -> bool:
    return path == STDOUT


def check_targets(paths: list[str | Path], *, force: bool, field: str = "-o") -> None:
    """Fail early (before any work) when a target exists and ``force`` is not given, or its
    directory does not exist."""
    for p in paths:
        if str(p) == STDOUT:
            continue
        _check_name(str(p), field)
        p = Path(p)
        try:
            is_dir, exists = p.is_dir(), p.exists()
        except OSError as e:  # a name too long for the OS, a loop of symbolic links
            raise InputError(field, f"{shown(p)}: cannot write ({e.strerror or e})") from None
        if is_dir:
            raise InputError(field, f"{shown(p)} is a directory; give a file name")
        if exists and not force:
            raise InputError(field, f"{shown(p)} exists; pass --force to overwrite it")


def _check_name(path: str, field: str) -> None:
    """An output path must name a file: not empty, no NUL byte, not ending in '.' or '..'."""
    if not path.strip():
        raise InputError(field, "empty path; give a file name, or - for standard output")
    if "\x00" in path:
        raise InputError(field, f"{shown(path)}: path contains a NUL byte")
    if Path(path).name in ("", ".", "..") or path.endswith(os.sep):
        raise InputError(field, f"{shown(path)}: not a file name; give a file name")


def write_text(path: str | Path, content: str, *, force: bool = False, field: str = "-o",
               make_dirs: bool = False) -> None:
    """Write ``content`` to ``path`` atomically; ``-`` writes to stdout."""
    if str(path) == STDOUT:
        write_stdout(content if content.endswith("\n") else content + "\n")
        return
    _check_name(str(path), field)
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if make_dirs:
        parent.mkdir(parents=True, exist_ok=True)
    if not parent.is_dir():
        raise InputError(field, f"{parent}: directory does not exist")
    if p.is_dir():
        raise InputError(field, f"{p} is a directory; give a file name")
    if p.exists() and not force:
        raise InputError(field, f"{p} exists; pass --force to overwrite it")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise InputError(field, f"{p}: cannot write ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)          # fails if p appeared meanwhile: never clobber
            except FileExistsError:
                raise InputError(field, f"{p} exists; pass --force to overwrite it") from None
            except OSError:              # no hard links on this filesystem
                if p.exists():
                    raise InputError(field, f"{p} exists; pass --force to overwrite it") from None
                os.replace(tmp, p)
    except OSError as e:
        raise InputError(field, f"{p}: cannot write ({e.strerror or e})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
