"""Real models, servers (HTTP, S3, Prefect) and clusters. Marked ``integration`` by folder (tests/conftest.py)."""
