"""The Prefect-orchestrated runs: ``dr round``, ``dr coevolve`` and ``dr stale-fresh`` (flows/). Each quiets the
third-party log first (cli/quiet.py), refuses a bad config, store or output path before any model work, says its
models in one line (``models: preset tiny — generator ...``, dr_core/config/presets.py), runs its flow under the
progress display and prints the result's tables (cli/results.py).

    dr round --preset tiny --store ./store --run-id demo
    dr coevolve --preset tiny --rounds 2 --store ./store --run-id demo
"""

from __future__ import annotations

import contextlib
import json
from typing import Optional

import typer

from cli import quiet
from cli.options import (
    ARTIFACT_STORE_HELP,
    CREATE_BUCKET_HELP,
    ENGINES_HELP,
    RUNNER_HELP,
    SHARDS_HELP,
    TRACK_HELP,
    VERBOSE_HELP,
    WAIT_HELP,
)
from cli.output import check_output_path, console, error_line, fail, log, styled
from cli.progress import showing_progress
from cli.results import print_coevolve, print_round, print_stale_fresh


# -- dr round -----------------------------------------------------------------------------------------------------
def round_cmd(
    preset_name: str = typer.Option("tiny", "--preset", help="Preset: tiny (CPU, minutes) or paper (GPU)."),
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help=ARTIFACT_STORE_HELP),
    run_id: str = typer.Option("local", "--run-id", help="Run id: the partition the round's artifacts go to."),
    round_no: int = typer.Option(1, "--round", help="Round number t."),
    config_file: Optional[str] = typer.Option(None, "--engines", help=ENGINES_HELP),
    overrides: list[str] = typer.Option([], "--set", help="Override a preset field, e.g. --set n_prompts=2."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the evaluator-accuracy step."),
    task_runner: Optional[str] = typer.Option(None, "--task-runner", help=RUNNER_HELP),
    shards: Optional[int] = typer.Option(None, "--shards", min=1, help=SHARDS_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the result (summary, steps, URIs) here."),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=CREATE_BUCKET_HELP),
    track: str = typer.Option("none", "--track", envvar="DR_TRACK", help=TRACK_HELP),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Run one DynamicRubric round (sample, rubrics, verify, score, evaluate) as cached Prefect tasks."""
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from dr_core.config.runtime import configure_prefect

    configure_prefect()
    cfg = _load_config(preset_name, config_file, overrides + ([f"scale.shards={shards}"] if shards else []))
    from pydantic import ValidationError

    from dr_core.store.artifacts import default_store_url
    from flows.round import RoundParams, round_flow

    flow_fn = _with_runner(round_flow, task_runner)

    try:
        params = RoundParams(
            config=cfg,
            store=store or default_store_url(),
            run_id=run_id,
            round_no=round_no,
            run_eval=not no_eval,
            track=track,
        )
    except ValidationError as exc:
        fail(error_line(exc))
    _check_outputs(params.store, json_out, create_bucket)
    from dr_core.runs.round_steps import check_inputs

    check_inputs(cfg)
    console.print(
        styled(
            ("dr round", "bold"),
            f" preset={cfg.preset} store={params.store} run_id={run_id} round={round_no}"
            f" shards={cfg.scale.shards} task-runner={task_runner or 'thread'}",
        )
    )
    _say_models(cfg.engines, preset_name, config_file)
    with _holding_run(params.store, run_id, "dr round", wait), showing_progress(console):
        result = flow_fn(params)
    _finish(result, print_round, json_out)


# -- dr coevolve --------------------------------------------------------------------------------------------------
def coevolve_cmd(
    preset_name: str = typer.Option("tiny", "--preset", help="Preset: tiny (CPU, about ten minutes) or paper (GPU)."),
    rounds: int = typer.Option(1, "--rounds", min=1, help="T: co-evolution rounds."),
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help=ARTIFACT_STORE_HELP),
    run_id: str = typer.Option("local", "--run-id", help="Run id: the partition the run's artifacts go to."),
    config_file: Optional[str] = typer.Option(None, "--engines", help=ENGINES_HELP),
    overrides: list[str] = typer.Option(
        [],
        "--set",
        help="Override a field: round.k=4, generator.max_steps=1, policy.learning_rate=1e-6, measure_start=false.",
    ),
    json_out: Optional[str] = typer.Option(
        None, "--json", help="Also write the result (rounds, steps, checkpoints) here."
    ),
    task_runner: Optional[str] = typer.Option(None, "--task-runner", help=RUNNER_HELP),
    shards: Optional[int] = typer.Option(None, "--shards", min=1, help=SHARDS_HELP),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=CREATE_BUCKET_HELP),
    generator_start: Optional[str] = typer.Option(
        None, "--generator-start", help="Start G(0) from this local Hugging Face checkpoint directory."
    ),
    policy_start: Optional[str] = typer.Option(
        None, "--policy-start", help="Start P(0) from this local Hugging Face checkpoint directory."
    ),
    track: str = typer.Option("none", "--track", envvar="DR_TRACK", help=TRACK_HELP),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Run Algorithm 1: per round, update the generator, then the policy, then measure; all as cached Prefect tasks."""
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from dr_core.config.runtime import configure_prefect

    configure_prefect()
    cfg, params = _coevolve_params(preset_name, rounds, store, run_id, config_file, overrides, shards, track)
    params = _with_starts(params, generator_start, policy_start)
    _check_outputs(params.store, json_out, create_bucket)
    from dr_core.runs.round_steps import check_inputs
    from flows.coevolve import coevolve_flow

    check_inputs(cfg.round, cfg.policy_eval.data if cfg.policy_eval else None)
    flow_fn = _with_runner(coevolve_flow, task_runner)
    console.print(
        styled(
            ("dr coevolve", "bold"),
            f" preset={cfg.preset} rounds={rounds} store={params.store} run_id={run_id}"
            f" shards={cfg.round.scale.shards} task-runner={task_runner or 'thread'}",
        )
    )
    _say_models(cfg.round.engines, preset_name, config_file)
    with _holding_run(params.store, run_id, "dr coevolve", wait), showing_progress(console):
        result = flow_fn(params)
    _finish(result, print_coevolve, json_out)


def _coevolve_params(preset_name, rounds, store, run_id, config_file, overrides, shards, track="none"):
    """(config, flow parameters) from the preset, ``--engines``, ``--shards`` and ``--set``; a bad value is one
    error line."""
    from pydantic import ValidationError

    from dr_core.config import ConfigError, coevolve_preset, load_engines_config
    from dr_core.store.artifacts import default_store_url

    fields = _overrides(overrides)
    fields["rounds"] = rounds
    try:
        if config_file:
            fields.setdefault("round", {})["engines"] = load_engines_config(config_file).model_dump()
        if shards:
            fields.setdefault("round", {}).setdefault("scale", {})["shards"] = shards
        cfg = coevolve_preset(preset_name, **fields)
        from flows.coevolve import CoevolveParams

        return cfg, CoevolveParams(config=cfg, store=store or default_store_url(), run_id=run_id, track=track)
    except (ValidationError, ValueError, ConfigError) as exc:
        fail(error_line(exc))


@contextlib.contextmanager
def _holding_run(store_url: str, run_id: str, command: str, wait: bool):
    """Hold the run's lease (dr_core/store/lease.py) for the block: one writer per run id and store. Held by another
    process: one error line naming it, or with ``--wait`` a line saying whom it waits for, then the wait."""
    from dr_core.store.artifacts import Store
    from dr_core.store.lease import LeaseHeld, describe, run_lease

    def waiting(holder: dict) -> None:
        log(f"run {run_id!r} is in use by {describe(holder)}: waiting for it (--wait)")

    try:
        with run_lease(Store.from_url(store_url), run_id, command, wait=wait, on_wait=waiting):
            yield
    except LeaseHeld as exc:  # raised only while taking the lease, before any work
        fail(str(exc))


def _with_starts(params, generator_start: Optional[str], policy_start: Optional[str]):
    """The flow parameters with G(0) and P(0) taken from local checkpoint directories (a bad one: one error line)."""
    from dr_core.runs.updates import start_ref

    starts = {}
    for key, path in (("generator_start", generator_start), ("policy_start", policy_start)):
        if path is not None:
            try:
                starts[key] = start_ref(path).model_dump()
            except ValueError as exc:
                fail(f"--{key.replace('_', '-')}: {exc}")
    return params.model_copy(update=starts) if starts else params


# -- dr stale-fresh -----------------------------------------------------------------------------------------------
_STALE_FRESH_PRESET_HELP = (
    "Round preset (tiny or paper) to use instead of the run's recorded round config (the default: the verifier, "
    "lengths and prompts the run used); --engines and --set go with it."
)


def stale_fresh_cmd(
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help=ARTIFACT_STORE_HELP),
    run_id: str = typer.Option(..., "--run-id", help="A co-evolution run (dr coevolve) with at least one round."),
    round_no: Optional[int] = typer.Option(
        None, "--round", min=1, help="Round t: G(t-1) vs G(t) on P(t-1)'s sets (default: latest)."
    ),
    preset_name: Optional[str] = typer.Option(None, "--preset", help=_STALE_FRESH_PRESET_HELP),
    config_file: Optional[str] = typer.Option(
        None, "--engines", help="engines file (with --preset): its models instead of the preset's."
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override a preset field (with --preset), e.g. --set k=2."),
    track: str = typer.Option("none", "--track", envvar="DR_TRACK", help=TRACK_HELP),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=VERBOSE_HELP),
) -> None:
    """Section 4.4: score P(t-1)'s sets with the stale G(t-1) and the fresh G(t); stages 'stale' and 'fresh'.

    By default with the round config the run recorded (its verifier, lengths and prompts); --preset replaces it.
    """
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from dr_core.config.runtime import configure_prefect

    configure_prefect()
    from pydantic import ValidationError

    from dr_core.store.artifacts import default_store_url

    cfg = _load_config(preset_name, config_file, overrides) if preset_name else None
    from flows.stale_fresh import StaleFreshParams, stale_fresh_flow

    try:
        params = StaleFreshParams(
            store=store or default_store_url(), run_id=run_id, round_no=round_no, config=cfg, track=track
        )
        from dr_core.store.artifacts import Store

        Store.from_url(params.store).require_exists()
        _say_stale_fresh_models(params, preset_name, config_file)
        with _holding_run(params.store, run_id, "dr stale-fresh", wait), showing_progress(console):
            result = stale_fresh_flow(params)
    except (ValidationError, ValueError) as exc:
        fail(error_line(exc))
    print_stale_fresh(result, params.store, run_id)


def _say_stale_fresh_models(params, preset_name: Optional[str], config_file: Optional[str]) -> None:
    """The models line of ``dr stale-fresh``: the verifier of the config it scores with (the given one, else the
    run's recorded one), the generators G(t-1) and G(t) and the policy P(t-1) being the run's checkpoints."""
    from dr_core.config import RoundConfig
    from dr_core.config.presets import models_line, roles_source, verifier_label
    from dr_core.runs.stale_fresh import plan
    from dr_core.store.artifacts import Store

    p = plan(Store.from_url(params.store), params.run_id, params.round_no)
    cfg = params.config
    source = roles_source(preset_name, config_file) if cfg is not None else f"run {params.run_id}'s recorded config"
    if cfg is None and p["config_json"]:
        cfg = RoundConfig.model_validate_json(p["config_json"])
    if cfg is None:
        return  # the flow refuses it, saying what to pass
    t = p["round"]
    log(
        models_line(
            source,
            [
                ("generators", f"G({t - 1}) and G({t}) (the run's checkpoints)"),
                ("verifier", verifier_label(cfg.engines.verifier)),
                ("policy", f"P({t - 1}) (the run's checkpoint)"),
            ],
        )
    )


# -- shared by the runs -------------------------------------------------------------------------------------------
def _say_models(engines, preset_name: str, config_file: Optional[str]) -> None:
    """The run's models line (``models: preset tiny — generator ...``), once its inputs are checked."""
    from dr_core.config.presets import engines_line, roles_source

    log(engines_line(engines, roles_source(preset_name, config_file)))


def _load_config(preset_name: str, config_file: Optional[str], overrides: list[str]):
    from pydantic import ValidationError

    from dr_core.config import ConfigError, load_engines_config, preset

    fields = _overrides(overrides)
    try:
        if config_file:
            fields["engines"] = load_engines_config(config_file)
        return preset(preset_name, **fields)
    except (ValidationError, ValueError, ConfigError) as exc:
        fail(error_line(exc))


def _overrides(items: list[str]) -> dict:
    """--set FIELD=VALUE (top-level) or SECTION.FIELD=VALUE (round / generator / policy) into nested dicts."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            fail(f"--set {item!r}: expected FIELD=VALUE, e.g. --set round.n_prompts=2 or --set generator.max_steps=1")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        section, _, field = key.rpartition(".")
        (out.setdefault(section, {}) if section else out)[field] = value
    return out


def _with_runner(flow_fn, spec: Optional[str]):
    """The flow with the task runner of ``--task-runner`` (flows/runners.py); a bad value is one error line."""
    from flows.runners import TaskRunnerError, make_task_runner

    try:
        runner = make_task_runner(spec)
    except TaskRunnerError as exc:
        fail(str(exc))
    except ImportError as exc:
        fail(f"--task-runner {spec}: {exc} (install the project's cpu or gpu profile: it has ray and prefect-ray)")
    return flow_fn if runner is None else flow_fn.with_options(task_runner=runner)


def _check_outputs(store_url: str, json_out: Optional[str], create_bucket: bool) -> None:
    """Before any model work: the store can be written (an S3 bucket exists, or --create-bucket) and --json can be."""
    from dr_core.store.artifacts import Store

    Store.from_url(store_url).check_writable(create_bucket)
    if json_out:
        check_output_path(json_out, "--json")


def _finish(result, show, json_out: Optional[str]) -> None:
    """Print a flow's result (a ``RoundResult`` or ``CoevolveResult``) as tables and, if asked, write the whole
    result as JSON (atomically)."""
    data = result.model_dump()
    show(data)
    if json_out:
        from dr_core.store.atomic import write_json_atomic

        write_json_atomic(json_out, data)
