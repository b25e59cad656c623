"""Which framework profile the running command selected (--framework, a plan file's
`framework:` key, or the kind of engine config it read); None: the default. A CLI run answers
one question, so a selection lasts for that run (``command_scope``); library callers pass
Problem(framework=...). The profiles themselves are in ``specs.framework``; this state is kept
apart so that opening a command's scope loads no profile model.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

selected: Any = None   # the FrameworkProfile selected inside the current command, or None
in_command = 0         # how many command scopes are open


@contextlib.contextmanager
def command_scope() -> Iterator[None]:
    """One CLI command: selections made inside last until it returns, then the previous one
    (normally the default) is back; plan keys and engine kinds select only inside a command."""
    global selected, in_command
    saved, selected = selected, None
    in_command += 1
    try:
        yield
    finally:
        selected = saved
        in_command -= 1
