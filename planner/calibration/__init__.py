"""How far to trust the model: published runs, the user's measured artifacts, fitted constants."""
