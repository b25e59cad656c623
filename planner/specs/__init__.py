"""Pydantic models of what a user states: budgets (and, as they move here, model, hardware, layout)."""
