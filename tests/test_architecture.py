"""The shape of the code, read from every import (function-level and type-only ones included):
one folder per concern, each an import layer that imports only the layers its line in LAYERS
names; no import cycle between modules; at most seven modules at the top of planner/; no file
over 400 lines and no function over 80 (the engine-config readers' flat assertion lists
excepted, by name); engine/ pure; render/ and cli/ hold no arithmetic (they format what the
library computed)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PLANNER = Path(__file__).resolve().parent.parent / "planner"
MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_TOP_MODULES = 400, 80, 7

# Each folder (or top-level module) of planner/, bottom to top, and the layers it may import: a
# layer names only layers above it in this table, so the table is the order. `errors` is one
# module under everything; `api` gathers the public names; `__main__` starts the CLI.
LAYERS: dict[str, tuple[str, ...]] = {
    "errors": (),
    "engine": (),
    "io": ("errors", "engine"),
    "specs": ("errors", "engine", "io"),
    "evidence": ("errors", "io"),
    "resilience": ("errors", "engine", "io", "specs"),
    "evaluation": ("errors", "engine", "io", "specs", "resilience"),
    "framework_configs": ("errors", "engine", "io", "specs", "evaluation"),
    "resolve": ("errors", "engine", "io", "specs", "evaluation", "framework_configs"),
    "search": ("errors", "engine", "io", "specs", "evaluation"),
    "advice": ("errors", "engine", "io", "specs", "evaluation", "search"),
    "gate": ("errors", "engine", "io", "specs", "resilience", "evaluation", "resolve", "advice"),
    "calibration": ("errors", "engine", "io", "specs", "evidence", "evaluation", "resolve"),
    "render": ("errors", "io", "specs", "evidence", "resilience", "evaluation", "search",
               "advice", "gate", "calibration"),
    "review": ("errors", "engine", "io", "specs", "evidence", "resilience", "evaluation",
               "resolve", "search", "advice", "gate", "calibration", "render"),
    "cli": ("errors", "io", "specs", "evidence", "resilience", "evaluation", "framework_configs",
            "resolve", "search", "advice", "gate", "calibration", "render", "review"),
    "api": ("errors", "specs", "evaluation", "search", "advice"),
    "__init__": ("api",),
    "__main__": ("cli",),
}
# The engine-config readers: each is one flat list of the framework's own assertions (one
# `rules.append(make_rule(...))` per check its argument validation makes), kept in the order the
# framework checks them so a reader can compare them line by line. The figure is a ceiling.
READER_ASSERTION_LISTS = {("framework_configs/deepspeed.py", "read_deepspeed"): 95,
                          ("framework_configs/megatron.py", "read_megatron"): 228,
                          ("framework_configs/torchtitan.py", "read_torchtitan"): 143}
STDLIB_OK = {"__future__", "math", "typing", "dataclasses", "numpy", "functools", "itertools"}


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the checks here (they only read it)."""
    return ast.parse(path.read_text())


def _modules() -> dict[str, Path]:
    out = {}
    for p in PLANNER.rglob("*.py"):
        parts = list(p.relative_to(PLANNER.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """Absolute names a `from ... import` refers to: module.attribute for each name (a
    submodule when it is one), the module itself for the names that are not submodules."""
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" for a in node.names]


def _imports(module: str, path: Path) -> set[str]:
    """Every name the module imports, wherever the import statement stands."""
    names: set[str] = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ImportFrom):
            names.update(_resolve(module, path, node))
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    """Module → the planner modules it imports (a name resolves to its longest module prefix)."""
    mods = _modules()

    def module_of(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    return {m: {d for n in _imports(m, p) if (d := module_of(n)) and d != m}
            for m, p in mods.items()}


def _layer(module: str) -> str:
    """The LAYERS entry a module belongs to: its folder under planner/, or its own name."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_every_folder_is_a_layer():
    """Each folder (or top-level module) of planner/ has its line in LAYERS, each line names
    only layers listed above it, and every import of every module stays within its line."""
    names = list(LAYERS)
    for layer, allowed in LAYERS.items():
        assert all(names.index(a) < names.index(layer) for a in allowed), (layer, allowed)
    present = {_layer(m) for m in _modules()}
    assert present <= set(LAYERS), f"folders without a line in LAYERS: {present - set(LAYERS)}"
    bad = sorted(f"{m} imports {d} ({_layer(d)} is not below {_layer(m)})"
                 for m, deps in _graph().items() for d in deps
                 if _layer(d) != _layer(m) and _layer(d) not in LAYERS[_layer(m)])
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    """No module reaches itself through imports, counting every import statement (inside
    functions and under TYPE_CHECKING too); a package's __init__ importing its own submodules is
    the one edge left out (it is how a package gathers its names)."""
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if n.startswith(m + "."):
                continue
            assert state.get(n) != 1, " -> ".join(stack + [m, n])
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_few_modules_at_the_top():
    top = sorted(p.name for p in PLANNER.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_no_hidden_imports():
    """Every import is an import statement the checks above read: no importlib.import_module or
    __import__ of a planner module by a string."""
    bad = []
    for module, path in _modules().items():
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in ("import_module", "__import__"):
                    bad.append(f"{module}:{node.lineno}")
    assert not bad, bad


def test_engine_imports_nothing_outside_engine():
    for module, path in _modules().items():
        if _layer(module) != "engine":
            continue
        for name in _imports(module, path):
            inside = name == "planner.engine" or name.startswith("planner.engine.")
            assert inside or name.split(".")[0] in STDLIB_OK, (module, name)


def test_file_sizes():
    over = [f"planner/{p.relative_to(PLANNER).as_posix()}: {n} lines (limit {MAX_FILE_LINES}); "
            "split it by concern" for p in sorted(PLANNER.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert not over, "\n".join(over)


def test_function_sizes():
    over = []
    for p in sorted(PLANNER.rglob("*.py")):
        rel = p.relative_to(PLANNER).as_posix()
        for node in ast.walk(_parsed(p)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = READER_ASSERTION_LISTS.get((rel, node.name), MAX_FUNCTION_LINES)
                if lines > limit:
                    over.append(f"planner/{rel}: {node.name}() is {lines} lines (limit {limit}); "
                                "decompose it")
    assert not over, "\n".join(over)


# ---- render/ and cli/ hold no arithmetic --------------------------------------------------------
# What "no arithmetic" means, checked on the AST of every module under planner/render/ and
# planner/cli/:
# 1. They import nothing from planner.engine, numpy, or the model modules (MODEL_MODULES).
# 2. No binary -, *, /, //, ** or % (nor -=, *=, /=, ...) with two non-constant operands. A
#    constant operand is a number literal, an expression of literals (2 ** 20), an UPPER_CASE
#    name (a named unit: GB, MIN) or len(...) (counting what is shown). So unit conversion for
#    display (x / 1e9, minutes * 60) passes; a string operand is formatting or a path join
#    ("%d" % n, folder / f"{name}.svg"). `+` is left out: here it joins strings and lists.
# 3. No sum() of anything but a count (sum(1 for ...)), and no math.ceil/floor/sqrt/log/exp/...
# Exceptions: the display helpers in FORMATTING_HELPERS (named, with why). Anything else the
# check finds belongs in the library (api/, a result model's property, engine/).
MODEL_MODULES = ("planner.engine", "planner.evaluation.evaluate", "planner.evaluation.memory", "planner.evaluation.timing",
                 "planner.evaluation.timing_terms", "planner.evaluation.candidates")
FORMATTING_HELPERS = {
    ("render/units.py", "gb"), ("render/units.py", "capacity"),   # bytes → GB/GiB for display
    ("render/units.py", "count"), ("render/units.py", "size"),
    ("render/gate.py", "_natural_width"),                         # a table's unwrapped width                                 # 7.1e10 → "71B"
    ("render/quick.py", "_size"), ("render/quick.py", "_rate"),   # bytes, B/s → a unit that fits
    ("render/evidence.py", "_size"),                              # bytes → a unit that fits
    ("render/terminal.py", "_bar"),                               # bar length in characters
    ("render/terminal.py", "_widths"),                            # column widths to the terminal
    ("render/terminal.py", "_rich_table"),                        # room left for the bars column
    ("render/charts.py", "pipeline_chart"),                       # block positions in the figure
}
MATH_ARITHMETIC = {"ceil", "floor", "sqrt", "log", "log2", "log10", "exp", "prod", "fsum", "pow"}
ARITH_OPS = (ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod)


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return True
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    return False


def _arithmetic(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ARITH_OPS):
        if any(isinstance(x, ast.JoinedStr) or (isinstance(x, ast.Constant)
                                                 and isinstance(x.value, str))
               for x in (node.left, node.right)):
            return False          # "%d" % n formats, path / "name.svg" joins a path
        return not (_constant(node.left) or _constant(node.right))
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ARITH_OPS):
        return not _constant(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "sum":
            arg = node.args[0] if node.args else None
            return not (isinstance(arg, ast.GeneratorExp) and _constant(arg.elt))
        return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                and f.value.id == "math" and f.attr in MATH_ARITHMETIC)
    return False


def _functions_of(tree: ast.AST) -> dict[int, str]:
    """id(node) → the innermost enclosing function's name."""
    owner: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            owner[id(child)] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def _presentation_modules() -> list[tuple[str, str, Path]]:
    return [(m, p.relative_to(PLANNER).as_posix(), p) for m, p in sorted(_modules().items())
            if m.split(".")[1:2] in (["render"], ["cli"])]


def test_render_and_cli_import_no_model():
    bad = []
    for module, rel, path in _presentation_modules():
        for name in _imports(module, path):
            if name.split(".")[0] == "numpy" or any(name == m or name.startswith(m + ".")
                                                     for m in MODEL_MODULES):
                bad.append(f"planner/{rel} imports {name}: render/ and cli/ call planner.api "
                           "and format its results")
    assert not bad, "\n".join(sorted(set(bad)))


def test_render_and_cli_hold_no_arithmetic():
    bad = []
    for _module, rel, path in _presentation_modules():
        tree = _parsed(path)
        owner = _functions_of(tree)
        for node in ast.walk(tree):
            fn = owner.get(id(node), "<module>")
            if _arithmetic(node) and (rel, fn) not in FORMATTING_HELPERS:
                bad.append(f"planner/{rel}:{node.lineno} in {fn}(): {ast.unparse(node)[:70]} — "
                           "compute it in the library (api, a result's property, engine/); "
                           "display-only arithmetic goes in FORMATTING_HELPERS, named")
    assert not bad, "\n".join(bad)


def test_the_arithmetic_check_sees_arithmetic():
    """The check itself: what it flags and what it lets through."""
    flagged = ["a / b", "x.tokens_per_s * n", "(a - b) / c", "sum(r.count for r in x)",
               "math.ceil(a / b)", "100 * v / step"]
    allowed = ["x / 1e9", "t * 60", "n / GB", "x / 2 ** 20", "'%d' % n", "len(a) - n",
               "folder / f'{name}.svg'",
               "sum(1 for v in xs if v)", "a + b", "-x"]
    for text in flagged:
        assert any(_arithmetic(n) for n in ast.walk(ast.parse(text))), text
    for text in allowed:
        assert not any(_arithmetic(n) for n in ast.walk(ast.parse(text))), text
