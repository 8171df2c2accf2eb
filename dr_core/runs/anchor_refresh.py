"""What the scheduled anchor refresh does, without Prefect: find anchor files dropped under a store prefix that
have not been ingested, validate every one before ingesting any, and keep the lists that pass
``sql/anchor_filter.sql`` as one anchors file for the co-evolution round (``flows/anchor_refresh.py``).

A file is new when its content hash is not yet an ingested dataset (``refresh-<name>-<sha8>``): the same file is
never ingested twice, and an unchanged prefix makes a scheduled run a no-op.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dr_core.datasets import DataError, load_ranked
from dr_core.paths import cache_dir
from dr_core.runs.ingest import ingest
from dr_core.store import sql
from dr_core.store.artifacts import Store
from dr_core.store.atomic import write_atomic

PREFIX = "refresh-"


def dataset_name(uri: str, sha: str) -> str:
    """The dataset a dropped file is ingested as: ``refresh-<stem>-<sha8>`` (stem reduced to [A-Za-z0-9.-])."""
    stem = "".join(c if c.isalnum() or c in "-." else "-" for c in Path(uri).stem)[:60]
    return f"{PREFIX}{stem}-{sha[:8]}"


def find_new(store: Store, incoming: str) -> list[dict]:
    """``*.jsonl`` under ``<store>/<incoming>`` whose content has not been ingested yet: [{uri, sha256, dataset}]."""
    done = {u.split("dataset=")[1].split("/")[0] for u in store.parts("anchors") if f"dataset={PREFIX}" in u}
    new = []
    for uri in store.files_under(incoming, ".jsonl"):
        sha = hashlib.sha256(store.read_bytes(uri)).hexdigest()
        if dataset_name(uri, sha) not in done:
            new.append({"uri": uri, "sha256": sha, "dataset": dataset_name(uri, sha)})
    return new


def validate_and_ingest(store: Store, files: list[dict]) -> list[str]:
    """Validate every file first (DataError names the file in the store, line and field; nothing is written),
    then ingest each into ``anchors`` under its dataset. Returns the written part URIs."""
    local = cache_dir() / "refresh" / "incoming"
    local.mkdir(parents=True, exist_ok=True)
    loaded = []
    for f in files:
        dest = local / f"{f['dataset']}.jsonl"
        write_atomic(dest, store.read_bytes(f["uri"]))
        try:
            load_ranked(dest)  # the first bad line fails the run before any write
        except DataError as exc:
            raise DataError(f["uri"], exc.line, exc.field, exc.message) from None
        loaded.append((f, dest))
    return [ingest("anchors", dest, store.url, dataset=f["dataset"])[0] for f, dest in loaded]


def filter_anchors(store: Store, datasets: list[str], min_responses: int) -> dict:
    """The lists of ``datasets`` that pass sql/anchor_filter, written as one anchors JSONL: {"path", "kept"}. The
    file is named by its content, so the round's cache sees the same file for the same lists."""
    con = store.connect()
    kept = []
    for ds in datasets:
        ids = set(
            sql.run(con, "anchor_filter", {"min_responses": min_responses, "dataset": ds})
            .column("prompt_id")
            .to_pylist()
        )
        for r in sql.run(con, "anchor_lists", {"dataset": ds}).to_pylist():
            if r["prompt_id"] in ids:
                scores = None if None in r["scores"] else r["scores"]
                kept.append(
                    {"id": r["prompt_id"], "prompt": r["prompt"], "responses": r["responses"], "scores": scores}
                )
    text = "".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in kept)
    path = cache_dir() / "refresh" / f"kept-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    return {"path": str(path), "kept": len(kept)}
