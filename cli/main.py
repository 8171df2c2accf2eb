"""The installed ``dr`` entry point: dr_core's commands plus the Prefect-orchestrated ones.

dr --help
dr round --preset tiny --store ./store --run-id demo
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from cli import quiet
from cli.app import app, check_output_path, console, err_console, error_line, fail, styled
from cli.progress import memory, showing_progress
from dr_core.scoring.signals import no_gradient_steps, signal_warnings

_CREATE_BUCKET_HELP = "s3:// store: create the bucket if it does not exist (otherwise a missing bucket is an error)"
_RUNNER_HELP = (
    "Task runner of the model steps: thread (this process), ray (a Ray cluster started for the run, or "
    "$RAY_ADDRESS), or ray://HOST:PORT (an existing cluster through Ray Client). Ray runs the shards "
    "with each role's scale.resources."
)
_SHARDS_HELP = "Split the model steps into this many shards by prompt (scale.shards; same rows, cached per shard)."
_VERBOSE_HELP = (
    "Show every third-party log line (vLLM, torch, TRL, Prefect's task runs); by default the log is one "
    "line per step and progress bars."
)


def _load_config(preset_name: str, config_file: Optional[str], overrides: list[str]):
    from pydantic import ValidationError

    from dr_core.config import ConfigError, load_engines_config
    from dr_core.presets import preset

    fields = _overrides(overrides)
    try:
        if config_file:
            fields["engines"] = load_engines_config(config_file)
        return preset(preset_name, **fields)
    except (ValidationError, ValueError, ConfigError) as exc:
        fail(error_line(exc))


def _print_round(result: dict) -> None:
    s = result["summary"]
    tab = Table(title=f"Round {result['round']} of run {result['run_id']}", show_header=False)
    for label, key in [
        ("prompts", "prompts"),
        ("response sets", "sets"),
        ("responses", "responses"),
        ("rubric rollouts", "rubric_rollouts"),
        ("rubric items", "rubric_items"),
        ("unusable rubrics (unscorable)", "rubric_failures"),
        ("verdicts", "verdicts"),
        ("unscorable verdicts", "unscorable_verdicts"),
        ("unscorable scores", "unscorable_scores"),
        ("verifier yes-rate (known verdicts, C and anchors)", "verifier_yes_rate"),
        ("sets with constant Eq. 12 scores (share)", "constant_score_sets_share"),
        ("mean R_disc (Eq. 13)", "r_disc"),
        ("mean R_anchor (Eq. 15)", "r_anchor"),
        ("mean anchor gap (Eq. 2)", "anchor_gap"),
        ("evaluator accuracy (eval slice, strict)", "eval_accuracy"),
        ("eval examples", "eval_n"),
    ]:
        v = s.get(key)
        tab.add_row(label, "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v))
    console.print(tab)
    steps = Table(title="Steps")
    steps.add_column("step")
    steps.add_column("state")
    steps.add_column("seconds", justify="right")
    steps.add_column("peak memory", justify="right")
    for name, info in result["steps"].items():
        steps.add_row(
            name, info["state"], f"{info['seconds']:.1f}", memory(info.get("peak_rss_mb")).removeprefix("peak ")
        )
    console.print(steps)
    t = result["round"]
    _print_warnings(
        signal_warnings(
            yes_rates={t: s.get("verifier_yes_rate")}, constant_score_shares={t: s.get("constant_score_sets_share")}
        )
    )


@app.command("round")
def round_cmd(
    preset_name: str = typer.Option("tiny", "--preset", help="Preset: tiny (CPU, minutes) or paper (GPU)."),
    store: Optional[str] = typer.Option(
        None, "--store", envvar="DR_STORE", help="Artifact store: path or s3://bucket/prefix."
    ),
    run_id: str = typer.Option("local", "--run-id", help="Run id: the partition the round's artifacts go to."),
    round_no: int = typer.Option(1, "--round", help="Round number t."),
    config_file: Optional[str] = typer.Option(None, "--engines", help="YAML/JSON engine config per role."),
    overrides: list[str] = typer.Option([], "--set", help="Override a preset field, e.g. --set n_prompts=2."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the evaluator-accuracy step."),
    task_runner: Optional[str] = typer.Option(None, "--task-runner", help=_RUNNER_HELP),
    shards: Optional[int] = typer.Option(None, "--shards", min=1, help=_SHARDS_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the result (summary, steps, URIs) here."),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=_CREATE_BUCKET_HELP),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=_VERBOSE_HELP),
) -> None:
    """Run one DynamicRubric round (sample, rubrics, verify, score, evaluate) as cached Prefect tasks."""
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from flows.settings import configure_prefect

    configure_prefect()
    cfg = _load_config(preset_name, config_file, overrides + ([f"scale.shards={shards}"] if shards else []))
    from pydantic import ValidationError

    from dr_core.store.artifacts import default_store_url
    from flows.round import RoundParams, round_flow

    flow_fn = _with_runner(round_flow, task_runner)

    try:
        params = RoundParams(
            config=cfg, store=store or default_store_url(), run_id=run_id, round_no=round_no, run_eval=not no_eval
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
    with showing_progress(console):
        result = flow_fn(params)
    _finish(result, _print_round, json_out)


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


def _finish(result: dict, show, json_out: Optional[str]) -> None:
    """Print a flow's result table and, if asked, write the whole result as JSON (atomically)."""
    show(result)
    if json_out:
        from dr_core.store.atomic import write_json_atomic

        write_json_atomic(json_out, result)


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


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def _win_rate_cell(r: dict) -> str:
    pe = r.get("policy_eval")
    if not pe:
        return "-"
    ci = pe.get("win_rate_ci95")
    same = pe.get("identical_answers")
    note = f"; {same} of {pe['n']} answers identical to P(0)'s: a tie each" if same else ""
    return f"{_fmt(pe['win_rate'])}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" (n={pe['n']}{note})"


def _yes_rate_cell(r: dict) -> str:
    m = r["measure"]
    return "-" if "verifier_yes_rate" not in m else f"{_fmt(m['verifier_yes_rate'])} (n={m.get('verdicts_scored')})"


def _zero_std_cell(r: dict, role: str) -> str:
    """'step: share' per GRPO step of the update, with the steps that had no gradient at all."""
    steps = (r.get(f"{role}_update") or {}).get("zero_std_by_step")
    if not steps:
        return "-"
    cells = ", ".join(f"{s['step']}: {s['zero_std_share']:.2f}" for s in steps)
    dead = no_gradient_steps(steps)
    return cells + (f" ({dead} without gradient)" if dead else "")


def _print_warnings(found: list[str] | None) -> None:
    """The run's degenerate-signal warnings (dr_core.scoring.signals) in words, after the tables."""
    for w in found or ():
        console.print(styled(("warning: ", "bold yellow"), (w, "yellow")))


def _print_coevolve(result: dict) -> None:
    rounds = result["rounds"]
    tab = Table(title=f"Co-evolution run {result['run_id']}")
    tab.add_column("")
    for r in rounds:
        tab.add_column(f"round {r['round']}" + (" (start)" if r["round"] == 0 else ""), justify="right")

    def upd(r, role, key):
        u = r.get(f"{role}_update")
        return (
            "-"
            if not u
            else f"{_fmt(u['reward_first'])} -> {_fmt(u['reward_last'])}"
            if key == "reward"
            else _fmt(u[key])
        )

    rows = [
        ("generator reward, first -> last step (R_disc + lam R_anchor)", lambda r: upd(r, "generator", "reward")),
        (
            "generator rubric rollouts unparseable",
            lambda r: (
                "-"
                if not r.get("generator_update")
                else f"{r['generator_update']['unparseable']}/{r['generator_update']['rollouts']}"
            ),
        ),
        ("policy reward, first -> last step (Eq. 12 score)", lambda r: upd(r, "policy", "reward")),
        (
            "policy rollouts unscorable",
            lambda r: (
                "-"
                if not r.get("policy_update")
                else f"{r['policy_update']['unscorable']}/{r['policy_update']['rollouts']}"
            ),
        ),
        ("measured R_disc on P(t)'s sets (Eq. 13)", lambda r: _fmt(r["measure"]["r_disc"])),
        ("measured R_anchor (Eq. 15)", lambda r: _fmt(r["measure"]["r_anchor"])),
        ("anchor gap (Eq. 2)", lambda r: _fmt(r["measure"]["anchor_gap"])),
        (
            "evaluator accuracy, eval slice (strict)",
            lambda r: f"{_fmt(r['measure']['eval_accuracy'])} (n={r['measure']['eval_n']})",
        ),
        ("unscorable verdicts", lambda r: f"{r['measure']['unscorable_verdicts']}/{r['measure']['verdicts']}"),
        ("verifier yes-rate, measured sets (C and anchors)", _yes_rate_cell),
        ("sets with constant Eq. 12 scores (share)", lambda r: _fmt(r["measure"].get("constant_score_sets_share"))),
        ("generator zero-std GRPO groups per step (share)", lambda r: _zero_std_cell(r, "generator")),
        ("policy zero-std GRPO groups per step (share)", lambda r: _zero_std_cell(r, "policy")),
        ("win rate P(t) vs P(0), held-out [95% CI] (tasks/policy_eval.py)", _win_rate_cell),
    ]
    for label, get in rows:
        tab.add_row(label, *(get(r) for r in rounds))
    console.print(tab)
    for r in rounds:
        if r.get("generator_update"):
            g, p = r["generator_update"], r["policy_update"]
            console.print(
                f"round {r['round']}: generator update {g['steps']} steps in {g['seconds']} s; "
                f"policy update {p['steps']} steps in {p['seconds']} s"
            )
            console.print(f"  G({r['round']}) = {r['generator']}\n  P({r['round']}) = {r['policy']}")
    slow = sorted(result["steps"].items(), key=lambda kv: -kv[1]["seconds"])[:6]
    console.print("slowest steps: " + ", ".join(f"{k} {v['seconds']:.0f}s ({v['state']})" for k, v in slow))
    checks = result.get("signal_checks") or []
    if checks:
        console.print(
            styled(("signal checks", "bold"), " (can the figures move? dr_core.scoring.signals.signal_checks)")
        )
    for c in checks:
        mark = {True: ("yes", "green"), False: ("NO", "bold red"), None: ("n/a", "dim")}[c["ok"]]
        console.print(styled("  ", mark, f"  {c['check']}: {c['detail']}"))
    _print_warnings(result.get("warnings"))


@app.command("coevolve")
def coevolve_cmd(
    preset_name: str = typer.Option("tiny", "--preset", help="Preset: tiny (CPU, about ten minutes) or paper (GPU)."),
    rounds: int = typer.Option(1, "--rounds", min=1, help="T: co-evolution rounds."),
    store: Optional[str] = typer.Option(
        None, "--store", envvar="DR_STORE", help="Artifact store: path or s3://bucket/prefix."
    ),
    run_id: str = typer.Option("local", "--run-id", help="Run id: the partition the run's artifacts go to."),
    config_file: Optional[str] = typer.Option(None, "--engines", help="YAML/JSON engine config per role."),
    overrides: list[str] = typer.Option(
        [],
        "--set",
        help="Override a field: round.k=4, generator.max_steps=1, policy.learning_rate=1e-6, measure_start=false.",
    ),
    json_out: Optional[str] = typer.Option(
        None, "--json", help="Also write the result (rounds, steps, checkpoints) here."
    ),
    task_runner: Optional[str] = typer.Option(None, "--task-runner", help=_RUNNER_HELP),
    shards: Optional[int] = typer.Option(None, "--shards", min=1, help=_SHARDS_HELP),
    create_bucket: bool = typer.Option(False, "--create-bucket", help=_CREATE_BUCKET_HELP),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=_VERBOSE_HELP),
) -> None:
    """Run Algorithm 1: per round, update the generator, then the policy, then measure; all as cached Prefect tasks."""
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from flows.settings import configure_prefect

    configure_prefect()
    from pydantic import ValidationError

    from dr_core.config import ConfigError, load_engines_config
    from dr_core.presets import coevolve_preset
    from dr_core.store.artifacts import default_store_url

    fields = _overrides(overrides)
    fields["rounds"] = rounds
    try:
        if config_file:
            fields.setdefault("round", {})["engines"] = load_engines_config(config_file).model_dump()
        if shards:
            fields.setdefault("round", {}).setdefault("scale", {})["shards"] = shards
        cfg = coevolve_preset(preset_name, **fields)
        from flows.coevolve import CoevolveParams, coevolve_flow

        params = CoevolveParams(config=cfg, store=store or default_store_url(), run_id=run_id)
    except (ValidationError, ValueError, ConfigError) as exc:
        fail(error_line(exc))
    _check_outputs(params.store, json_out, create_bucket)
    from dr_core.runs.round_steps import check_inputs

    check_inputs(cfg.round, cfg.policy_eval.data if cfg.policy_eval else None)
    flow_fn = _with_runner(coevolve_flow, task_runner)
    console.print(
        styled(
            ("dr coevolve", "bold"),
            f" preset={cfg.preset} rounds={rounds} store={params.store} run_id={run_id}"
            f" shards={cfg.round.scale.shards} task-runner={task_runner or 'thread'}",
        )
    )
    with showing_progress(console):
        result = flow_fn(params)
    _finish(result, _print_coevolve, json_out)


@app.command("report")
def report_cmd(
    store: Optional[str] = typer.Option(
        None, "--store", envvar="DR_STORE", help="Artifact store: path or s3://bucket/prefix."
    ),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="The run to report on."),
    out: str = typer.Option(..., "--out", help="Directory for report.html (and report.json, the numbers behind it)."),
    examples: int = typer.Option(3, "--examples", min=0, help="Prompts shown with their rubric and verdict matrix."),
    learning: Optional[str] = typer.Option(
        None,
        "--learning",
        help="Also (or only) draw a bench_learning.py result "
        "JSON as learning.html: reward curves, held-out deltas with intervals.",
    ),
) -> None:
    """Write the run's gap analysis as one offline HTML page: Eq. 2 gap, rewards, saturation, accuracy, stale vs
    fresh."""
    from dr_core.report.write import write_report
    from dr_core.store.artifacts import Store, default_store_url

    if run_id is None and learning is None:
        fail("give --run-id (a run's report) or --learning FILE.json (the learning benchmark's page), or both")
    if learning is not None:
        from dr_core.report.learning import write_learning_report

        console.print(f"learning report: {write_learning_report(learning, out)}")
        if run_id is None:
            return

    try:
        target = Store.from_url(store or default_store_url())
    except ValueError as exc:
        fail(error_line(exc))
    path = write_report(
        target.require_exists(),
        run_id,
        out,
        examples,
        warn=lambda m: err_console.print(styled(("warning: ", "bold yellow"), m), soft_wrap=True),
    )
    console.print(f"report: {path}")


@app.command("stale-fresh")
def stale_fresh_cmd(
    store: Optional[str] = typer.Option(
        None, "--store", envvar="DR_STORE", help="Artifact store: path or s3://bucket/prefix."
    ),
    run_id: str = typer.Option(..., "--run-id", help="A co-evolution run (dr coevolve) with at least one round."),
    round_no: Optional[int] = typer.Option(
        None, "--round", min=1, help="Round t: G(t-1) vs G(t) on P(t-1)'s sets (default: latest)."
    ),
    preset_name: Optional[str] = typer.Option(
        None, "--preset", help="Round preset to use instead of the run's recorded config."
    ),
    config_file: Optional[str] = typer.Option(
        None, "--engines", help="YAML/JSON engine config per role (with --preset)."
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override a preset field (with --preset), e.g. --set k=2."),
    verbose: bool = typer.Option(False, "--verbose", envvar="DR_VERBOSE", help=_VERBOSE_HELP),
) -> None:
    """Section 4.4: score P(t-1)'s sets with the stale G(t-1) and the fresh G(t); stages 'stale' and 'fresh'."""
    quiet.apply(verbose)  # before torch, vLLM, TRL and Prefect load
    from flows.settings import configure_prefect

    configure_prefect()
    from pydantic import ValidationError

    from dr_core.store.artifacts import default_store_url

    cfg = _load_config(preset_name, config_file, overrides) if preset_name else None
    from flows.stale_fresh import StaleFreshParams, stale_fresh_flow

    try:
        params = StaleFreshParams(store=store or default_store_url(), run_id=run_id, round_no=round_no, config=cfg)
        from dr_core.store.artifacts import Store

        Store.from_url(params.store).require_exists()
        with showing_progress(console):
            result = stale_fresh_flow(params)
    except (ValidationError, ValueError) as exc:
        fail(error_line(exc))
    t, s = result["round"], result["summary"]
    tab = Table(
        title=f"Stale vs fresh evaluator, run {run_id}, round {t}: P({t - 1})'s sets "
        f"({result['sets']['stage']} samples of round {result['sets']['round']})"
    )
    tab.add_column("")
    tab.add_column(f"stale G({t - 1})", justify="right")
    tab.add_column(f"fresh G({t})", justify="right")
    for label, key in [
        ("anchor gap (Eq. 2)", "anchor_gap"),
        ("spread on C (mean |S_i - S_j|)", "set_spread"),
        ("mean R_disc (Eq. 13)", "r_disc"),
        ("mean R_anchor (Eq. 15)", "r_anchor"),
        ("saturation", "saturation"),
        ("unscorable rollouts", "n_unscorable_rewards"),
    ]:
        tab.add_row(label, *(_fmt(s[k].get(key)) if s else "n/a" for k in ("stale", "fresh")))
    console.print(tab)
    console.print(
        f"stale G({t - 1}) = {result['stale_generator']}\nfresh G({t}) = {result['fresh_generator']}\n"
        f"next: dr report --store {params.store} --run-id {run_id} --out DIR"
    )


def main() -> None:
    from cli.app import install_signal_handlers

    install_signal_handlers()
    app()


if __name__ == "__main__":
    main()
