"""The last users of the home-made record class: the CLI's option declarations (``cli.options.Opt``)
and the printed document (``render.document.Table``, ``Document``). Every other record is a
standard dataclass (``specs.records``); these go the same way with the CLI and the renderer,
and this module with them.

``record`` makes a class's annotations its fields (after its bases'): keyword construction
(``positional``: by position too), equality and repr over the fields, ``frozen`` (immutable,
hashable), ``model_copy(update=...)`` and ``replace``. Values are kept as given.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Optional, TypeVar

T = TypeVar("T")
_MISSING = dataclasses.MISSING


class Field:
    """One field: its name and default (or factory)."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, default: Any = _MISSING, factory: Optional[Callable[[], Any]] = None,
                 name: str = "") -> None:
        self.name, self.default, self.default_factory = name, default, factory


def spec(default: Any = _MISSING, *, factory: Optional[Callable[[], Any]] = None) -> Any:
    """A field with a default, or a factory for a mutable default."""
    return Field(default, factory)


class Plain:
    """Base of the record classes (see the module docstring)."""

    _fields: ClassVar[tuple[Field, ...]] = ()
    _names: ClassVar[tuple[str, ...]] = ()
    _frozen: ClassVar[bool] = False
    _positional: ClassVar[int] = 0   # how many leading fields may be passed by position

    def __init__(self, *args: Any, **kw: Any) -> None:
        cls = type(self)
        if len(args) > cls._positional:
            raise TypeError(f"{cls.__name__}() takes {cls._positional} positional arguments "
                            f"but {len(args)} were given")
        named = dict(zip(cls._names, args))
        twice = sorted(set(named) & set(kw))
        if twice:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {twice[0]!r}")
        kw = {**named, **kw}
        extra = sorted(set(kw) - set(cls._names))
        if extra:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {extra[0]!r}")
        values = {}
        for f in cls._fields:
            if f.name in kw:
                values[f.name] = kw[f.name]
            elif f.default_factory is not None:
                values[f.name] = f.default_factory()
            elif f.default is not _MISSING:
                values[f.name] = f.default
            else:
                raise TypeError(f"{cls.__name__}() missing keyword argument {f.name!r}")
        object.__setattr__(self, "__dict__", values)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._names)

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def _hash(self) -> int:
        return hash((type(self),) + self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names)
        return f"{type(self).__name__}({shown})"

    def model_copy(self: T, *, update: Optional[dict[str, Any]] = None) -> T:
        """A copy with some fields replaced."""
        return type(self)(**{**{n: getattr(self, n) for n in self._names},  # type: ignore[attr-defined]
                             **(update or {})})


def record(cls: Optional[type] = None, *, frozen: bool = False, positional: bool = False,
           coerce: bool = False) -> Any:
    """The class's annotations as its fields (after its bases' fields); `frozen`: immutable and
    hashable; `positional`: the fields may also be passed by position, in order. (`coerce` is
    accepted and ignored: values are kept as given.)"""
    def wrap(c: Any) -> Any:
        own = []
        for name, ann in c.__dict__.get("__annotations__", {}).items():
            if "ClassVar" in str(ann):
                continue
            value = c.__dict__.get(name, _MISSING)
            f = value if isinstance(value, Field) else Field(value)
            f.name = name
            if isinstance(value, Field):   # the instance holds the value; no class attribute
                delattr(c, name)
            own.append(f)
        base = next((b for b in c.__mro__[1:] if "_fields" in b.__dict__), Plain)
        mine = {f.name for f in own}
        c._fields = tuple(f for f in base._fields if f.name not in mine) + tuple(own)
        c._names = tuple(f.name for f in c._fields)
        c._positional = len(c._fields) if positional else 0
        c._frozen = frozen
        c.__hash__ = Plain._hash if frozen else None  # type: ignore[assignment]
        return c
    return wrap(cls) if cls is not None else wrap


def replace(obj: T, **changes: Any) -> T:
    """A copy of a record with some fields changed, as dataclasses.replace."""
    return obj.model_copy(update=changes)  # type: ignore[attr-defined]
