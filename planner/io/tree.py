"""`dtplan check DIR`: the plan files and engine configs under a directory.

Walked recursively (hidden directories such as .git skipped, symbolic links not followed),
a file is checked when its suffix is one of ``SUFFIXES`` and a bounded read of its text shows
what it is: a plan (a top-level ``gpus`` key), a DeepSpeed config (one of its batch / ZeRO
keys), a torchtitan job (a ``[parallelism]`` or ``[training]`` table, or a 0.3 command line) or a
Megatron-LM launch (one of its parallelism flags). Everything else (a model's config.json, a CI workflow, a README)
is listed as skipped. A directory with nothing to check is bad input (exit 2). Paths given as
files (and ``-`` for stdin) are always checked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from planner.errors import InputError
from planner.io.read import read_text

SUFFIXES = (".yaml", ".yml", ".toml", ".json", ".sh", ".bash", ".args")
MAX_ENTRIES = 100_000    # directory entries walked under one argument
MAX_FILES = 1_000        # files checked in one run (directories and paths together)

_PLAN = re.compile(r'^(?:gpus\s*[:=]|"gpus"\s*:)|[{,]\s*"gpus"\s*:', re.M)
_DEEPSPEED = re.compile(r'"(?:train_batch_size|train_micro_batch_size_per_gpu|'
                        r'gradient_accumulation_steps|zero_optimization)"\s*:')
_TORCHTITAN = re.compile(r"^\s*\[(?:parallelism|training)\]", re.M)
_MEGATRON = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
             "--micro-batch-size", "pretrain_gpt")
# A torchtitan 0.3 launch: `-m torchtitan.train`, `--module`, `--parallelism.*` (0.3 reads no TOML)
TITAN_CMDLINE = re.compile(r"torchtitan[./]train|(^|\s)--module[\s=]|(^|\s)--parallelism\.")


def _looks_checkable(path: Path) -> bool:
    """Whether a file under a directory is a plan or an engine config (by a text sniff); a file
    that cannot be read is kept, so the check reports why."""
    try:
        text = read_text(path, what="plan or engine config")
    except InputError:
        return True
    suffix = path.suffix.lower()
    if suffix in (".sh", ".bash", ".args"):
        return any(flag in text for flag in _MEGATRON) or bool(TITAN_CMDLINE.search(text))
    if _PLAN.search(text):
        return True
    if suffix == ".json":
        return bool(_DEEPSPEED.search(text))
    return suffix == ".toml" and bool(_TORCHTITAN.search(text))


def _walk(root: str) -> tuple[list[str], list[str]]:
    found: list[str] = []
    skipped: list[str] = []
    seen = 0
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            seen += 1
            if seen > MAX_ENTRIES:
                raise InputError("FILE", f"{root}: more than {MAX_ENTRIES:,} entries under the "
                                         "directory; point check at a smaller one")
            p = Path(here) / name
            if name.startswith(".") or p.is_symlink() or p.suffix.lower() not in SUFFIXES:
                continue
            (found if _looks_checkable(p) else skipped).append(str(p))
    if len(found) > MAX_FILES:
        raise InputError("FILE", f"{root}: {len(found)} plan/engine files; at most {MAX_FILES} "
                                 "from one directory")
    return found, skipped


def _cap(found: list[str]) -> list[str]:
    """The files of one run, at most MAX_FILES: each costs a full estimate (~10 ms), so the cap
    keeps one `check` invocation to seconds."""
    if len(found) > MAX_FILES:
        raise InputError("FILE", f"{len(found):,} files to check; at most {MAX_FILES:,} in one "
                                 "run (split them over several check commands)")
    return found


def expand(paths: list[str]) -> tuple[list[str], list[str]]:
    """(files to check, files skipped): each directory replaced by what is under it."""
    found: list[str] = []
    skipped: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p):
            here, not_here = _walk(p)
            if not here:
                raise InputError("FILE", f"{p}: is a directory with no plan or engine config under "
                                         f"it (looked for {', '.join('*' + s for s in SUFFIXES)})")
            found += here
            skipped += not_here
        else:
            found.append(p)
    return _cap(found), skipped
