"""Artifacts: table schemas, the Parquet store, named queries, checkpoints and the one atomic writer.

The only code that touches fsspec/s3fs or DuckDB."""
