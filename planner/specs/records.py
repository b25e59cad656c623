"""What the records (standard dataclasses) need beside the dataclass: their JSON-ready dump, and
the boundary where untrusted input becomes one.

A record is a ``@dataclass``; its fields' constraints and descriptions are pydantic ``Field``
metadata in the annotation (``Annotated[int, Field(ge=1, description=...)]``) and its pydantic
config a ``__pydantic_config__`` class attribute (``extra="forbid"``: an unknown key is an
error). Construction does not validate: our own data (profiles, presets, the search's numbers)
is taken as given. Untrusted input goes through ``validate`` (pydantic's ``TypeAdapter`` over
the dataclass), which returns the record itself.

A field whose metadata holds ``INTERNAL`` is a value the record keeps for the code that made it,
never output: ``dump`` leaves it out (and its annotation keeps it out of the JSON Schema).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Collection, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter

T = TypeVar("T")
INTERNAL = {"internal": True}
# The pydantic config of a record read from untrusted input: an unknown key is an error.
FORBID: dict[str, Any] = {"extra": "forbid"}


def dump(obj: Any, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """A record's fields in declaration order as dicts, lists and scalars (nested records too),
    less its internal fields and `exclude`: ``dataclasses.asdict`` without the internal fields
    (which it cannot leave out) and without a deep copy of every value."""
    return {f.name: _dumped(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if f.name not in exclude and not f.metadata.get("internal")}


def _dumped(v: Any) -> Any:
    t = type(v)
    if t is list:
        return [_dumped(x) for x in v]
    if t is tuple:
        return tuple(_dumped(x) for x in v)
    if t is dict:
        return {k: _dumped(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dump(v)
    return v


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(cls: Any) -> TypeAdapter[Any]:
    """pydantic's TypeAdapter of a record (or of an annotated record type), built once: ~10-50
    ms a class, so only where untrusted input is read or a schema printed."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def validate(cls: type[T], data: Any) -> T:
    """`data` validated into the record `cls` (pydantic.ValidationError on bad input)."""
    return adapter(cls).validate_python(data)


def json_schema(cls: Any, **kw: Any) -> dict[str, Any]:
    """The JSON Schema of a record (pydantic's, from its annotations and config), described by
    the record's docstring (pydantic before 2.13 leaves a dataclass's docstring out)."""
    schema = adapter(cls).json_schema(**kw)
    doc = cls.__doc__ or ""
    # (a dataclass without one has its signature there, which pydantic leaves out too)
    if doc and not doc.startswith(f"{cls.__name__}(") and "description" not in schema:
        schema["description"] = inspect.cleandoc(doc)
    return schema


def descriptions(cls: type) -> dict[str, str]:
    """Each field's description (its pydantic Field metadata, "" where it has none), in order."""
    import typing
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        meta = getattr(hints[f.name], "__metadata__", ())
        out[f.name] = next((m.description for m in meta if getattr(m, "description", None)), "")
    return out
