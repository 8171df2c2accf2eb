"""Prefect tasks of the scheduled anchor refresh (``flows/anchor_refresh.py``): each calls one
``dr_core.runs.anchor_refresh`` function on the store. Light retries: they touch the store, never a model."""

from __future__ import annotations

from prefect import task

from dr_core.config import EngineConfig
from dr_core.constants import TRAINED_ROLES
from dr_core.runs import anchor_refresh as refresh
from dr_core.store import checkpoints
from dr_core.store.artifacts import Store
from tasks.options import retry_on_transient
from tasks.runtime import model_id

LIGHT = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_on_transient)


@task(name="find-new-anchor-files", **LIGHT)
def find_new(store: str, incoming: str) -> list[dict]:
    """``*.jsonl`` under ``<store>/<incoming>`` not ingested yet: [{uri, sha256, dataset}]."""
    return refresh.find_new(Store.from_url(store), incoming)


@task(name="validate-and-ingest", **LIGHT)
def validate_and_ingest(store: str, files: list[dict]) -> list[str]:
    """Validate every file first (nothing written on a bad line), then ingest each."""
    return refresh.validate_and_ingest(Store.from_url(store), files)


@task(name="filter-anchors", **LIGHT)
def filter_anchors(store: str, datasets: list[str], min_responses: int) -> dict:
    """The lists that pass sql/anchor_filter, as one anchors file for the round: {"path", "kept"}."""
    return refresh.filter_anchors(Store.from_url(store), datasets, min_responses)


@task(name="start-checkpoints", **LIGHT)
def start_checkpoints(store: str, run_id: str) -> dict:
    """Where the refresh round starts: the run's latest generator and policy checkpoints as model refs
    ({"uri", "fingerprint": model identity}, None for a role never trained) and the round number after them."""
    s = Store.from_url(store)
    latest = {role: checkpoints.latest(s, run_id, role) for role in TRAINED_ROLES}

    def ref(c):
        if c is None:
            return None
        local = checkpoints.materialise(s, c["uri"])
        return {"uri": c["uri"], "fingerprint": model_id(EngineConfig(model=str(local)))}

    return {
        "round": 1 + max([c["round"] for c in latest.values() if c] or [0]),
        "generator": ref(latest["generator"]),
        "policy": ref(latest["policy"]),
    }
