"""The DynamicRubric evaluator on a real model: generate rubrics, verify, calibrate, score sets."""
