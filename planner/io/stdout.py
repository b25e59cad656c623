"""The one writer every command's standard output goes through: a reader that went away
(``dtplan fit | head``) ends the output, not the command."""

from __future__ import annotations

import codecs
import io
import os
import sys
import unicodedata

from planner.io.escape import visible


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


# What the output's own characters become on a stream whose encoding cannot hold them
# (LC_ALL=en_US.ISO-8859-1, PYTHONIOENCODING=ascii, a Windows code page): readable ASCII.
ASCII_FALLBACK = {"—": "-", "–": "-", "−": "-", "≥": ">=", "≤": "<=", "≠": "!=", "≈": "~",
                  "·": "-", "×": "x", "÷": "/", "…": "...", "→": "->", "←": "<-", "↑": "^",
                  "↓": "v", "±": "+/-", "µ": "u", "‘": "'", "’": "'", "“": '"', "”": '"',
                  "•": "*", "²": "^2", "³": "^3", "∞": "inf", "✓": "ok", "✗": "x", "✔": "ok",
                  "✘": "x", "⚠": "!", "─": "-", "━": "-", "│": "|", "┃": "|", "█": "#",
                  "▏": "|", "▕": "|", "░": ".", "▒": ":", "▓": "#", "Σ": "sum", "Δ": "d"}
ERROR_HANDLER = "dtplan-ascii-fallback"


def _fallback(err: UnicodeError) -> tuple[str, int]:
    """A codecs error handler: each unencodable character as its ASCII fallback, else its
    compatibility decomposition without accents (é -> e), else a \\uXXXX escape."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for ch in err.object[err.start:err.end]:
        rep = ASCII_FALLBACK.get(ch)
        if rep is None:
            rep = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
            rep = rep or (f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        out.append(rep)
    return "".join(out), err.end


codecs.register_error(ERROR_HANDLER, _fallback)


def stream_encoding(stream: object) -> str:
    """The encoding a text stream writes in, normalised ("utf-8" for one that states none: an
    in-memory stream)."""
    return (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")


def encodable(text: str, encoding: str) -> str:
    """`text` as a stream in `encoding` writes it (encodable_streams): each character the
    encoding cannot hold as its ASCII fallback; for a renderer that lays text out in columns
    before it is written, so the widths are those of the characters printed."""
    if encoding.startswith("utf"):
        return text
    return text.encode(encoding, ERROR_HANDLER).decode(encoding)


def encodable_streams() -> None:
    """Make stdout and stderr write what their encoding cannot hold through the ASCII
    fallbacks (instead of a UnicodeEncodeError, exit 3); UTF-8 streams are left alone."""
    for stream in (sys.stdout, sys.stderr):
        encoding = stream_encoding(stream)
        if encoding.startswith("utf") or not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            stream.reconfigure(errors=ERROR_HANDLER)
        except (ValueError, OSError):   # closed, or not reconfigurable here
            pass


def say(kind: str, text: str) -> None:
    """One ``dtplan: <kind>: <text>`` line on stderr (error, note, wrote), its user strings
    shown as escapes where they hold control, C1 or bidi characters (io.escape.visible)."""
    sys.stderr.write(f"dtplan: {kind}: {visible(text)}\n")
