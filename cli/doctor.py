"""``dr doctor``: what this machine gives the project, one line per check (ok / problem / note), each problem with
its fix; exit 1 when there is a problem. The checks are ``dr_core.runs.doctor``; this module only renders them.

    dr doctor
    dr doctor --store s3://bucket/prefix --json
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Optional

import click
import typer

from cli.options import STORE_HELP
from cli.output import console, debug_of, styled

_STYLES = {"ok": "green", "problem": "bold red", "note": "yellow"}


def doctor(
    store: Optional[str] = typer.Option(None, "--store", envvar="DR_STORE", help=STORE_HELP),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"problems": N, "findings": [{name, status, detail, fix}, ...]} as JSON.'
    ),
    timeout: float = typer.Option(
        3.0, "--timeout", min=0.1, help="Seconds each network check (the S3 store, the Prefect API) may take."
    ),
) -> None:
    """Check this machine: bf16, cores, memory, disk, bundled models, store, Prefect API, pinned versions.

    Never prepares or installs anything: it only makes and removes a temp file to prove a directory writable.

    Exit status: 0 when no check found a problem, 1 when at least one did (each problem line ends with its fix).
    """
    from dr_core.runs.doctor import problems, run_checks

    findings = run_checks(store, timeout_s=timeout, raise_errors=debug_of(click.get_current_context(silent=True)))
    bad = problems(findings)
    if as_json:
        typer.echo(json.dumps({"problems": len(bad), "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        _print(findings, len(bad))
    if bad:
        raise typer.Exit(1)


def _print(findings, n_problems: int) -> None:
    """One line per finding: status, name, detail (and ``— fix: ...`` on a problem), never wrapped."""
    width = max(len(f.name) for f in findings)
    for f in findings:
        fix = f" — fix: {f.fix}" if f.fix else ""
        console.print(
            styled((f"{f.status:<8}", _STYLES.get(f.status, "")), (f"{f.name:<{width}}  ", "bold"), f.detail + fix),
            soft_wrap=True,
        )
    if n_problems:
        plural = "s" if n_problems > 1 else ""
        summary = (
            f"{n_problems} problem{plural}: fix as each problem line says, then run `dr doctor` again",
            "bold red",
        )
    else:
        summary = ("no problems: this machine is ready for the project", "bold green")
    console.print(styled(summary), soft_wrap=True)
