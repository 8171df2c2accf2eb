"""The rubric: one pydantic model, its parser and JSON schema, and every prompt sent to a model."""
