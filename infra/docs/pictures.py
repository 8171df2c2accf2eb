"""The pictures of docs/how-to/track-runs.md, drawn from a real run: what MLflow holds for it and what its monitors
found.

- ``tracking-steps.svg``: TRL's per-step metrics of each GRPO update of the run, read back from the MLflow store
  through MLflow's own client (one line per nested run);
- ``monitors.svg``: the reward-hacking monitors' chart of ``dr report`` for the run (each figure as a share of its
  threshold), from the run's rows in the store.

    .venv/bin/python infra/docs/pictures.py --store ./store --run-id demo --out docs/img
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dr_core.report import render  # noqa: E402
from dr_core.report.monitors import run_monitors  # noqa: E402
from dr_core.report.svg import line_chart  # noqa: E402
from dr_core.runs.tracking import EXPERIMENT, tracking_uri  # noqa: E402
from dr_core.store.artifacts import Store  # noqa: E402


def tracking_steps(store: str, run_id: str, metric: str) -> str:
    """``metric`` per GRPO step of every nested run of ``run_id``'s co-evolution parent, as one line chart."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(store))
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        raise SystemExit(f"{tracking_uri(store)} has no {EXPERIMENT!r} experiment: run with --track mlflow first")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`dr.run_id` = '{run_id}'")
    children = sorted(
        (r for r in runs if "mlflow.parentRunId" in r.data.tags),
        key=lambda r: (r.data.tags["dr.role"], r.info.run_name),
    )
    series = [
        (r.info.run_name, sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, metric)))
        for r in children
    ]
    series = [(name, pts) for name, pts in series if pts]
    if not series:
        raise SystemExit(f"no nested run of {run_id!r} logged {metric!r}")
    return line_chart(
        series, "GRPO step", f"{metric} (TRL's name)", title=f"MLflow: {metric} per step of each update, run {run_id}"
    )


def monitors_chart(store: str, run_id: str) -> str:
    """The monitors' chart of ``dr report`` for ``run_id`` (default thresholds)."""
    found = run_monitors(Store.from_url(store).connect(), run_id)
    chart = render._monitors({"monitors": found})["chart"]
    if chart is None:
        raise SystemExit(f"no monitor of {run_id!r} had a figure to draw: {[f['line'] for f in found]}")
    return str(chart)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--metric", default="reward", help="the per-step metric drawn (default: TRL's reward)")
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, svg in (
        ("tracking-steps.svg", tracking_steps(args.store, args.run_id, args.metric)),
        ("monitors.svg", monitors_chart(args.store, args.run_id)),
    ):
        standalone = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)  # a file, not inline
        (args.out / name).write_text(standalone + "\n", encoding="utf-8")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
