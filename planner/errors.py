"""Errors meant for people: one line naming the field and what is allowed."""

from __future__ import annotations


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

    def run(self, fn, *args, **kwargs):
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
