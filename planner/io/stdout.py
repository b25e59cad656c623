"""The one writer every command's standard output goes through: a reader that went away
(``dtplan fit | head``) ends the output, not the command."""

from __future__ import annotations

import os
import sys


def silence_stdout() -> None:
    """After EPIPE: point fd 1 at /dev/null so later writes and the exit-time flush succeed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (captured in-process)
        pass


def write_stdout(text: str) -> None:
    """Write to stdout; a reader that went away (``| head``) ends the output, not the command."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
