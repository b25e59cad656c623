"""Errors meant for people: one line naming the field and what is allowed.

A library function names a bad input by its own parameter (``gpus``, ``train_tokens``); the
code that took the value from a person says how that person named it — the CLI its option
(``--gpus``), a plan reader its key (``layout.tp``) — by setting the naming (``naming`` /
``renamed``) around the library calls it makes. Every check reads it through ``name_of`` /
``named``, so the same check speaks to a notebook, a command line and a plan file.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, ContextManager, Iterator, NamedTuple, TypeVar

T = TypeVar("T")


class Name(NamedTuple):
    """A value as the person who gave it names it: ``label`` (a parameter, an option, a key
    path) and the unit they gave it in (``scale`` base units per unit shown, so 60 for minutes
    of seconds; ``unit`` said after a range, as "GB")."""

    label: str
    scale: float = 1.0
    unit: str = ""


Naming = Callable[[str], Name]   # a library parameter's name → how it is shown

# The naming in force: by default a parameter is named as itself (a library call).
_NAMING: ContextVar[Naming] = ContextVar("naming", default=Name)


def name_of(param: str) -> Name:
    """How ``param`` is shown where it was given. A label that names no parameter (``--gpus``,
    ``plan.yaml: layout.tp``) is shown as it is."""
    return _NAMING.get()(param)


def named(param: str) -> str:
    """``param``'s label where it was given (``gpus`` in a library call, ``--gpus`` in the CLI)."""
    return name_of(param).label


@contextmanager
def naming(names: Naming) -> Iterator[None]:
    """Inside the block, parameters are named as ``names`` says (set by the code that took the
    values from a person around the library calls it makes)."""
    token = _NAMING.set(names)
    try:
        yield
    finally:
        _NAMING.reset(token)


def renamed(**names: str) -> ContextManager[None]:
    """Inside the block, the parameter ``p`` is named as the naming in force names
    ``names[p]``: for one call whose argument its caller holds under another name
    (``renamed(name="model")`` around ``get_preset(model)``)."""
    outer = _NAMING.get()
    return naming(lambda p: outer(names.get(p, p)))


def keyed(key: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, its InputError relabelled ``key``: one call whose inputs all came from
    the one place its caller names (a plan key, an engine flag at file:line)."""
    try:
        return fn(*args)
    except InputError as e:
        raise InputError(key, e.message) from None


class InputError(ValueError):
    """Bad input. The CLI prints ``dtplan: error: <field>: <message>`` and exits 2."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


# pydantic words two errors of a record (a dataclass) otherwise than a model's; people read the
# words they always have (the boundary validated pydantic models before it validated records)
_WORDS = {"unexpected_keyword_argument": "Extra inputs are not permitted",
          "dataclass_type": "Input should be a valid dictionary or instance of {class_name}"}


def validation_message(e: Exception) -> str:
    """One line from a pydantic ValidationError (first error: where and what), or str(e)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        words = _WORDS.get(first.get("type", ""))
        msg = words.format(**first.get("ctx", {})) if words else \
            str(first.get("msg", "")).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(e).splitlines()[0] if str(e) else type(e).__name__


class InputErrors(InputError):
    """Several bad inputs found in one pass, reported together (one line each, exit 2), so a
    user fixes them all at once rather than one rerun per missing option."""

    def __init__(self, errors: list[InputError]):
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.field, first.message)

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]

    def __str__(self) -> str:
        return "; ".join(self.lines())


class Problems:
    """Collects InputErrors while a job is resolved; ``check()`` raises them all at once."""

    def __init__(self) -> None:
        self.errors: list[InputError] = []

    def add(self, field: str, message: str) -> None:
        self.errors.append(InputError(field, message))

    def take(self, e: InputError) -> None:
        self.errors.extend(e.errors if isinstance(e, InputErrors) else [e])

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """fn(*args, **kwargs), or None with its InputError(s) recorded."""
        try:
            return fn(*args, **kwargs)
        except InputError as e:
            self.take(e)
            return None

    def check(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise InputErrors(self.errors)
