"""Moved to ``planner.inputs.resolve`` (the one resolver); these names stay importable from here
for code written against the old module while branches merge."""

from .inputs.resolve import (DEFAULT_SEQ_LEN, DEFAULT_TOKENS_PER_BATCH, resolve_batch,  # noqa: F401
                             resolve_hardware, resolve_model, sequences_for_tokens)
