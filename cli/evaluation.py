"""The evaluator and the policy measured from the command line: ``dr score``, ``dr eval-evaluator`` (logic in
dr_core/evals/evaluate.py and reward_model.py) and ``dr eval-policy`` (logic in dr_core/evals/policy_eval/).

Each quiets the third-party log first (cli/quiet.py; ``--verbose`` shows it), runs the models of ``--preset`` (tiny
by default) or of an ``--engines`` file, says which in one line (``models: preset tiny — ...``) and shows progress
on stderr: a line per phase, live bars on a terminal, a plain line every 30 s in a log (cli/progress.py).

    dr score sets.jsonl -o scored.jsonl
    dr eval-evaluator data.jsonl --format pairwise -o metrics.json --limit 12 --seeds 3
    dr eval-policy --policy CKPT --data heldout.jsonl --judge default -o metrics.json
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from cli import quiet
from cli.options import ENGINES_HELP, PRESET_HELP, VERBOSE_HELP, command_roles, engines_file
from cli.output import check_output_path, console, err_console, fail, log
from cli.progress import showing_progress
from dr_core.ifeval.metrics import METRICS as IFEVAL_METRICS

_MODES = ("dynamic", "static")
_EVAL_MODE_HELP = (
    "dynamic (generator sees the candidates) | static (RaR) | reward-model (a scalar RM baseline, --reward-model DIR)"
)
_POLICY_HELP = (
    "the policy: 'default' (the --preset's or --engines file's policy model), a bundled model's name, a checkpoint "
    'directory, a URL, or a JSONL file of its saved answers {"id","answer"} (nothing is generated)'
)
_DATA_HELP = (
    'JSON Lines: {"id","prompt","baseline"?} (pairwise), {"prompt","answer"} (--task exact|numeric|math) or IFEval\'s '
    'own {"key"|"id","prompt","instruction_id_list","kwargs"} (--task ifeval)'
)
_JUDGE_HELP = (
    "pairwise judge: 'default' (the --preset's or --engines file's verifier model), a bundled model's name, a "
    "checkpoint directory, or http(s)://host:port/v1[#served-model-name] (an OpenAI-compatible server)"
)
_BASELINE_HELP = (
    "a model (default: the policy model of --preset/--engines | name | checkpoint | URL) that answers too, "
    'or a JSONL file of saved answers by id ({"id","answer"}, or {"id","baseline"}); '
    "omitted: the data file's 'baseline'"
)
_PROCEDURE_HELP = (
    "logodds: A-vs-B first-token log-odds "
    "in both orders, averaged so the order cancels; choice: structured A/B in "
    "both orders, a split is a tie"
)
_EVALUATOR_KEYS = ("n", "accuracy", "chance_accuracy", "ties", "unscorable", "ndcg")
_TASK_KEYS = ("n", "policy_accuracy", "baseline_accuracy", "accuracy_delta", "policy_no_answer")
_IFEVAL_KEYS = (
    "n",
    "scored",
    "unscorable",
    *(f"{who}_{m}{ci}" for who in ("policy", "baseline") for m in IFEVAL_METRICS for ci in ("", "_ci95")),
    "prompt_level_strict_acc_delta",
)
_PAIRWISE_KEYS = (
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


def _evaluator_setup(preset: str, engines: Path | None, mode: str, seeds: int):
    """(the roles of ``--preset``/``--engines``, where they come from), the options checked."""
    if mode not in _MODES:
        fail(f"--mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if seeds < 1:
        fail(f"--seeds must be >= 1, got {seeds}")
    return command_roles(preset, engines)


# -- dr score -----------------------------------------------------------------------------------------------------
def score(
    sets: Path = typer.Argument(..., help='JSON Lines of {"id", "prompt", "responses": [...]}'),
    output: Path = typer.Option(..., "--output", "-o", help="JSON Lines out: rubrics, verdicts, scores per set"),
    seeds: int = typer.Option(1, "--seeds", help="rubrics per set (independent generations, shuffled order)"),
    mode: str = typer.Option("dynamic", "--mode", help="dynamic (generator sees the responses) | static (RaR)"),
    preset: str = typer.Option("tiny", "--preset", help=PRESET_HELP),
    engines: Path = typer.Option(None, "--engines", help=ENGINES_HELP),
    config: Path = typer.Option(None, "--config", hidden=True),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Write rubric(s), the verdict matrix, Eq. 12 scores, R_disc and the unscorable parts for every set."""
    quiet.apply(verbose)  # before torch and vLLM load
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.evals.evaluate import run_score
    from dr_core.evaluator.items import RubricSampling
    from dr_core.model import ModelError
    from dr_core.store.atomic import write_jsonl_atomic

    check_output_path(output, "--output")
    roles, source = _evaluator_setup(preset, engines_file(engines, config), mode, seeds)
    try:
        with showing_progress(err_console):
            records, costs = run_score(
                sets, config=roles, seeds=seeds, sampling=RubricSampling(mode=mode), source=source, log=log
            )
    except (DataError, ModelError, EngineError) as exc:
        fail(str(exc))
    write_jsonl_atomic(output, records)
    log(f"generation {costs['generation']}; verification {costs['verification']}")
    console.print(f"wrote {len(records)} scored sets to {output}", highlight=False)


# -- dr eval-evaluator --------------------------------------------------------------------------------------------
def eval_evaluator(
    data: Path = typer.Argument(..., help="labelled JSON Lines (pairwise, listwise or ranked)"),
    fmt: str = typer.Option(..., "--format", help="pairwise | listwise | ranked"),
    output: Path = typer.Option(..., "--output", "-o", help="METRICS.json"),
    limit: int = typer.Option(None, "--limit", help="evaluate the first N examples (the whole file is validated)"),
    seeds: int = typer.Option(5, "--seeds", help="AVG@N over N independently generated rubric sets (paper: 5)"),
    mode: str = typer.Option("dynamic", "--mode", help=_EVAL_MODE_HELP),
    preset: str = typer.Option("tiny", "--preset", help=PRESET_HELP),
    engines: Path = typer.Option(None, "--engines", help=ENGINES_HELP),
    config: Path = typer.Option(None, "--config", hidden=True),
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
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Evaluate the rubric evaluator on human-labelled data: strict accuracy, ties, unscorable, nDCG, costs."""
    quiet.apply(verbose)  # before torch and vLLM load
    from dr_core.evals.evaluate import EVAL_FORMATS
    from dr_core.store.atomic import write_json_atomic

    if fmt not in EVAL_FORMATS:
        fail(f"--format must be one of {', '.join(EVAL_FORMATS)}, got {fmt!r}")
    check_output_path(output, "--output")
    if limit is not None and limit < 1:
        fail(f"--limit must be >= 1, got {limit}")
    if mode == "reward-model":  # scalar reward model baseline (dr_core/evals/reward_model.py): one pass, no seeds
        metrics = _reward_model_metrics(data, fmt, reward_model, with_responses, limit)
        seeds, mode = 1, metrics["mode"]
    else:
        if reward_model is not None or with_responses:
            fail("--reward-model and --with-responses go with --mode reward-model")
        metrics = _evaluator_metrics(data, fmt, (preset, engines_file(engines, config)), limit, seeds, mode)
    write_json_atomic(output, metrics)
    tab = Table(title=f"{data.name}: {fmt}, {mode}, AVG@{seeds}", show_header=False)
    for key in _EVALUATOR_KEYS:
        if key in metrics:
            val = metrics[key]
            tab.add_row(key, f"{val:.4f}" if isinstance(val, float) else str(val))
    console.print(tab)
    console.print(f"wrote {output}", highlight=False)


def _reward_model_metrics(data: Path, fmt: str, reward_model: Path | None, with_responses: bool, limit) -> dict:
    from dr_core.datasets import DataError
    from dr_core.evals.reward_model import RewardModelError, run_eval_reward_model

    if reward_model is None:
        fail("--mode reward-model needs --reward-model DIR (a checkpoint with num_labels=1)")
    try:
        return run_eval_reward_model(
            data, fmt, reward_model=reward_model, with_responses=with_responses, limit=limit, log=log
        )
    except (DataError, RewardModelError, OSError) as exc:
        fail(str(exc))


def _evaluator_metrics(data: Path, fmt: str, models: tuple, limit, seeds: int, mode: str) -> dict:
    """The evaluator's metrics on ``data`` with the models of ``models`` = (preset, engines file or None)."""
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.evals.evaluate import run_eval_evaluator
    from dr_core.evaluator.items import RubricSampling
    from dr_core.model import ModelError

    roles, source = _evaluator_setup(*models, mode, seeds)
    try:
        with showing_progress(err_console):
            sampling = RubricSampling(mode=mode)
            return run_eval_evaluator(
                data, fmt, config=roles, limit=limit, seeds=seeds, sampling=sampling, source=source, log=log
            )
    except (DataError, ModelError, EngineError) as exc:
        fail(str(exc))


# -- dr eval-policy: pairwise win rate against a baseline, verifiable tasks ---------------------------------------
def eval_policy(
    policy: str = typer.Option(..., "--policy", help=_POLICY_HELP),
    data: Path = typer.Option(..., "--data", help=_DATA_HELP),
    judge: str = typer.Option(None, "--judge", help=_JUDGE_HELP),
    baseline: str = typer.Option(None, "--baseline", help=_BASELINE_HELP),
    judge_procedure: str = typer.Option("logodds", "--judge-procedure", help=_PROCEDURE_HELP),
    tie_threshold: float = typer.Option(
        0.01, "--tie-threshold", help="logodds: |d| (nats) at or below which a pair is a tie"
    ),
    task: str = typer.Option(
        None,
        "--task",
        help="verifiable task instead of a judge: exact | numeric | math (final answers), or ifeval (IFEval's "
        "instructions checked by its own code: lm-eval's strict and loose accuracies)",
    ),
    limit: int = typer.Option(None, "--limit", help="evaluate the first N prompts (the whole file is validated)"),
    max_tokens: int = typer.Option(256, "--max-tokens", help="longest answer, tokens"),
    max_model_len: int = typer.Option(
        None, "--max-model-len", help="context of in-process engines, tokens (default: a role's own; 4096 otherwise)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of generation and of the bootstrap"),
    output: Path = typer.Option(None, "--output", "-o", help="METRICS.json (default: print only)"),
    records: Path = typer.Option(None, "--records", help="also write per-prompt answers and verdicts (JSONL)"),
    preset: str = typer.Option("tiny", "--preset", help=PRESET_HELP + "; what 'default' names"),
    engines: Path = typer.Option(None, "--engines", help=ENGINES_HELP + "; what 'default' names"),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Does the policy answer better? Pairwise judge in both orders (win rate, ties, 95% CI), or verifiable tasks."""
    quiet.apply(verbose)  # before torch and vLLM load
    from dr_core.store.atomic import json_text, jsonl_text, write_all_atomic

    _check_policy_options(task, judge, limit, max_tokens, output, records)
    roles, source = command_roles(preset, engines)
    metrics, recs = _run_policy_eval(
        roles=roles,
        roles_source=source,
        policy=policy,
        data=data,
        judge=judge,
        baseline=baseline,
        task=task,
        limit=limit,
        max_tokens=max_tokens,
        seed=seed,
        max_model_len=max_model_len,
        procedure=judge_procedure,
        threshold=tie_threshold,
    )
    outputs = ([(output, json_text(metrics))] if output else []) + ([(records, jsonl_text(recs))] if records else [])
    write_all_atomic(outputs)  # both files or neither
    _print_policy_metrics(data, task, metrics)
    if output:
        console.print(f"wrote {output}", highlight=False)


def _check_policy_options(task, judge, limit, max_tokens: int, output: Path | None, records: Path | None) -> None:
    """Refuse bad options, and output files that cannot be written, before any model work."""
    from dr_core.evals.policy_eval import POLICY_TASKS

    if task is not None and task not in POLICY_TASKS:
        fail(f"--task must be one of {', '.join(POLICY_TASKS)}, got {task!r}")
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


def _run_policy_eval(**options) -> tuple[dict, list[dict]]:
    """``run_eval_policy`` with the judge's API key from ``DR_JUDGE_API_KEY``; its input errors are one line."""
    import os

    from dr_core.config import ConfigError
    from dr_core.datasets import DataError
    from dr_core.engines import EngineError
    from dr_core.evals.policy_eval import run_eval_policy
    from dr_core.model import ModelError

    try:
        with showing_progress(err_console):
            return run_eval_policy(**options, api_key=os.environ.get("DR_JUDGE_API_KEY"), log=log)
    except (DataError, ConfigError, ValueError, ModelError, EngineError) as exc:
        fail(str(exc))


def _print_policy_metrics(data: Path, task: str | None, metrics: dict) -> None:
    tab = Table(
        title=f"{data.name}: {'task ' + task if task else 'pairwise, judge ' + metrics['judge']}", show_header=False
    )
    for key in (_IFEVAL_KEYS if task == "ifeval" else _TASK_KEYS) if task else _PAIRWISE_KEYS:
        if key in metrics:
            val = metrics[key]
            tab.add_row(
                key,
                f"{val:.4f}"
                if isinstance(val, float)
                else (f"[{val[0]:.3f}, {val[1]:.3f}]" if isinstance(val, list) else str(val)),
            )
    console.print(tab)
    if task == "ifeval" and metrics.get("unscorable"):
        console.print(
            f"{metrics['unscorable']} of {metrics['n']} prompts are unscorable here, left out of the accuracies: "
            f"{', '.join(metrics['unscorable_instructions'])} need nltk's punkt data, which no installed package "
            "ships (set NLTK_DATA to a directory that holds it)",
            highlight=False,
        )
