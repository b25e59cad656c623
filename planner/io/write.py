"""Writing output files: atomically, never over anything but a regular file, never over an
existing file without ``--force``.

A file is written to a temporary file in the destination's directory and then renamed into
place, so a reader (or a crash) never sees half a file and a failure leaves nothing behind.
The destination must be a new path or a regular file, even with ``force``: a FIFO, a device
node (``-o /dev/null`` as root would replace the system's /dev/null), a socket, a directory or
a symbolic link (``/proc/self/fd/1``) is refused, so the rename never replaces one. Without
``force`` the move is a hard link, which fails if the destination exists (no check-then-write
race); with ``force`` it is ``os.replace`` (atomic on POSIX,
https://docs.python.org/3/library/os.html#os.replace). A new file gets mode 0666 & ~umask,
as open() gives; a replaced file keeps its mode. ``-`` means standard output. Every problem
is one InputError naming the option and the path (exit 2).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from planner.errors import InputError
from planner.io.read import file_kind, shown
from planner.io.stdout import write_stdout

STDOUT = "-"


def is_stdout(path: str) -> bool:
    return path == STDOUT


def _problem(e: OSError) -> str:
    """An OSError as the reason a path cannot be written, for people."""
    if e.errno == errno.ENAMETOOLONG:
        return "path too long for the operating system (at most 255 bytes per name)"
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if e.errno == errno.ENOTDIR:
        return "a directory on the path is a file"
    return e.strerror or str(e)


def _existing(p: Path, field: str, force: bool) -> os.stat_result | None:
    """The lstat of an existing destination (None for a new path); anything but a regular
    file is refused whatever ``force`` says, an existing file without ``force`` too."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputError(field, f"{shown(p)}: cannot write ({_problem(e)})") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(field, f"{shown(p)} is a symbolic link; refusing to replace it "
                                "(give the path of a regular file, or a new one)")
    kind = file_kind(st.st_mode)
    if kind == "a directory":
        raise InputError(field, f"{shown(p)} is a directory; give a file name")
    if kind:
        raise InputError(field, f"{shown(p)} is {kind}, not a regular file; refusing to "
                                "replace it, even with --force")
    if not force:
        raise InputError(field, f"{shown(p)} exists; pass --force to overwrite it")
    return st


def check_targets(paths: list[str | Path], *, force: bool, field: str = "-o") -> None:
    """Fail early (before any work) when a target is not a regular file or a new path, exists
    without ``force``, or its directory does not exist."""
    for p in paths:
        if str(p) == STDOUT:
            continue
        _check_name(str(p), field)
        _existing(Path(p), field, force)


def _check_name(path: str, field: str) -> None:
    """An output path must name a file: not empty, no NUL byte, not ending in '.' or '..'."""
    if not path.strip():
        raise InputError(field, "empty path; give a file name, or - for standard output")
    if "\x00" in path:
        raise InputError(field, f"{shown(path)}: path contains a NUL byte")
    if Path(path).name in ("", ".", "..") or path.endswith(os.sep):
        raise InputError(field, f"{shown(path)}: not a file name; give a file name")


def _directory(parent: Path, field: str, make_dirs: bool) -> None:
    """The destination's directory exists (created with ``make_dirs``) and is a directory."""
    if make_dirs:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise InputError(field, f"{shown(parent)} exists and is not a directory") from None
        except OSError as e:
            raise InputError(field, f"{shown(parent)}: cannot create the directory "
                                    f"({_problem(e)})") from None
    try:
        is_dir = parent.is_dir()
    except OSError as e:
        raise InputError(field, f"{shown(parent)}: cannot write ({_problem(e)})") from None
    if not is_dir:
        raise InputError(field, f"{shown(parent)}: directory does not exist")


def _new_file_mode() -> int:
    """0666 & ~umask: the mode open() gives a new file (the umask read and restored)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_text(path: str | Path, content: str, *, force: bool = False, field: str = "-o",
               make_dirs: bool = False) -> None:
    """Write ``content`` to ``path`` atomically (see the module docstring); ``-`` writes to
    stdout."""
    if str(path) == STDOUT:
        write_stdout(content if content.endswith("\n") else content + "\n")
        return
    _check_name(str(path), field)
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    _directory(parent, field, make_dirs)
    before = _existing(p, field, force)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:100]}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise InputError(field, f"{shown(p)}: cannot write in {shown(parent)} "
                                f"({_problem(e)})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(before.st_mode) if before else _new_file_mode())
        _move(tmp, p, field, force)
    except OSError as e:
        raise InputError(field, f"{shown(p)}: cannot write ({_problem(e)})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _move(tmp: str, p: Path, field: str, force: bool) -> None:
    """Rename the written temporary file into place: a hard link without ``force`` (fails if
    the path appeared meanwhile), else a replace of the regular file checked before."""
    if force:
        _existing(p, field, force)   # still a regular file or nothing (not swapped meanwhile)
        os.replace(tmp, p)
        return
    try:
        os.link(tmp, p)          # fails if p appeared meanwhile: never clobber
    except FileExistsError:
        raise InputError(field, f"{shown(p)} exists; pass --force to overwrite it") from None
    except OSError:              # no hard links on this file system
        if os.path.lexists(p):
            raise InputError(field, f"{shown(p)} exists; pass --force to overwrite it") from None
        os.replace(tmp, p)
