"""The bounded YAML reader of planner.io.parse, apart so that PyYAML (~20 ms to import)
is loaded only when YAML text is read."""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from planner.io.bounds import (MAX_ALIASES, MAX_DEPTH, MAX_NODES, Refused, YamlSyntax, YamlWord, _Bad,
                    int_bound_reason)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs and deep nesting while composing, before any
    expansion: it counts alias uses, nodes (an alias counts as the size of its target) and depth.
    Integers and floats that break a bound become _Bad markers carrying their line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise Refused(f"more than {MAX_ALIASES} YAML aliases (alias bomb?)")
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            self._nodes += self._sizes.get(id(target), 1)
            if self._nodes > MAX_NODES:
                raise Refused(f"YAML expands to more than {MAX_NODES} nodes (alias bomb?)")
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH} levels")
        before = self._nodes
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise Refused(f"more than {MAX_NODES} YAML nodes")
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._nodes - before
        self._depth -= 1
        return node

    def construct_yaml_int(self, node: Any) -> Any:
        # YAML 1.1 reads 4:16 as 256 (base 60), 0x8 and 010 in bases 16 and 8: a number is
        # decimal here, as on the command line (inputs.numbers) and in YAML 1.2
        if _NOT_DECIMAL.match(node.value):
            return _Bad("must be a decimal number (as YAML 1.2 reads it), got "
                        f"{node.value!r}", node.value, node.start_mark.line + 1)
        reason = int_bound_reason(node.value)
        if reason:
            return _Bad(reason, node.value, node.start_mark.line + 1)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Any) -> Any:
        x = super().construct_yaml_float(node)
        return x if math.isfinite(x) else _Bad("must be a finite number", node.value,
                                               node.start_mark.line + 1)


    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping whose keys are each given once: a second `gpus:` is refused with its line
        (PyYAML keeps the last one silently)."""
        seen: set[str | None] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen and key != "<<":
                raise Refused(f"{key}: given twice", key_node.start_mark.line + 1, label="")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# A YAML 1.1 integer that is not plain decimal: base 60 (4:16), 16 (0x8), 2 (0b1), 8 (010).
_NOT_DECIMAL = re.compile(r"^[-+]?(?:[0-9_]*:[0-9_:]*|0[xXbB][0-9a-fA-F_]*|0[0-9_]+)$")


def _construct_bool(loader: "_BoundedLoader", node: Any) -> Any:
    """true / false are booleans (YAML 1.2); the 1.1 words stay YamlWord until a schema says."""
    if node.value.lower() in ("true", "false"):
        return node.value.lower() == "true"
    return YamlWord(node.value)


_BoundedLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)
# YAML 1.2 (and JSON) floats without a dot, 5e4 and 1e-3, which YAML 1.1 reads as strings.
_BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """One YAML document through the bounded loader; a syntax error becomes YamlSyntax."""
    try:
        loader = _BoundedLoader(text)   # PyYAML's reader refuses control characters here
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise YamlSyntax(f" at line {line} column {column}: control character "
                         f"U+{e.character if isinstance(e.character, int) else 0:04X} is not "
                         "allowed in YAML (remove it, or write it as an escape in a quoted "
                         "string)") from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise YamlSyntax(f"{at}: {problem}") from None
    finally:
        loader.dispose()
