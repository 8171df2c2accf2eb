"""The stale-versus-fresh flow in-process on the real model: P(0)'s sets (hand-written) scored by the stale G(0)
and the fresh G(1), written as stages stale/fresh of round 1; a re-run does no model work; the report shows the
comparison. G(1) is the default model's files under another checkpoint name (symlinks), so the test needs no
training and the session engine serves both generators."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]

MODEL_STEPS = ["generate-rubrics", "verify"]


@pytest.fixture()
def run_store(tmp_path, micro_round, default_model_dir, vllm_engine):
    from dr_core.config import DEFAULT_MODEL
    from dr_core.constants import COMPLETE_MARKER
    from dr_core.runs import round_steps as pipeline
    from dr_core.store import checkpoints
    from dr_core.store.artifacts import Store
    from flows.steps import with_models
    from tasks.runtime import adopt_engine

    s = Store.from_url(str(tmp_path / "store"))
    prompt_rows, _ = pipeline.select_inputs(micro_round)
    s.write(
        "samples",
        [
            dict(
                stage="measure",
                set_id=i,
                prompt_id=p["prompt_id"],
                response_idx=j,
                policy_ckpt="P0",
                response=text,
                prompt_tokens=None,
                response_tokens=None,
            )
            for i, p in enumerate(prompt_rows)
            for j, text in enumerate(
                ["A short answer.", "A longer answer that explains the steps, gives an example and a caveat."]
            )
        ],
        part="measure-samples",
        run_id="sf",
        round=0,
    )
    uri = checkpoints.checkpoint_uri(s, "sf", 1, "generator")
    local = tmp_path / "store" / uri[len(s.url) + 1 :]
    local.mkdir(parents=True)
    for f in default_model_dir.iterdir():
        if f.is_file() and f.name != COMPLETE_MARKER:
            (local / f.name).symlink_to(f)
    (local / COMPLETE_MARKER).write_text("complete\n")
    checkpoints.register(s, "sf", 1, "generator", uri, parent=DEFAULT_MODEL)
    fresh = with_models(micro_round, s, uri, DEFAULT_MODEL).engines.generator
    adopt_engine(fresh, vllm_engine)
    return s


def test_stale_and_fresh_score_the_same_sets(prefect_harness, micro_round, run_store, tmp_path):
    from dr_core.report import write as report
    from flows.stale_fresh import StaleFreshParams, stale_fresh_flow

    params = StaleFreshParams(store=run_store.url, run_id="sf", config=micro_round)
    first = stale_fresh_flow(params)
    assert first["round"] == 1 and first["sets"]["stage"] == "measure" and first["sets"]["round"] == 0
    assert all(
        first["steps"][f"{st}/{name}"]["state"] == "Completed" for st in ("stale", "fresh") for name in MODEL_STEPS
    )
    con = run_store.connect()
    per_stage = dict(con.sql("SELECT stage, count(*) FROM samples WHERE round = 1 GROUP BY stage").fetchall())
    assert per_stage == {"stale": 4, "fresh": 4}
    # same responses under both stages, rubrics from two different generator checkpoints
    texts = con.sql(
        "SELECT stage, list(response ORDER BY set_id, response_idx) FROM samples WHERE round = 1 GROUP BY stage"
    ).fetchall()
    assert texts[0][1] == texts[1][1]
    gens = dict(
        con.sql("SELECT stage, any_value(generator_ckpt) FROM rubrics WHERE round = 1 GROUP BY stage").fetchall()
    )
    assert gens["stale"] != gens["fresh"] and gens["fresh"].startswith("generator@")
    for table in ("verdicts", "scores", "rewards"):
        got = {r[0] for r in con.sql(f"SELECT DISTINCT stage FROM {table} WHERE round = 1").fetchall()}
        assert got == {"stale", "fresh"}, table
    s = first["summary"]
    assert s["round"] == 1 and {"anchor_gap", "r_disc", "saturation"} <= set(s["stale"]) | set(s["fresh"])

    again = stale_fresh_flow(params)
    assert all(again["steps"][f"{st}/{name}"]["state"] == "Cached" for st in ("stale", "fresh") for name in MODEL_STEPS)
    assert again["summary"] == s

    html = report.write_report(run_store, "sf", tmp_path / "report").read_text(encoding="utf-8")
    section = html.split('<section id="stale-fresh">')[1].split("</section>")[0]
    assert "<svg" in section and "stale G(0)" in section and "fresh G(1)" in section
