"""The ``dr`` command line: the commands that need no orchestrator live here; ``flows/cli.py`` adds the Prefect
ones (round, coevolve) to this same app and is the installed entry point.

    dr --help
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="dr",
    help="dynamicrubric: co-evolve a rubric generator and a policy (DynamicRubric), score, query and report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print a clear error on stderr and exit non-zero (nothing has been written)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@app.command()
def demo() -> None:
    """Score the bundled hand-labelled example with the math core and print the table (no model needed)."""
    from dr_core.demo import run_demo

    res = run_demo()
    console.print(f"[bold]Prompt:[/] {res.prompt}")
    console.print(f"[dim]{res.note}[/]\n")
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


# -- artifact store: ingest, ad-hoc SQL and named queries (logic in dr_core/store_cli.py) -----------------------
_STORE_HELP = "store URL: a local directory or s3://bucket/prefix (S3 endpoint/keys from AWS_* variables)"
_FORMAT_HELP = "output format: table | csv | json"


def _print_result(table, fmt: str) -> None:
    from dr_core.store_cli import CommandError, render

    try:
        out = render(table, fmt)
    except CommandError as exc:
        fail(str(exc))
    if isinstance(out, str):
        typer.echo(out, nl=False)
    else:
        console.print(out)


@app.command()
def ingest(
    kind: str = typer.Argument(..., help="anchors | prompts"),
    file: Path = typer.Argument(..., help="JSON Lines file (ranked anchor lists, or prompts)"),
    store: str = typer.Option(None, "--store", envvar="DR_STORE", help=_STORE_HELP),
    dataset: str = typer.Option(None, "--dataset", help="dataset name (default: the file's stem); re-ingest replaces it"),
) -> None:
    """Validate a whole file, then write it to the store's anchors or prompts table (nothing is written if invalid)."""
    from dr_core.store_cli import CommandError, ingest as do_ingest

    try:
        uri, n = do_ingest(kind, file, store, dataset)
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
    from dr_core.store_cli import CommandError, run_sql

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
    from dr_core.store_cli import CommandError, run_query

    try:
        result = run_query(name, store, param)
    except CommandError as exc:
        fail(str(exc))
    _print_result(result, fmt)
