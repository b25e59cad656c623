"""The usage examples in the library's docstrings run as written (issue #12: the package
docstring's example once raised TypeError)."""

from __future__ import annotations

import textwrap

import pytest

import planner
import planner.api


def _example(doc: str) -> str:
    """The first indented block of a docstring: the lines from `import planner` on."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "import planner")
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


@pytest.mark.parametrize("module", [planner, planner.api], ids=["planner", "planner.api"])
def test_docstring_example_runs(module):
    code = _example(module.__doc__)
    assert "planner.fit(" in code
    scope: dict = {}
    exec(compile(code, f"{module.__name__} docstring", "exec"), scope)
    names = [n for n in ("est", "best") if n in scope]
    assert names, "the example binds no result"
    if "est" in scope:
        assert scope["est"].step_time_s > 0 and scope["est"].layout == scope["best"]


def test_every_public_name_resolves():
    """`planner.__all__` names what the package offers; each lazy name imports."""
    assert planner.__all__ == planner.api.__all__
    for name in planner.__all__:
        assert getattr(planner, name) is not None, name
