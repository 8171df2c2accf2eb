"""Help texts that several commands' options share (each says the same thing wherever the option appears)."""

from __future__ import annotations

#: ``--store`` of the store, evaluator and service commands.
STORE_HELP = "store URL: a local directory or s3://bucket/prefix (S3 endpoint/keys from AWS_* variables)"
#: ``--store`` of the Prefect-run commands and ``dr report``.
ARTIFACT_STORE_HELP = "Artifact store: path or s3://bucket/prefix."
CREATE_BUCKET_HELP = "s3:// store: create the bucket if it does not exist (otherwise a missing bucket is an error)"
RUNNER_HELP = (
    "Task runner of the model steps: thread (this process), ray (a Ray cluster started for the run, or "
    "$RAY_ADDRESS), or ray://HOST:PORT (an existing cluster through Ray Client). Ray runs the shards "
    "with each role's scale.resources."
)
SHARDS_HELP = "Split the model steps into this many shards by prompt (scale.shards; same rows, cached per shard)."
VERBOSE_HELP = (
    "Show every third-party log line (vLLM, torch, TRL, Prefect's task runs); by default the log is one "
    "line per step and progress bars."
)
