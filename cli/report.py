"""``dr report``: a run's gap analysis as one offline HTML page (dr_core/report/), and the learning benchmark's page.

dr report --store ./store --run-id demo --out ./report
dr report --learning infra/benchmarks/results/bench_learning.json --out ./report
"""

from __future__ import annotations

from typing import Optional

import typer

from cli.options import ARTIFACT_STORE_HELP
from cli.output import console, err_console, error_line, fail, styled


def report_cmd(
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help=ARTIFACT_STORE_HELP),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="The run to report on."),
    out: str = typer.Option(..., "--out", help="Directory for report.html (and report.json, the numbers behind it)."),
    examples: int = typer.Option(3, "--examples", min=0, help="Prompts shown with their rubric and verdict matrix."),
    learning: Optional[str] = typer.Option(
        None,
        "--learning",
        help="Also (or only) draw a bench_learning.py or bench_ifeval.py result "
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
