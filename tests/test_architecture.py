"""The shape of the code: engine/ is pure (imports nothing outside itself), no import cycle at
module level, and no file or function grows past the house limits (the ones already over are
listed with their current size: they may shrink, not grow, until they are split)."""

from __future__ import annotations

import ast
from pathlib import Path

PLANNER = Path(__file__).resolve().parent.parent / "planner"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 80
# Over the limit today (issue #12 asks for them to be split); the figure is a ceiling.
OVERSIZE_FILES = {"report.py": 423}
# Typer commands whose option declarations are the length, the engine-config readers'
# assertion lists, and the long document builders still to be split.
OVERSIZE_FUNCTIONS = {("cli/quick.py", "checkpoint_cmd"): 110,
                      ("engines/deepspeed.py", "read_deepspeed"): 95,
                      ("engines/megatron.py", "read_megatron"): 228,
                      ("engines/torchtitan.py", "read_torchtitan"): 143,
                      ("engines/megatron.py", "to_megatron"): 109,
                      ("render/quick.py", "_resilience_doc"): 129,
                      ("report.py", "build_review"): 195}
STDLIB_OK = {"__future__", "math", "typing", "dataclasses", "numpy", "functools", "itertools"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PLANNER.rglob("*.py"):
        parts = list(p.relative_to(PLANNER.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """Absolute names a `from ... import` refers to (modules, or module.attribute)."""
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _imports(module: str, path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            names.update(_resolve(module, path, node))
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_engine_imports_nothing_outside_engine():
    for module, path in _modules().items():
        if not (module == "planner.engine" or module.startswith("planner.engine.")):
            continue
        for name in _imports(module, path, top_level_only=False):
            inside = name == "planner.engine" or name.startswith("planner.engine.")
            assert inside or name.split(".")[0] in STDLIB_OK, (module, name)


def test_no_import_cycle_at_module_level():
    mods = _modules()
    graph = {m: {n for n in _imports(m, p, top_level_only=True) if n in mods and n != m}
             for m, p in mods.items()}
    # a package imports its own submodules lazily; only module-to-module edges matter
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            if n.startswith(m + "."):
                continue
            assert state.get(n) != 1, " -> ".join(stack + [m, n])
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_file_sizes():
    for p in PLANNER.rglob("*.py"):
        rel = p.relative_to(PLANNER).as_posix()
        lines = len(p.read_text().splitlines())
        assert lines <= OVERSIZE_FILES.get(rel, MAX_FILE_LINES), (rel, lines)


def test_function_sizes():
    for p in PLANNER.rglob("*.py"):
        rel = p.relative_to(PLANNER).as_posix()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = OVERSIZE_FUNCTIONS.get((rel, node.name), MAX_FUNCTION_LINES)
                assert lines <= limit, (rel, node.name, lines)


def test_layering():
    """Lower layers never reach up, not even lazily: documents do not import the CLI, the
    engine-config readers do not import the plan gate that calls them."""
    mods = _modules()
    engines = [(m, "planner.gate") for m in mods if m.startswith("planner.engines")]
    for low, high in [("planner.report", "planner.cli"), ("planner.evaluate", "planner.api"),
                      ("planner.timing", "planner.evaluate")] + engines:
        names = _imports(low, mods[low], top_level_only=False)
        assert not any(n == high or n.startswith(high + ".") for n in names), (low, high)
