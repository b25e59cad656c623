"""Pydantic models of what a user states: model, hardware, layout, budgets, framework profiles."""
