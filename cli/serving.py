"""``dr serve``: the evaluator over HTTP for any RL trainer (logic in dr_core/service/; README "Reward service").

dr serve --preset tiny --store ./store --port 8321
"""

from __future__ import annotations

from pathlib import Path

import typer

from cli.options import STORE_HELP
from cli.output import fail, log

_ENGINES_HELP = "engines file (YAML/JSON; its generator and verifier roles are used); default: the --preset's engines"
_PRESET_HELP = (
    "whose engines serve when no --engines is given: tiny "
    "(SmolLM2-135M generator, Qwen2.5-Coder-0.5B verifier, on CPU) or paper"
)
_TOKEN_HELP = "file whose first line is the bearer token every request but /health and /ready must send (never logged)"


def serve(
    engines: Path = typer.Option(None, "--engines", "--config", help=_ENGINES_HELP),
    preset: str = typer.Option("tiny", "--preset", help=_PRESET_HELP),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (127.0.0.1: this machine only)"),
    port: int = typer.Option(8321, "--port", help="TCP port"),
    token_file: Path = typer.Option(None, "--token-file", help=_TOKEN_HELP),
    run_id: str = typer.Option("service", "--run-id", help="run_id of the lineage rows (one service per run id)"),
    group_size: int = typer.Option(4, "--group-size", help="/get_reward (OpenRLHF): responses per prompt in a set"),
    group_timeout: float = typer.Option(
        120.0, "--group-timeout", help="seconds a group may wait for its last member before every member gets 504"
    ),
    rubric_rollouts: int = typer.Option(
        1, "--rubric-rollouts", help="rubrics per set for /v1/rewards and /get_reward (rewards are the mean score)"
    ),
    max_batch_sets: int = typer.Option(32, "--max-batch-sets", help="most sets in one engine batch"),
    batch_wait_ms: float = typer.Option(20.0, "--batch-wait-ms", help="how long a batch waits for more sets"),
    max_body_bytes: int = typer.Option(1_048_576, "--max-body-bytes", help="largest request body (413 above)"),
    access_log: bool = typer.Option(False, "--access-log", help="log every request line (never headers)"),
) -> None:
    """Serve the evaluator over HTTP: set-level DynamicRubric rewards for any RL trainer (README "Reward service").

    Routes: POST /v1/score-set, POST /v1/rewards (per sample, collected by group id), POST /get_reward (OpenRLHF
    --remote_rm_url), GET /health, /ready, /metrics. Every scored set is written to the store under stage
    'service'; `dr query why_reward -p request_id=...` says why a response got its reward.
    """
    from dr_core.config.service import ServiceSettings
    from dr_core.service.server import serve as run_service

    settings = ServiceSettings(
        run_id=run_id,
        group_size=group_size,
        group_timeout_s=group_timeout,
        rubric_rollouts=rubric_rollouts,
        max_batch_sets=max_batch_sets,
        batch_wait_s=batch_wait_ms / 1000.0,
        max_body_bytes=max_body_bytes,
    )
    config = _engines_config(engines, preset)
    code = run_service(
        config, store, settings, host=host, port=port, token_file=token_file, log=log, access_log=access_log
    )
    if code:
        raise typer.Exit(code)


def _engines_config(engines: Path | None, preset: str):
    """The engines file's config, or else the preset's engines (a preset that does not exist is one error line)."""
    from dr_core.config import PRESET_NAMES, load_engines_config
    from dr_core.config import preset as round_preset

    if engines is None and preset not in PRESET_NAMES:
        fail(f"--preset must be one of {', '.join(PRESET_NAMES)}, got {preset!r}")
    return load_engines_config(engines) if engines is not None else round_preset(preset).engines
