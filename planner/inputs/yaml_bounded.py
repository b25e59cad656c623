"""The bounded YAML reader of planner.inputs.parse, apart so that PyYAML (~20 ms to import)
is loaded only when YAML text is read."""

from __future__ import annotations

import math
from typing import Any

import yaml

from .parse import (MAX_ALIASES, MAX_DEPTH, MAX_NODES, Refused, YamlSyntax, YamlWord, _Bad,
                    int_bound_reason)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs and deep nesting while composing, before any
    expansion: it counts alias uses, nodes (an alias counts as the size of its target) and depth.
    Integers and floats that break a bound become _Bad markers carrying their line."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
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

    def construct_yaml_int(self, node):
        reason = int_bound_reason(node.value.replace(":", ""))  # YAML 1.1 sexagesimal 1:30
        if reason:
            return _Bad(reason, node.value, node.start_mark.line + 1)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        x = super().construct_yaml_float(node)
        return x if math.isfinite(x) else _Bad("must be a finite number", node.value,
                                               node.start_mark.line + 1)


def _construct_bool(loader: "_BoundedLoader", node: Any) -> Any:
    """true / false are booleans (YAML 1.2); the 1.1 words stay YamlWord until a schema says."""
    if node.value.lower() in ("true", "false"):
        return node.value.lower() == "true"
    return YamlWord(node.value)


_BoundedLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


def load_yaml(text: str) -> Any:
    """One YAML document through the bounded loader; a syntax error becomes YamlSyntax."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise YamlSyntax(f"{at}: {problem}") from None
    finally:
        loader.dispose()
