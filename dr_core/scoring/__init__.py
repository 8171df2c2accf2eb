"""Equations and metrics of the paper: pure numpy, no model, no I/O (the property tests' target)."""
