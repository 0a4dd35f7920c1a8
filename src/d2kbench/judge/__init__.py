"""LLM judges: design-only mode, the design and implementation judges, and their calibration (docs/judge.md)."""
