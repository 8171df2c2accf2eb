"""``dr serve``: the evaluator over HTTP for any RL trainer (logic in dr_core/service/; docs/how-to/reward-service.md).

dr serve --preset tiny --store ./store --port 8321
"""

from __future__ import annotations

from pathlib import Path

import typer

from cli import quiet
from cli.options import ENGINES_HELP, PRESET_HELP, STORE_HELP, VERBOSE_HELP, command_roles, engines_file
from cli.output import err_console, log, styled

#: the options' help, by option (one line per option in ``serve``'s signature)
_HELP = {
    "host": "address to listen on (127.0.0.1: this machine only; any other needs --token-file or --insecure-no-token)",
    "token-file": "file whose first line is the bearer token every request but /health and /ready must send (never "
    "logged); required when --host is not a loopback address, unless --insecure-no-token",
    "insecure-no-token": "serve a non-loopback --host without a token (OpenRLHF sends none): anyone who can connect "
    "can score; a warning on every start. Private networks only",
    "group-timeout": "seconds a group may wait for its last member before every member gets 504",
    "rubric-rollouts": "rubrics per set for /v1/rewards and /get_reward (rewards are the mean score)",
    "batching": "continuous: each set is answered when its own checks are done (the engines batch concurrent sets "
    "continuously); coalesce: concurrent sets form one engine batch, answered together",
    "max-batch-sets": "most sets scored at once (continuous) or in one engine batch (coalesce)",
    "batch-wait-ms": "coalesce: how long a batch waits for more sets after the first",
    "max-responses": "most responses in one set (/v1/score-set) or group (group_size); 422 above",
    "max-queries": "/get_reward (OpenRLHF): most queries in one request; 422 above",
    "max-text-chars": "longest prompt or response, in characters; 422 above",
    "answers-in-memory": "answers kept in memory for replays (the most recent); older ones are read back from the "
    "store when their request id comes again",
    "verdict-cache-entries": "verdicts held across requests, so the same criterion on the same response is asked "
    "once (about 150 bytes each, least recently used evicted); 0: off",
    "memory-trim-interval": "seconds between malloc_trim(0) calls, giving memory a batch freed back to the system "
    "(glibc keeps it otherwise); 0: off",
}


def serve(
    engines: Path = typer.Option(None, "--engines", help=ENGINES_HELP + " (its generator and verifier serve)"),
    config: Path = typer.Option(None, "--config", hidden=True),
    preset: str = typer.Option("tiny", "--preset", help=PRESET_HELP),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help=_HELP["host"]),
    port: int = typer.Option(8321, "--port", help="TCP port"),
    token_file: Path = typer.Option(None, "--token-file", help=_HELP["token-file"]),
    insecure_no_token: bool = typer.Option(False, "--insecure-no-token", help=_HELP["insecure-no-token"]),
    run_id: str = typer.Option("service", "--run-id", help="run_id of the lineage rows (one service per run id)"),
    group_size: int = typer.Option(4, "--group-size", help="/get_reward (OpenRLHF): responses per prompt in a set"),
    group_timeout: float = typer.Option(120.0, "--group-timeout", help=_HELP["group-timeout"]),
    rubric_rollouts: int = typer.Option(1, "--rubric-rollouts", help=_HELP["rubric-rollouts"]),
    batching: str = typer.Option("continuous", "--batching", help=_HELP["batching"]),
    max_batch_sets: int = typer.Option(32, "--max-batch-sets", help=_HELP["max-batch-sets"]),
    batch_wait_ms: float = typer.Option(20.0, "--batch-wait-ms", help=_HELP["batch-wait-ms"]),
    max_body_bytes: int = typer.Option(1_048_576, "--max-body-bytes", help="largest request body (413 above)"),
    max_responses: int = typer.Option(64, "--max-responses", help=_HELP["max-responses"]),
    max_queries: int = typer.Option(4096, "--max-queries", help=_HELP["max-queries"]),
    max_text_chars: int = typer.Option(32_000, "--max-text-chars", help=_HELP["max-text-chars"]),
    answers_in_memory: int = typer.Option(10_000, "--answers-in-memory", help=_HELP["answers-in-memory"]),
    verdict_cache_entries: int = typer.Option(500_000, "--verdict-cache-entries", help=_HELP["verdict-cache-entries"]),
    memory_trim_interval: float = typer.Option(30.0, "--memory-trim-interval", help=_HELP["memory-trim-interval"]),
    access_log: bool = typer.Option(False, "--access-log", help="log every request line (never headers)"),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Serve the evaluator over HTTP: set-level DynamicRubric rewards for any RL trainer (docs: reward service).

    Routes: POST /v1/score-set, POST /v1/rewards (per sample, collected by group id), POST /get_reward (OpenRLHF
    --remote_rm_url), GET /health, /ready, /metrics. Every scored set is written to the store under stage
    'service'; `dr query why_reward -p request_id=...` says why a response got its reward. On an address other
    machines can reach it needs --token-file (or --insecure-no-token); request sizes are bounded by --max-* options.
    """
    options = dict(locals())  # first: the command's options, by name
    quiet.apply(verbose)  # before torch and vLLM load
    from dr_core.config.presets import engines_line
    from dr_core.config.service import ServiceSettings
    from dr_core.service.server import check_exposure
    from dr_core.service.server import serve as run_service

    check_exposure(host, token_file, insecure_no_token)  # first: a refused address is one line, nothing read or bound
    named = {k: v for k, v in options.items() if k in ServiceSettings.model_fields}  # same name, same meaning
    settings = ServiceSettings(
        **named,
        group_timeout_s=group_timeout,
        batch_wait_s=batch_wait_ms / 1000.0,
        memory_trim_interval_s=memory_trim_interval,
    )
    roles, source = command_roles(preset, engines_file(engines, config))
    said = _after_checks(engines_line(roles, source, ("generator", "verifier")))
    listen = {"host": host, "port": port, "token_file": token_file, "insecure_no_token": insecure_no_token}
    code = run_service(roles, store, settings, **listen, log=said, access_log=access_log)
    if code:
        raise typer.Exit(code)


def _after_checks(models: str):
    """The service's ``log``, saying ``models`` (its models line) before its first line: the service logs nothing
    before its token, store and port are checked, so a bad start-up input stays one error line (except the
    ``--insecure-no-token`` warning on a network address, said first on every start)."""
    pending = [models]

    def said(message: str) -> None:
        while pending:
            log(pending.pop())
        if message.startswith("warning: "):  # --insecure-no-token on a non-loopback address: not dim
            err_console.print(styled(("warning: ", "bold yellow"), message[len("warning: ") :]), soft_wrap=True)
        else:
            log(message)

    return said
