"""``dr serve``: the evaluator over HTTP for any RL trainer (logic in dr_core/service/; docs/how-to/reward-service.md).

dr serve --preset tiny --store ./store --port 8321
"""

from __future__ import annotations

from pathlib import Path

import typer

from cli import quiet
from cli.options import ENGINES_HELP, PRESET_HELP, STORE_HELP, VERBOSE_HELP, command_roles, engines_file
from cli.output import log

_TOKEN_HELP = "file whose first line is the bearer token every request but /health and /ready must send (never logged)"


def serve(
    engines: Path = typer.Option(None, "--engines", help=ENGINES_HELP + " (its generator and verifier serve)"),
    config: Path = typer.Option(None, "--config", hidden=True),
    preset: str = typer.Option("tiny", "--preset", help=PRESET_HELP),
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
    batching: str = typer.Option(
        "continuous",
        "--batching",
        help="continuous: each set is answered when its own checks are done (the engines batch concurrent sets "
        "continuously); coalesce: concurrent sets form one engine batch, answered together",
    ),
    max_batch_sets: int = typer.Option(
        32, "--max-batch-sets", help="most sets scored at once (continuous) or in one engine batch (coalesce)"
    ),
    batch_wait_ms: float = typer.Option(
        20.0, "--batch-wait-ms", help="coalesce: how long a batch waits for more sets after the first"
    ),
    max_body_bytes: int = typer.Option(1_048_576, "--max-body-bytes", help="largest request body (413 above)"),
    access_log: bool = typer.Option(False, "--access-log", help="log every request line (never headers)"),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Serve the evaluator over HTTP: set-level DynamicRubric rewards for any RL trainer (docs: reward service).

    Routes: POST /v1/score-set, POST /v1/rewards (per sample, collected by group id), POST /get_reward (OpenRLHF
    --remote_rm_url), GET /health, /ready, /metrics. Every scored set is written to the store under stage
    'service'; `dr query why_reward -p request_id=...` says why a response got its reward.
    """
    quiet.apply(verbose)  # before torch and vLLM load
    from dr_core.config.presets import engines_line
    from dr_core.config.service import ServiceSettings
    from dr_core.service.server import serve as run_service

    settings = ServiceSettings(
        run_id=run_id,
        group_size=group_size,
        group_timeout_s=group_timeout,
        rubric_rollouts=rubric_rollouts,
        batching=batching,
        max_batch_sets=max_batch_sets,
        batch_wait_s=batch_wait_ms / 1000.0,
        max_body_bytes=max_body_bytes,
    )
    roles, source = command_roles(preset, engines_file(engines, config))
    said = _after_checks(engines_line(roles, source, ("generator", "verifier")))
    code = run_service(
        roles, store, settings, host=host, port=port, token_file=token_file, log=said, access_log=access_log
    )
    if code:
        raise typer.Exit(code)


def _after_checks(models: str):
    """The service's ``log``, saying ``models`` (its models line) before its first line: the service logs nothing
    before its token, store and port are checked, so a bad start-up input stays one error line."""
    pending = [models]

    def said(message: str) -> None:
        while pending:
            log(pending.pop())
        log(message)

    return said
