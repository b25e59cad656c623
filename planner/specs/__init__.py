"""Pydantic models of what a question is made of (no arithmetic, no I/O beyond loading)."""
