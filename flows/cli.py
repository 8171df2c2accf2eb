"""The installed ``dr`` entry point: dr_core's commands plus the Prefect-orchestrated ones.

    dr --help
    dr round --preset tiny --store ./store --run-id demo
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from dr_core.cli import app, console, fail


def _load_config(preset_name: str, config_file: Optional[str], overrides: list[str]):
    from pydantic import ValidationError

    from dr_core.config import ConfigError, load_engines_config
    from dr_core.presets import preset

    fields: dict = {}
    for item in overrides:
        if "=" not in item:
            fail(f"--set {item!r}: expected FIELD=VALUE, e.g. --set n_prompts=2")
        k, v = item.split("=", 1)
        try:
            fields[k] = json.loads(v)
        except json.JSONDecodeError:
            fields[k] = v
    try:
        if config_file:
            fields["engines"] = load_engines_config(config_file)
        return preset(preset_name, **fields)
    except (ValidationError, ValueError, ConfigError) as exc:
        fail(str(exc))


def _print_round(result: dict) -> None:
    s = result["summary"]
    tab = Table(title=f"Round {result['round']} of run {result['run_id']}", show_header=False)
    for label, key in [("prompts", "prompts"), ("response sets", "sets"), ("responses", "responses"),
                       ("rubric rollouts", "rubric_rollouts"), ("rubric items", "rubric_items"),
                       ("unusable rubrics (unscorable)", "rubric_failures"), ("verdicts", "verdicts"),
                       ("unscorable verdicts", "unscorable_verdicts"), ("unscorable scores", "unscorable_scores"),
                       ("mean R_disc (Eq. 13)", "r_disc"), ("mean R_anchor (Eq. 15)", "r_anchor"),
                       ("mean anchor gap (Eq. 2)", "anchor_gap"), ("evaluator accuracy (eval slice, strict)", "eval_accuracy"),
                       ("eval examples", "eval_n")]:
        v = s.get(key)
        tab.add_row(label, "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v))
    console.print(tab)
    steps = Table(title="Steps")
    steps.add_column("step")
    steps.add_column("state")
    steps.add_column("seconds", justify="right")
    for name, info in result["steps"].items():
        steps.add_row(name, info["state"], f"{info['seconds']:.1f}")
    console.print(steps)


@app.command("round")
def round_cmd(
    preset_name: str = typer.Option("tiny", "--preset", help="Preset: tiny (CPU, minutes) or paper (GPU)."),
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help="Artifact store: path or s3://bucket/prefix."),
    run_id: str = typer.Option("local", "--run-id", help="Run id: the partition the round's artifacts go to."),
    round_no: int = typer.Option(1, "--round", help="Round number t."),
    config_file: Optional[str] = typer.Option(None, "--engines", help="YAML/JSON engine config per role."),
    overrides: list[str] = typer.Option([], "--set", help="Override a preset field, e.g. --set n_prompts=2."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the evaluator-accuracy step."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the result (summary, steps, URIs) here."),
) -> None:
    """Run one DynamicRubric round (sample, rubrics, verify, score, evaluate) as cached Prefect tasks."""
    from flows.settings import configure_prefect

    configure_prefect()
    cfg = _load_config(preset_name, config_file, overrides)
    from pydantic import ValidationError

    from dr_core.store import default_store_url

    from flows.round import RoundParams, round_flow

    try:
        params = RoundParams(config=cfg, store=store or default_store_url(), run_id=run_id, round_no=round_no,
                             run_eval=not no_eval)
    except ValidationError as exc:
        fail(str(exc))
    console.print(f"[bold]dr round[/] preset={cfg.preset} store={params.store} run_id={run_id} round={round_no}")
    result = round_flow(params)
    _print_round(result)
    if json_out:
        from dr_core.eval_runs import write_json_atomic

        write_json_atomic(json_out, result)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
