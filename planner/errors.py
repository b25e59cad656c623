"""Errors meant for people: one line naming the field and what is allowed."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. The CLI prints ``dtplan: error: <field>: <message>`` and exits 2."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)
