"""Invocations generated from the CLI's own option metadata, mutated example files, and the
exit-code contract they must keep (used by test_fuzz_cli.py).

The command tree is the click tree typer builds from the commands (`typer.main.get_command`):
each parameter's declared names, annotation (int / float / str / bool / Enum / list), flag-ness,
required-ness and help text (choices are read from help such as "none, selective or full").
Values mix what a user means (presets, profiles, example files, powers of two) with what a
hostile or careless user types (0, -1, 2^63, 400 digits, nan, '', '[x]', over-long paths).
"""

from __future__ import annotations

import enum
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import typer
from hypothesis import strategies as st

from conftest import run_in_process

from planner.cli.dispatch import register
from planner.cli.root import app

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LARGE = os.environ.get("DTPLAN_FUZZ", "") == "large"

HOSTILE_STR = ["", " ", "x", "[x]", "[bold]b[/bold]", "[/x]", "a" * 300, "\u00e9\u4e2d", "-", "..",
               "nan", "1e400", "9" * 400, "a\nb", "\x1b[2Jx", "\t"]
HOSTILE_INT = ["0", "-1", "-9223372036854775809", "9223372036854775808", "10000001",
               "9" * 400, "1.5", "1e3", "x", ""]
HOSTILE_FLOAT = ["0", "-1", "nan", "inf", "-inf", "1e308", "1e400", "5e-324", "x", "", "9" * 400]
# Ranges a user means, up to the top of the allowed range (validate.MAX_GPUS = 10^7): work is
# bounded there too (benchmarks/bounds.py), so both profiles draw it.
GPUS = ["1", "2", "8", "16", "64", "256", "1024", "4096", "1000000", "4194304", "10000000"]
SMALL_INTS = ["1", "2", "3", "4", "8", "16", "32"]
FLOATS = ["0.05", "0.5", "1", "12", "80", "100", "400", "5000"]
EVIDENCE = sorted(str(p) for p in (ROOT / "tests" / "data" / "evidence").glob("*"))
NUMBERS = ["7e9", "70e9", "1.5e12", "15e12", "4M", "1T", "1,000", "2**20"]


@dataclass
class Param:
    """One parameter of a command, as the click tree declares it."""

    name: str
    opts: list[str]
    secondary: list[str]
    kind: str                    # int | float | str | bool | enum | list
    positional: bool
    required: bool
    flag: bool
    choices: list[str] = field(default_factory=list)


@dataclass
class Command:
    path: list[str]
    params: list[Param]

    @property
    def option_names(self) -> set[str]:
        """Option spellings and the positional arguments' metavars (NAME, FILE, PLAN)."""
        return {o if o.startswith("-") else o.upper() for p in self.params
                for o in p.opts + p.secondary} | {"FILE", "PLAN"}


def _kind(annotation) -> tuple[str, list[str]]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind(args[0])
    if origin in (list, typing.List):
        return "list", []
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "enum", [m.value for m in annotation]
    return {int: "int", float: "float", bool: "bool"}.get(annotation, "str"), []


def _help_choices(help_text: str | None) -> list[str]:
    """Choices a help text lists: 'none, selective or full' -> [none, selective, full]."""
    m = re.match(r"^\s*(?:[\w ]+: )?([\w.-]+(?:, [\w.-]+)*,? or [\w.-]+)\b", help_text or "")
    return re.split(r",? or |, ", m.group(1)) if m else []


def commands() -> list[Command]:
    """Every leaf command of the click tree typer builds, with its parameters."""
    out: list[Command] = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, path + [name])
            return
        params = []
        for p in cmd.params:
            if "--help" in p.opts:
                continue
            kind, choices = _kind(p.type_descriptor.annotation)
            params.append(Param(p.name, list(p.opts), list(p.secondary_opts), kind,
                                p.param_type_name == "argument", bool(p.required),
                                bool(getattr(p, "is_flag", False)),
                                choices or _help_choices(getattr(p, "help", None))))
        out.append(Command(path, params))

    register([])   # an argv that names no command registers them all
    walk(typer.main.get_group(app), [])
    return out


# ---- values -----------------------------------------------------------------------------------

def example_files(pattern: str) -> list[str]:
    return sorted(str(p) for p in EXAMPLES.glob(pattern) if not p.name.endswith(".expect"))


def hostile_paths(tmp: Path) -> list[str]:
    """Paths that are not what an option wants: missing, empty, a directory, a device, a FIFO,
    over the OS limit, with markup brackets."""
    fifo = tmp / "fifo.json"
    if hasattr(os, "mkfifo") and not fifo.exists():
        os.mkfifo(fifo)
    (tmp / "[dir]").mkdir(exist_ok=True)
    paths = ["", "16", "missing.yaml", str(tmp), str(tmp / "[dir]"), "[/x]/a.sh", "a" * 300,
             "/".join(["d"] * 2100)]
    if fifo.exists():
        paths.append(str(fifo))
    if os.path.exists("/dev/null"):
        paths.append("/dev/null")
    return paths


_POOLS: dict[tuple[str, str, Path], list[str]] = {}


def _pool(p: Param, tmp: Path) -> list[str]:
    """Meaningful values for one parameter (cached: the pools do not change)."""
    key = (p.name, p.kind, tmp)
    if key not in _POOLS:
        _POOLS[key] = _make_pool(p, tmp)
    return _POOLS[key]


def _make_pool(p: Param, tmp: Path) -> list[str]:
    """Meaningful values for one parameter, by its name and kind."""
    from planner.specs.hardware_toml import list_profiles
    from planner.specs.presets import PRESETS

    name = p.name
    files = {"model_config": example_files("models/*/config.json") + example_files("models/*"),
             "hardware_file": [str(ROOT / "hardware_profiles" / "h100.toml"),
                               str(ROOT / "hardware_profiles" / "l40s.toml")],
             "from_plan": example_files("plans/*.yaml"),
             "files": example_files("plans/*.yaml") + example_files("engines/*"),
             "plan": example_files("plans/*.yaml"),
             "framework": [str(f) for f in sorted((ROOT / "framework_profiles").glob("*.toml"))],
             "evidence": EVIDENCE, "more": EVIDENCE, "runs": EVIDENCE, "compare": EVIDENCE}
    if name in files:
        names = ["megatron", "torchtitan", "fsdp", "deepspeed"] if name == "framework" else []
        return files[name] + names + hostile_paths(tmp)
    if name == "model":
        return sorted(PRESETS)[:12] + example_files("models/*")
    if name in ("hardware", "name"):
        return [prof.name for prof in list_profiles()]
    if name in ("gpus", "dp"):
        return GPUS + (["64,128", "64..1024", "8..4", "1..10000001"] if p.kind == "list" else [])
    if name == "output":
        return ["-", str(tmp / "out.md"), str(tmp / "out.html"), str(tmp / "out.json")]
    if name in ("params", "train_tokens", "tokens_per_batch", "tokens_per_s", "message_gb"):
        return NUMBERS
    if name in ("micro_batch", "chunks", "micro_batches", "intervals"):
        return SMALL_INTS + ["auto"]
    if p.choices:
        return p.choices
    if p.kind == "int":
        return SMALL_INTS + GPUS
    if p.kind in ("float",):
        return FLOATS
    return ["x"]


def _hostile(p: Param) -> list[str]:
    return {"int": HOSTILE_INT, "float": HOSTILE_FLOAT}.get(p.kind, HOSTILE_STR + HOSTILE_INT[:6])


@st.composite
def invocation(draw, cmds: list[Command], tmp: Path) -> tuple[Command, list[str]]:
    """One argv: a command, then each parameter with some probability (required ones mostly),
    with a meaningful value (most of the time) or a hostile one."""
    cmd = draw(st.sampled_from(cmds))
    argv = list(cmd.path)
    n = len(cmd.params)
    chosen = draw(st.sets(st.integers(0, n - 1), max_size=6)) if n else set()
    for i, p in enumerate(cmd.params):
        if p.required and not draw(st.integers(0, 9)):
            continue  # a required parameter left out, now and then
        if not p.required and i not in chosen:
            continue
        if p.flag:
            argv.append(draw(st.sampled_from(p.opts + p.secondary)))
            continue
        pool = _pool(p, tmp)
        value = draw(st.sampled_from(pool) if draw(st.integers(0, 3)) else
                     st.sampled_from(_hostile(p)))
        if p.positional:
            argv.append(value)
        else:
            argv += [draw(st.sampled_from(p.opts)), value]
    if "--force" in cmd.option_names and "--force" not in argv:
        argv.append("--force")  # a repeated run may overwrite what the first one wrote
    return cmd, argv


# ---- running and the contract ------------------------------------------------------------------

REUSES = 50  # then rebuilt: a run sees a fresh tree now and then, as each process builds one
_BUILDING = []  # get_command calls get_group: only the outermost call is memoised


def _memo(build):
    """typer's command builder, memoised on what is registered for up to REUSES runs: building
    the click tree walks every command signature (~20 ms), and a click command is reusable
    across main() calls; the console script builds it once per process, as this does."""
    cache: dict = {}

    def built(typer_instance):
        if _BUILDING:
            return build(typer_instance)
        key = (id(typer_instance), len(typer_instance.registered_commands),
               len(typer_instance.registered_groups))
        tree, uses = cache.get(key, (None, REUSES))
        if uses >= REUSES:
            _BUILDING.append(key)
            try:
                tree, uses = build(typer_instance), 0
            finally:
                _BUILDING.pop()
        cache[key] = (tree, uses + 1)
        return tree
    return built


_BUILDERS = {name: _memo(getattr(typer.main, name)) for name in ("get_command", "get_group")}


def run_inprocess(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """conftest.run_in_process with the click tree's construction memoised (see _memo) and every
    warning shown (the contract allows none; Python's default filter would hide a repeat)."""
    saved = {name: getattr(typer.main, name) for name in _BUILDERS}
    try:
        for name, fn in _BUILDERS.items():
            setattr(typer.main, name, fn)
        r = run_in_process(list(argv), cwd=cwd, warn="always")
    finally:
        for name, fn in saved.items():
            setattr(typer.main, name, fn)
    return r.code, r.out, r.err


CLICK_USAGE = ("Missing option", "Missing argument", "Invalid value", "No such option",
               "Got unexpected extra argument", "Option '", "No such command", "Missing command")


def contract_violation(argv: list[str], code: int, out: str, err: str,
                       names: set[str]) -> str | None:
    """Why this run breaks the contract, or None: exit in {0, 1, 2}; no traceback; no warning
    (numpy's "RuntimeWarning: overflow encountered" is a range no option should allow); an exit 2
    prints one stderr line per problem (all found at once), each naming an option, a positional
    value, a file key:line, or click's own usage message (which names the option)."""
    if code not in (0, 1, 2):
        return f"exit {code}: {err.strip()[-300:]}"
    if "Traceback" in out + err or "internal error" in err:
        return "traceback printed"
    warned = next((x for x in err.splitlines() if "Warning" in x), None)
    if warned is not None:
        return f"a warning reached stderr: {warned[-200:]}"
    if code != 2:
        return None
    lines = err.strip().splitlines()
    if not lines or not all(x.startswith("dtplan: error: ") for x in lines):
        return f"exit 2 without one error line per problem: {err[-300:]!r}"
    for line in lines:   # several problems found at once: one line each (errors.InputErrors)
        why = _line_violation(line.removeprefix("dtplan: error: "), argv, names)
        if why:
            return why
    return None


# Plan-file errors about the file as a whole (its bytes, size or nesting) name no line; every
# other plan-file error names one (resolving a section's value too: inputs.lines.with_lines).
WHOLE_FILE = ("binary data", "not UTF-8", "file is ", "refused: nested deeper",
              "refused: more than")


def plan_line_violation(path: str, err: str) -> str | None:
    """Why an exit-2 error about a plan file names no line of it (None if every one that
    names the file names its line: ``file:line: key: …``, or a syntax error's "at line N")."""
    for line in err.strip().splitlines():
        msg = line.removeprefix("dtplan: error: ")
        if not msg.startswith(path + ":") or re.match(re.escape(path) + r":\d+: ", msg):
            continue
        rest = msg[len(path) + 2:]
        if not rest.startswith(WHOLE_FILE) and not re.match(r"invalid \w+ at line \d+", rest):
            return f"a plan-file error without its line: {msg!r}"
    return None


def _line_violation(msg: str, argv: list[str], names: set[str]) -> str | None:
    """Why one error line names no option, positional value or file key:line (None if it does)."""
    head = msg.split(": ", 1)[0]
    if head in names or msg.startswith(CLICK_USAGE):
        return None
    # as printed: control characters escaped (one line), a long value cut
    shown = ["".join(ch if ch >= " " and ch != "\x7f" else repr(ch)[1:-1] for ch in a)
             for a in argv[1:] if a]
    if any(head == a or head.startswith(a + ":") or (len(a) > 120 and head[:60] == a[:60])
           for a in shown):
        return None  # a positional path, possibly with :line (a long one is shown cut)
    if re.match(r"^(?:plan file |[^:]+\.\w+(?::\d+)?: )", msg):
        return None  # a file (from a plan or a model directory) with its key and line
    return f"exit 2 message names no option, value or key: {msg!r}"
