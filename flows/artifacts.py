"""A run's results as Prefect artifacts, so the Prefect UI shows them (Artifacts, or the flow run's Artifacts tab).

- ``dr-<run>-summary``: a table artifact, the table the terminal prints (``dr_core.report.tables``): one row per
  figure, one column per round (``dr coevolve``, the anchor refresh) or the round's figures (``dr round``).
- ``dr-<run>-signals``: a markdown artifact with the signal checks and the degenerate-signal warnings in words.

A co-evolution run publishes both after every round; Prefect keeps each publication as a new version of the same
key, so the latest is the run so far. ``<run>`` is the run id in the characters a key may hold (lowercase letters,
digits, dashes). Publishing is best effort: an API that refuses is one warning in the flow's log, never a failed run.
"""

from __future__ import annotations

import logging
import re

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.exceptions import MissingContextError

from dr_core.report import monitors
from dr_core.report.tables import coevolve_table, round_header, round_table


def artifact_key(run_id: str, what: str) -> str:
    """``dr-<run>-<what>`` with every character a Prefect key may not hold made a dash."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", run_id.lower())).strip("-") or "run"
    return f"dr-{slug}-{what}"


def coevolve_rows(rounds: list[dict]) -> list[dict[str, str]]:
    """The co-evolution table as artifact rows: {"figure", one column per round}."""
    headers = [round_header(r) for r in rounds]
    return [{"figure": label, **dict(zip(headers, cells))} for label, cells in coevolve_table(rounds)]


def markdown_table(rows: list[dict[str, str]]) -> str:
    """Artifact rows as a markdown table (the tracker's ``summary.md``)."""
    if not rows:
        return "no rows\n"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def signals_markdown(run_id: str, checks: list[dict], warnings: list[str], found: list[dict] | None = None) -> str:
    """The signal checks, the warnings and the reward-hacking monitors' findings, as markdown.

    A check is yes / NO / n/a with its detail; the findings are ``dr_core.report.monitors``'."""
    mark = {True: "yes", False: "**NO**", None: "n/a"}
    lines = [f"# Signals of run {run_id}", "", "Can the figures move? (`dr_core.scoring.signals`)", ""]
    lines += [f"- {mark[c['ok']]}: {c['check']} ({c['detail']})" for c in checks] or ["- no checks yet"]
    lines += ["", "## Warnings", ""] + ([f"- {w}" for w in warnings] or ["- none"])
    if found:
        lines += ["", "## Reward-hacking monitors", "", monitors.markdown(found).rstrip()]
    return "\n".join(lines) + "\n"


def publish_coevolve(
    run_id: str, rounds: list[dict], checks: list[dict], warnings: list[str], found: list[dict] | None = None
) -> bool:
    """Publish a co-evolution run's table and signals (``rounds``: the result's round dicts so far; ``found``: the
    monitors' findings)."""
    return _publish(
        lambda: create_table_artifact(
            coevolve_rows(rounds),
            key=artifact_key(run_id, "summary"),
            description=f"Co-evolution run {run_id}, rounds {rounds[0]['round']}-{rounds[-1]['round']}",
        ),
        lambda: create_markdown_artifact(
            signals_markdown(run_id, checks, warnings, found),
            key=artifact_key(run_id, "signals"),
            description=f"Signal checks and warnings of run {run_id}",
        ),
    )


def round_rows(round_no: int, summary: dict) -> list[dict[str, str]]:
    """One measured round's figures as artifact rows: {"figure", "round t"}."""
    return [{"figure": label, f"round {round_no}": value} for label, value in round_table(summary)]


def publish_round(run_id: str, round_no: int, summary: dict) -> bool:
    """Publish one measured round's figures (``dr round``)."""
    return _publish(
        lambda: create_table_artifact(
            round_rows(round_no, summary),
            key=artifact_key(run_id, "summary"),
            description=f"Round {round_no} of run {run_id}",
        )
    )


def _publish(*creates) -> bool:
    """Run each artifact creation; True if all went through, else one warning line and False."""
    try:
        for create in creates:
            create()
    except Exception as e:  # the run's results are in the store: a refused artifact must not fail the run
        _logger().warning(f"Prefect artifacts not published ({type(e).__name__}: {e}); the run goes on")
        return False
    return True


def _logger():
    """The flow run's logger inside a run, else this module's."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)
