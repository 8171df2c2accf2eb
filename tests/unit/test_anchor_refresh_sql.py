"""sql/anchor_lists.sql: the ranked lists of one ingested dataset, in the shape of an anchors file (what the anchor
refresh writes for its round), and the refresh's core functions on a local store (no Prefect)."""

from __future__ import annotations

import json

from dr_core.datasets import load_ranked
from dr_core.paths import bundled
from dr_core.runs import anchor_refresh as refresh
from dr_core.runs.ingest import ingest
from dr_core.store import sql
from dr_core.store.artifacts import Store


def _lines(n: int) -> list[str]:
    return bundled("anchors_alpacaeval.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:n]


def test_anchor_lists_returns_each_list_by_rank(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(_lines(3)), encoding="utf-8")
    ingest("anchors", src, str(tmp_path / "store"), dataset="d1")
    con = Store.from_url(str(tmp_path / "store")).connect()
    rows = sql.run(con, "anchor_lists", {"dataset": "d1"}).to_pylist()
    want = sorted(load_ranked(src), key=lambda r: r.id)
    assert [r["prompt_id"] for r in rows] == [w.id for w in want]
    assert [r["responses"] for r in rows] == [list(w.responses) for w in want]
    assert sql.run(con, "anchor_lists", {"dataset": "other"}).num_rows == 0


def test_refresh_finds_each_file_once_and_keeps_what_the_filter_keeps(tmp_path):
    store = Store.from_url(str(tmp_path / "store"))
    inc = tmp_path / "store" / "incoming" / "anchors"
    inc.mkdir(parents=True)
    (inc / "b1.jsonl").write_text("".join(_lines(4)), encoding="utf-8")
    (inc / "notes.txt").write_text("not an anchor file", encoding="utf-8")
    new = refresh.find_new(store, "incoming/anchors")
    assert [f["uri"].rsplit("/", 1)[1] for f in new] == ["b1.jsonl"]
    assert new[0]["dataset"].startswith("refresh-b1-") and len(new[0]["sha256"]) == 64
    parts = refresh.validate_and_ingest(store, new)
    assert len(parts) == 1 and refresh.find_new(store, "incoming/anchors") == []  # ingested: no longer new
    kept = refresh.filter_anchors(store, [new[0]["dataset"]], min_responses=7)
    con = store.connect()
    passing = sql.run(con, "anchor_filter", {"dataset": new[0]["dataset"], "min_responses": 7}).column("prompt_id")
    written = [json.loads(line)["id"] for line in open(kept["path"], encoding="utf-8")]
    assert kept["kept"] == len(written) == len(passing) and written == sorted(passing.to_pylist())
    assert refresh.filter_anchors(store, [new[0]["dataset"]], min_responses=50)["kept"] == 0
