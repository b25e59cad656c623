"""Plain value types: the specs and results the fit path builds, as plain classes without pydantic.

Importing pydantic's BaseModel costs more than the rest of ``dtplan fit`` (issue #15, must-show
3), so the values the search reads and the results it returns are plain keyword-only classes
(``record``: the annotations are the fields, as a dataclass's) with the small API the code
uses: attributes, ``model_copy(update=...)`` and ``model_dump()`` (named as pydantic's, so a
caller needs no change). Construction does not validate: trusted data (our profiles,
presets, the search's own numbers) is taken as given, with the light coercions pydantic made
(an int in a float field is a float, a numpy integer an int, a list in a tuple field a tuple).

Untrusted data is validated at the boundary: ``Cls.model_validate(data)`` builds (once, lazily)
a pydantic model derived from the class — same name, docstring, config, field types,
defaults and constraints (``spec(..., ge=0, description=...)``, the field's metadata) — runs it
and returns the plain value; ``Cls.model_json_schema()`` is that model's schema. A constraint is
declared once, on the class's field.

Hooks a class may define: ``_before(data)`` (a classmethod: input rewriting before
validation), ``_after(obj)`` (raise ValueError on a cross-field rule; runs once: on the boundary
model for validated data, in ``__post_init__`` for a trusted construction), ``_field_checks`` ({field: function(value) -> value}).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, ClassVar, Optional, TypeVar

T = TypeVar("T")
_MISSING = dataclasses.MISSING
_FACTORY = object()   # a field whose value its factory makes (see Plain._template)
# Field-metadata keys pydantic's Field takes (the rest are ours: default_shown, required).
_FIELD_ARGS = frozenset({"ge", "gt", "le", "lt", "description", "min_length", "max_length"})


class Field:
    """One field of a plain class: its name, default (or factory) and metadata (constraints,
    description, our keys)."""

    __slots__ = ("name", "default", "default_factory", "metadata", "kind")

    def __init__(self, default: Any = _MISSING, factory: Optional[Callable[[], Any]] = None,
                 metadata: Optional[dict] = None, name: str = "") -> None:
        self.name, self.default, self.default_factory = name, default, factory or _MISSING
        self.metadata = metadata or {}
        self.kind: Optional[str] = None   # the coercion construction applies (see _kind)


def spec(default: Any = _MISSING, *, factory: Optional[Callable[[], Any]] = None,
         default_shown: bool = False, required: bool = False, internal: bool = False,
         **meta: Any) -> Any:
    """A field with its constraints (pydantic Field keywords) in its metadata. ``factory``: a
    mutable default; ``default_shown``: the schema states the factory's value as the default (a
    literal ``[]`` before) rather than a factory; ``required``: the boundary requires it although
    the class fills it in (``_after``); ``internal``: a value the object keeps for the code that
    made it, never input or output: not dumped, compared or shown, not in the boundary model
    (so not in the schema), its default on a validated value."""
    return Field(default, factory, {**meta, "default_shown": default_shown, "required": required,
                                    "internal": internal})


def fields(cls: type) -> tuple[Field, ...]:
    """A plain class's fields in declaration order."""
    return cls._fields


class Plain:
    """Base of the plain value types (see the module docstring). ``record`` makes a subclass's
    annotations its fields; no code is generated per class (dataclasses' exec of __init__,
    __eq__, __repr__... costs ~0.5 ms a class, most of this package's import time)."""

    _config: ClassVar[dict] = {}
    _fields: ClassVar[tuple[Field, ...]] = ()
    _names: ClassVar[tuple[str, ...]] = ()
    _shown: ClassVar[tuple[str, ...]] = ()    # the fields not internal: dumped, compared, shown
    # every field → its default (_MISSING: required, _FACTORY: its factory makes one), in order
    _template: ClassVar[dict[str, Any]] = {}
    _required: ClassVar[tuple[str, ...]] = ()
    _factories: ClassVar[tuple[tuple[str, Callable[[], Any]], ...]] = ()
    _frozen: ClassVar[bool] = False
    _coerce: ClassVar[tuple[tuple[str, str], ...]] = ()
    _positional: ClassVar[int] = 0   # how many leading fields may be passed by position

    def __init__(self, *args: Any, **kw: Any) -> None:
        if args:
            kw = self._by_position(args, kw)
        cls = type(self)
        # one dict merge in field order (the constructor runs ~500 times in a `fit`)
        values = {**cls._template, **kw}
        for name in cls._required:
            if values[name] is _MISSING:
                raise TypeError(f"{cls.__name__}() missing keyword argument {name!r}")
        if len(values) != len(cls._template):
            extra = sorted(set(kw) - set(cls._names))
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {extra[0]!r}")
        object.__setattr__(self, "__dict__", _made(cls, values))   # its fields, no more
        self.__post_init__()

    def _by_position(self, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
        """The positional arguments as keywords, in field order (as a dataclass takes them)."""
        cls = type(self)
        if len(args) > cls._positional:
            raise TypeError(f"{cls.__name__}() takes {cls._positional} positional arguments "
                            f"but {len(args)} were given")
        named = dict(zip(cls._names, args))
        twice = sorted(set(named) & set(kw))
        if twice:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {twice[0]!r}")
        return {**named, **kw}

    def __post_init__(self) -> None:
        self._coerced()
        after = getattr(type(self), "_after", None)
        if after is not None:
            after(self)

    def _coerced(self) -> None:
        """The light coercions construction applies (see the module docstring), in place."""
        for name, kind in type(self)._coerce:
            v = getattr(self, name)
            if v is None:
                continue
            w = _COERCE[kind](v)
            if w is not v:
                object.__setattr__(self, name, w)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._shown)

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def _hash(self) -> int:
        return hash((type(self),) + self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._shown)
        return f"{type(self).__name__}({shown})"

    def model_dump(self, *, exclude: Optional[set[str] | frozenset[str]] = None) -> dict[str, Any]:
        """The fields in declaration order as dicts, lists and scalars (nested values too)."""
        return {n: _dump(getattr(self, n)) for n in type(self)._shown
                if not exclude or n not in exclude}

    def model_copy(self: T, *, update: Optional[dict[str, Any]] = None) -> T:
        """A copy with some fields replaced (not validated, as pydantic's model_copy)."""
        return type(self)(**{**{n: getattr(self, n) for n in self._names}, **(update or {})})

    @classmethod
    def model_validate(cls: type[T], data: Any) -> T:
        """`data` validated by the boundary model (pydantic ValidationError on bad input)."""
        return _to_plain(cls, boundary_model(cls).model_validate(data))

    @classmethod
    def model_json_schema(cls, **kw: Any) -> dict[str, Any]:
        """The boundary model's JSON Schema (the one the pydantic model had)."""
        return boundary_model(cls).model_json_schema(**kw)


def record(cls: Optional[type] = None, *, frozen: bool = False,
           config: Optional[dict] = None, positional: bool = False, coerce: bool = True) -> Any:
    """The class's annotations as its keyword-only fields (after its bases' fields); frozen:
    immutable and hashable; `config`: the boundary model's pydantic config (extra="forbid");
    `positional`: the fields may also be passed by position, in order (a dataclass's
    signature); `coerce`: False keeps every value as given (no int-to-float and the like)."""
    def wrap(c: type) -> type:
        own = []
        for name, ann in c.__dict__.get("__annotations__", {}).items():
            if "ClassVar" in str(ann):
                continue
            value = c.__dict__.get(name, _MISSING)
            f = value if isinstance(value, Field) else Field(value)
            f.name, f.kind = name, _kind(ann)
            if isinstance(value, Field):   # the instance holds the value; no class attribute
                delattr(c, name)
            own.append(f)
        base = next((b for b in c.__mro__[1:] if "_fields" in b.__dict__), Plain)
        mine = {f.name for f in own}
        c._fields = tuple(f for f in base._fields if f.name not in mine) + tuple(own)
        c._names = tuple(f.name for f in c._fields)
        c._shown = tuple(f.name for f in c._fields if not f.metadata.get("internal"))
        c._template = {f.name: f.default if f.default is not _MISSING else
                       _FACTORY if f.default_factory is not _MISSING else _MISSING
                       for f in c._fields}
        c._required = tuple(n for n, d in c._template.items() if d is _MISSING)
        c._factories = tuple((f.name, f.default_factory) for f in c._fields
                             if c._template[f.name] is _FACTORY)
        c._coerce = tuple((f.name, f.kind) for f in c._fields if f.kind) if coerce else ()
        c._positional = len(c._fields) if positional else 0
        c._frozen, c._config = frozen, dict(config or {})
        c.__hash__ = Plain._hash if frozen else None  # type: ignore[assignment]
        return c
    return wrap(cls) if cls is not None else wrap


def replace(obj: T, **changes: Any) -> T:
    """A copy of a plain value with some fields changed, as dataclasses.replace."""
    return obj.model_copy(update=changes)  # type: ignore[attr-defined]


def _int(v: Any) -> Any:
    return v if type(v) is int or isinstance(v, bool) else int(v)


def _float(v: Any) -> Any:
    return v if type(v) is float or isinstance(v, bool) else float(v)


def _tuple(v: Any) -> Any:
    return v if type(v) is tuple else tuple(v)


def _float_map(v: Any) -> Any:
    if all(type(x) is float for x in v.values()):
        return v
    return {k: float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x
            for k, x in v.items()}


_COERCE: dict[str, Callable[[Any], Any]] = {"int": _int, "float": _float, "tuple": _tuple,
                                            "float_map": _float_map}


def _kind_text(text: str) -> Optional[str]:
    """_kind of an annotation written as text (``from __future__ import annotations``), read
    without evaluating it: evaluating every field's annotation (typing.get_type_hints) costs ~8
    ms over the fit path's classes. tests/test_plain_values.py checks it against _kind."""
    t = text.replace(" ", "")
    if t.startswith("Optional[") and t.endswith("]"):
        t = t[len("Optional["):-1]
    parts = [p for p in t.split("|") if p != "None"]
    t = parts[0] if len(parts) == 1 else t
    if t.startswith(("tuple[", "Tuple[")):
        return "tuple"
    return {"int": "int", "float": "float", "dict[str,float]": "float_map"}.get(t)


_TEXT_KINDS: dict[str, Optional[str]] = {}


def _kind(tp: Any) -> Optional[str]:
    """Which coercion a field's type gets (Optional[X] as X), or None."""
    if isinstance(tp, str):   # the same few texts recur over ~50 classes: read each once
        if tp not in _TEXT_KINDS:
            _TEXT_KINDS[tp] = _kind_text(tp)
        return _TEXT_KINDS[tp]
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if _is_union(tp) and len(args) == 1:
        tp = args[0]
    if tp is int:
        return "int"
    if tp is float:
        return "float"
    origin = typing.get_origin(tp)
    if origin is tuple:
        return "tuple"
    if origin is dict and typing.get_args(tp)[1:] == (float,):
        return "float_map"
    return None


def _walk(v: Any, leaf: Callable[[Any], Any]) -> Any:
    """`v` with `leaf` applied to each value inside its lists, tuples and dicts."""
    t = type(v)
    if t is list:
        return [_walk(x, leaf) for x in v]
    if t is tuple:
        return tuple(_walk(x, leaf) for x in v)
    if t is dict:
        return {k: _walk(x, leaf) for k, x in v.items()}
    return leaf(v)


def _dump_leaf(v: Any) -> Any:
    return v.model_dump() if isinstance(v, Plain) else v


def _dump(v: Any) -> Any:
    return _walk(v, _dump_leaf)


def field_descriptions(cls: type) -> dict[str, str]:
    """Each field's description (its metadata), in declaration order."""
    return {f.name: f.metadata.get("description", "") or "" for f in cls._fields}


# ---- the boundary: a pydantic model derived from the class ----------------------------------

_MODELS: dict[type, Any] = {}
_PLAIN_OF: dict[Any, type] = {}


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _mirror_type(tp: Any) -> Any:
    """The annotation with each plain class replaced by its boundary model."""
    if isinstance(tp, type) and issubclass(tp, Plain):
        return boundary_model(tp)
    args = typing.get_args(tp)
    if not args or typing.get_origin(tp) is typing.Literal:
        return tp
    new = tuple(_mirror_type(a) if a is not Ellipsis else a for a in args)
    if new == args:
        return tp
    if _is_union(tp):
        return typing.Union[new]
    return typing.get_origin(tp)[new]


def _mirror_value(v: Any) -> Any:
    """A default as the boundary model holds it (a plain value as its model's instance)."""
    if isinstance(v, Plain):
        return boundary_model(type(v))(**{n: _mirror_value(getattr(v, n)) for n in v._shown})
    return v


def boundary_model(cls: type) -> Any:
    """The pydantic model of a plain class: same name, docstring, config, fields, validators."""
    if cls in _MODELS:
        return _MODELS[cls]
    from pydantic import ConfigDict, create_model, field_validator, model_validator
    from pydantic import Field as Declared

    hints = typing.get_type_hints(cls)
    declared: dict[str, Any] = {}
    for f in cls._fields:
        if f.metadata.get("internal"):   # never input or output: not part of the model
            continue
        kw = {k: x for k, x in f.metadata.items() if k in _FIELD_ARGS}
        if f.metadata.get("required"):
            info = Declared(..., **kw)
        elif f.default is not _MISSING:
            info = Declared(_mirror_value(f.default), **kw)
        elif f.default_factory is not _MISSING and f.metadata.get("default_shown"):
            info = Declared(_mirror_value(f.default_factory()), **kw)
        elif f.default_factory is not _MISSING:
            info = Declared(default_factory=f.default_factory, **kw)
        else:
            info = Declared(..., **kw)
        declared[f.name] = (_mirror_type(hints[f.name]), info)
    validators: dict[str, Any] = {}
    before, after = getattr(cls, "_before", None), getattr(cls, "_after", None)
    if before is not None:
        validators["_before"] = model_validator(mode="before")(classmethod(
            lambda _c, data: before(data)))
    if after is not None:
        def _after_check(self: Any) -> Any:
            after(self)
            return self
        validators["_after"] = model_validator(mode="after")(_after_check)
    for name, check in getattr(cls, "_field_checks", {}).items():
        validators[f"_check_{name}"] = field_validator(name)(classmethod(
            lambda _c, value, _f=check: _f(value)))
    config = ConfigDict(**cls._config) if cls._config else None
    model = create_model(cls.__name__, __config__=config,
                         __doc__=cls.__dict__.get("__doc__"), __module__=cls.__module__,
                         __validators__=validators, **declared)
    _MODELS[cls], _PLAIN_OF[model] = model, cls
    return model


def _made(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` (every field, in order) with each factory-made default made."""
    for name, factory in cls._factories:
        if values[name] is _FACTORY:
            values[name] = factory()
    return values


def _to_plain(cls: type, obj: Any) -> Any:
    """A validated boundary-model instance as its plain class (nested values too), built
    without running ``_after`` again: the boundary model ran the cross-field rules on these
    very values (and ``_before`` filled what ``_after`` would)."""
    def leaf(v: Any) -> Any:
        return _to_plain(_PLAIN_OF[type(v)], v) if type(v) in _PLAIN_OF else v
    out = object.__new__(cls)
    values = {**cls._template, **{n: _walk(getattr(obj, n), leaf) for n in cls._shown}}
    object.__setattr__(out, "__dict__", _made(cls, values))   # internal fields: defaults
    out._coerced()
    return out
