"""Scheduled anchor-refresh retraining: pick up new ranked-anchor files dropped under a store prefix, validate them,
ingest them into the ``anchors`` table, filter them with ``sql/anchor_filter.sql``, and run a co-evolution round
from the run's latest generator and policy checkpoints on the lists that pass.

    python -m flows.anchor_refresh --store ./store                 # once, by hand
    prefect deploy --all --prefect-file infra/prefect.yaml         # on a schedule (cron), on a process work pool

A file is new when its content hash is not yet an ingested dataset (``refresh-<name>-<sha8>``), so the same file is
never ingested twice and an unchanged prefix makes a scheduled run a no-op. Every new file is validated before any
is ingested: one malformed line fails the run with the file, line and field, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import flow, task

from dr_core.store import checkpoints
from dr_core.store import sql
from dr_core.datasets import DataError, load_ranked
from dr_core.paths import cache_dir
from dr_core.presets import coevolve_preset
from dr_core.store.artifacts import Store, default_store_url
from dr_core.runs.store_commands import ingest
from tasks.options import retry_on_transient

LIGHT = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_on_transient)


def _dataset(path: str, sha: str) -> str:
    stem = "".join(c if c.isalnum() or c in "-." else "-" for c in Path(path).stem)[:60]
    return f"refresh-{stem}-{sha[:8]}"


@task(name="find-new-anchor-files", **LIGHT)
def find_new(store: str, incoming: str) -> list[dict]:
    """``*.jsonl`` under ``<store>/<incoming>`` whose content has not been ingested yet: [{path, sha256, dataset}]."""
    s = Store.from_url(store)
    root = f"{s.root}/{incoming.strip('/')}"
    files = sorted(p for p in (s.fs.find(root) if s.fs.exists(root) else []) if p.endswith(".jsonl"))
    done = {u.split("dataset=")[1].split("/")[0] for u in s.parts("anchors") if "dataset=refresh-" in u}
    new = []
    for path in files:
        sha = hashlib.sha256(s.fs.cat_file(path)).hexdigest()
        if _dataset(path, sha) not in done:
            new.append({"path": path, "sha256": sha, "dataset": _dataset(path, sha)})
    return new


@task(name="validate-and-ingest", **LIGHT)
def validate_and_ingest(store: str, files: list[dict]) -> list[str]:
    """Validate every file first (DataError names file, line, field; nothing written), then ingest each."""
    s = Store.from_url(store)
    local = cache_dir() / "refresh" / "incoming"
    local.mkdir(parents=True, exist_ok=True)
    loaded = []
    for f in files:
        dest = local / f"{f['dataset']}.jsonl"
        s.fs.get_file(f["path"], str(dest))
        try:
            load_ranked(dest)  # the first bad line fails the run before any write
        except DataError as exc:
            raise DataError(f"{s.url}/{f['path'][len(s.root) + 1:]}", exc.line, exc.field, exc.message) from None
        loaded.append((f, dest))
    return [ingest("anchors", dest, store, dataset=f["dataset"])[0] for f, dest in loaded]


@task(name="filter-anchors", **LIGHT)
def filter_anchors(store: str, datasets: list[str], min_responses: int) -> dict:
    """Run sql/anchor_filter on the new datasets; write the kept lists as one JSONL (named by content) for the round."""
    s = Store.from_url(store)
    con = s.connect()
    kept = []
    for ds in datasets:
        ids = set(sql.run(con, "anchor_filter", {"min_responses": min_responses, "dataset": ds})
                  .column("prompt_id").to_pylist())
        rows = con.execute("SELECT prompt_id, any_value(prompt), list(response ORDER BY rank), "
                           "list(score ORDER BY rank) FROM anchors WHERE dataset = ? GROUP BY prompt_id "
                           "ORDER BY prompt_id", [ds]).fetchall()
        kept += [{"id": pid, "prompt": prompt, "responses": resp, "scores": None if None in scores else scores}
                 for pid, prompt, resp, scores in rows if pid in ids]
    text = "".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in kept)
    path = cache_dir() / "refresh" / f"kept-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    path.write_text(text, encoding="utf-8")
    return {"path": str(path), "kept": len(kept)}


@flow(name="dynamicrubric-anchor-refresh", log_prints=True)
def anchor_refresh_flow(store: str | None = None, incoming: str = "incoming/anchors", run_id: str = "refresh",
                        preset: str = "tiny", min_responses: int = 7, n_prompts: int | None = None,
                        train: bool = True) -> dict:
    """New anchor files -> validate -> ingest -> anchor_filter -> one co-evolution round from the latest checkpoints
    (``train=False``: stop after filtering)."""
    store = store or default_store_url()
    new = find_new(store, incoming)
    if not new:
        print(f"no new anchor files under {incoming}")
        return {"new_files": 0, "kept": 0, "trained": False}
    datasets = [f["dataset"] for f in new]
    validate_and_ingest(store, new)
    kept = filter_anchors(store, datasets, min_responses)
    print(f"{len(new)} new file(s), {kept['kept']} anchor list(s) pass anchor_filter")
    result = {"new_files": len(new), "datasets": datasets, "kept": kept["kept"], "trained": False}
    if not train or kept["kept"] == 0:
        return result
    from flows.coevolve import CoevolveParams, coevolve_flow

    s = Store.from_url(store)
    gen, pol = checkpoints.latest(s, run_id, "generator"), checkpoints.latest(s, run_id, "policy")
    start = 1 + max([c["round"] for c in (gen, pol) if c] or [0])
    round_fields = {"anchors": kept["path"], "min_anchor_responses": min_responses}
    if n_prompts:
        round_fields["n_prompts"] = n_prompts
    cfg = coevolve_preset(preset, round=round_fields, measure_start=False)

    def ref(c):
        if c is None:
            return None
        from dr_core.config import EngineConfig
        from tasks.runtime import model_id

        return {"uri": c["uri"], "sha256": model_id(EngineConfig(model=str(checkpoints.materialise(s, c["uri"]))))}

    out = coevolve_flow(CoevolveParams(config=cfg, store=store, run_id=run_id, start_round=start,
                                       generator_start=ref(gen), policy_start=ref(pol)))
    return result | {"trained": True, "round": start, "generator": out["generator"]["uri"],
                     "policy": out["policy"]["uri"], "warnings": out["warnings"]}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Run the anchor refresh once.")
    ap.add_argument("--store", default=None)
    ap.add_argument("--incoming", default="incoming/anchors")
    ap.add_argument("--run-id", default="refresh")
    ap.add_argument("--no-train", action="store_true")
    a = ap.parse_args()
    from flows.settings import configure_prefect

    configure_prefect()
    print(anchor_refresh_flow(store=a.store, incoming=a.incoming, run_id=a.run_id, train=not a.no_train))
