"""Help texts that several commands' options share (each says the same thing wherever the option appears), and the
resolution of the models options (``--preset``, ``--engines``) of every command that runs models."""

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
#: ``--preset`` of every command that runs models.
PRESET_HELP = (
    "whose models run when no --engines is given: tiny (generator and policy SmolLM2-135M, verifier "
    "Qwen2.5-Coder-0.5B with plain prompt and balanced verdicts; CPU) or paper (GPU)"
)
#: ``--engines`` of every command that runs models (``--config``: its old name, hidden, still accepted).
ENGINES_HELP = "engines file (YAML/JSON, keys generator/verifier/policy) instead of the --preset's models"


def engines_file(engines, config_alias):
    """``--engines``, or its hidden old name ``--config``; both given is one error line."""
    if engines is not None and config_alias is not None:
        from cli.output import fail

        fail("give --engines once (--config is its old name)")
    return engines if engines is not None else config_alias


def command_roles(preset_name: str, engines):
    """(the models a command runs, where they come from): ``dr_core.config.presets.roles`` (the engines file's,
    else the preset's) and ``roles_source`` (``preset tiny``, ``engines file PATH``) for its models line, which the
    command logs once its input is checked (``presets.engines_line``). A bad preset or file is one error line."""
    from cli.output import fail
    from dr_core.config import ConfigError
    from dr_core.config.presets import roles, roles_source

    try:
        return roles(preset_name, engines), roles_source(preset_name, engines)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))


TRACK_HELP = (
    "Experiment tracking: mlflow logs the run (each GRPO update's steps, each round's figures) to MLFLOW_TRACKING_URI, "
    "or to <store>/mlflow/mlflow.db when it is unset; tensorboard writes event files to DR_TENSORBOARD_DIR or "
    "<store>/tensorboard; none logs nothing. A refused tracker is one warning."
)
WAIT_HELP = "If another process is writing this run (it holds the run's lease), wait until it ends instead of refusing."
