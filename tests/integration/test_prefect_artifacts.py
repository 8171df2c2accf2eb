"""A run's Prefect artifacts written by a real flow and read back through Prefect's own client (a temporary Prefect
server: prefect_harness). The co-evolution publication is ``flows.coevolve.publish_rounds``, what the flow calls after
each round; test_round_flow.py reads the artifact a real ``round_flow`` run published."""

from __future__ import annotations

import json


def read_artifacts(key: str) -> list:
    """Every version of the artifact ``key``, newest first, through Prefect's API."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])), sort=ArtifactSort.CREATED_DESC
        )


def table_rows(artifact) -> list[dict]:
    """A table artifact's rows (Prefect stores them as JSON text)."""
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def _rounds():
    from dr_core.runs import round_steps
    from dr_core.runs.refs import CoevolveRound

    verdicts = [dict(verdict=v) for v in (True, True, False, None)]
    measure = round_steps.summarise([], [], [], verdicts, [], [], None)
    return [CoevolveRound(round=t, generator=f"g{t}", policy=f"p{t}", measure=measure) for t in (0, 1)]


def test_each_round_publishes_a_new_version_of_the_runs_table_and_signals(prefect_harness):
    from prefect import flow

    from flows.coevolve import publish_rounds

    rounds = _rounds()

    @flow(name="publish-twice")
    def publish_twice() -> list[bool]:
        return [publish_rounds("Art_Run", rounds[:1]), publish_rounds("Art_Run", rounds)]

    assert publish_twice() == [True, True]
    tables = read_artifacts("dr-art-run-summary")
    assert [a.type for a in tables] == ["table", "table"]  # one version per round, the newest first
    yes = next(r for r in table_rows(tables[0]) if r["figure"] == "verifier yes-rate, measured sets (C and anchors)")
    assert yes == {"figure": yes["figure"], "round 0 (start)": "0.6667 (n=3)", "round 1": "0.6667 (n=3)"}
    assert list(table_rows(tables[1])[0]) == ["figure", "round 0 (start)"]  # the first version: round 0 alone
    (signals, _) = read_artifacts("dr-art-run-signals")
    assert signals.type == "markdown" and "# Signals of run Art_Run" in signals.data
    assert "verifier yes-rate on the round's sets" in signals.data
    assert tables[0].flow_run_id is not None and tables[0].flow_run_id == signals.flow_run_id


def test_a_prefect_api_that_refuses_is_a_warning_and_the_flow_completes(prefect_harness, monkeypatch):
    from prefect import flow

    import flows.artifacts as artifacts
    from flows.coevolve import publish_rounds

    def refused(*_args, **_kwargs):
        raise ConnectionError("the Prefect API refused")

    monkeypatch.setattr(artifacts, "create_table_artifact", refused)

    @flow(name="publish-refused")
    def publish_refused() -> bool:
        return publish_rounds("refused", _rounds())

    assert publish_refused() is False
    assert read_artifacts("dr-refused-summary") == [] and read_artifacts("dr-refused-signals") == []
