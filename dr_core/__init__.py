"""dr_core: the framework-free core of dynamicrubric (no Prefect here; a test enforces it)."""

__version__ = "0.1.0"
