"""The one home of output escaping: each output kind has one function here, and every user
string (a file name, a model or GPU name from a config, a path) reaches its output through it.

- ``visible``: terminal text and one-line messages. C0 controls and DEL (ESC starts colour,
  cursor and OSC sequences: a window title, an OSC 8 hyperlink), C1 controls U+0080-U+009F
  (U+009B is a one-byte CSI, U+009D an OSC on terminals that read them) and the bidirectional
  overrides and isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C: text shown in
  another order than it is, CVE-2021-42574) are shown as escapes (``\\x1b``, ``\\u202e``).
- ``markdown``: ``visible``, then link and image syntax (``[``, ``]``) and the ``<`` opening
  an HTML tag backslash-escaped (CommonMark: any ASCII punctuation may be), so a name shows
  as written and is never a live link, a remote image or a tag (idempotent on ``visible``
  text: ``markdown(visible(s)) == markdown(s)``). Table cells also escape ``|`` (render).
- ``html_text``: ``visible``, then ``html.escape`` (tags and attribute quotes).
- ``annotation`` / ``annotation_property``: a GitHub workflow command's message and property
  values (``%``, CR, LF and, in properties, ``:`` and ``,`` percent-encoded as the runner
  decodes them), after ``visible``: a newline cannot start a ``::error::`` of its own.
- ``toml_string`` / ``toml_comment``: a TOML basic string (TOML 1.0: backslash, quote and
  every control character escaped) and a comment's text (one line, no control character).
"""

from __future__ import annotations

import html
import re

_REST = r"\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
UNSAFE = re.compile(rf"[\x00-\x1f{_REST}]")
UNSAFE_BUT_NEWLINE = re.compile(rf"[\x00-\x09\x0b-\x1f{_REST}]")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")   # where HTML would open a tag: <img, </b>, <!--
_LINK = re.compile(r"([\[\]])")           # link and image syntax: [text](url), ![alt](src)
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
                 "\r": "\\r"}
_TOML_UNSAFE = re.compile(rf'[\\"\x00-\x1f{_REST}]')


def _escape(ch: str) -> str:
    """Python's escape of one character: \\n, \\x1b, \\x9b, \\u202e."""
    return ch.encode("unicode_escape").decode("ascii")


def visible(text: object, *, newlines: bool = False) -> str:
    """The text with every unsafe character shown as its escape (``newlines``: line breaks
    kept, for multi-line notes)."""
    pattern = UNSAFE_BUT_NEWLINE if newlines else UNSAFE
    return pattern.sub(lambda m: _escape(m.group()), str(text))


def markdown(text: object) -> str:
    """Markdown text showing `text` as written (see the module docstring)."""
    return _LINK.sub(r"\\\1", _TAG.sub(r"\\<", visible(text)))


def html_text(text: object) -> str:
    """HTML text (element content or a quoted attribute) showing `text` as written."""
    return html.escape(visible(text), quote=True)


def annotation(text: object) -> str:
    """A GitHub workflow command's message: one line whatever `text` holds."""
    return visible(text, newlines=True).replace("%", "%25").replace("\r", "%0D") \
        .replace("\n", "%0A")


def annotation_property(text: object) -> str:
    """A GitHub workflow command's property value (file=, title=)."""
    return annotation(text).replace(":", "%3A").replace(",", "%2C")


def toml_string(text: object) -> str:
    """A TOML basic string holding `text` exactly (controls as \\uXXXX escapes)."""
    def esc(m: re.Match[str]) -> str:
        ch = m.group()
        return _TOML_ESCAPES.get(ch) or f"\\u{ord(ch):04x}"
    return '"' + _TOML_UNSAFE.sub(esc, str(text)) + '"'


def toml_comment(text: object) -> str:
    """A TOML comment's text: one line, no control character (TOML 1.0 allows none but tab)."""
    return visible(text)
