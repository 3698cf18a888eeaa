"""The repository's own tools: run from its root (`python -m tools...`), not shipped in the `verl` package."""
