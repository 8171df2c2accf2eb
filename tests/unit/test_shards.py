"""Shards of the model steps (dr_core/runs/shards.py, the shard tasks of tasks/round.py, flows/steps.py):
the split by prompt, the merge's checks, and a sharded round that writes the unsharded round's rows, byte for byte.
Scripted engines whose answers depend on the prompt, so a set given the wrong id or the wrong prompt shows."""

from __future__ import annotations

import json

import pytest

from dr_core.runs import shards
from dr_core.runs.refs import SampleInputs, StepContext
from dr_core.runs.shards import Shard, ShardError
from dr_core.store.artifacts import Store
from tasks import round as round_tasks
from tests.support.fakes import FakeEngine, Request
from tests.unit.test_task_bodies import RUBRIC, serve


def test_bounds_split_prompts_in_order_into_near_equal_nonempty_shards():
    assert shards.bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shards.bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert shards.bounds(5, 1) == [(0, 5)]
    for n in range(1, 12):
        for k in range(1, n + 1):
            spans = shards.bounds(n, k)
            assert [i for a, b in spans for i in range(a, b)] == list(range(n))
            assert max(b - a for a, b in spans) - min(b - a for a, b in spans) <= 1
    with pytest.raises(ShardError, match="cannot split 2 prompts into 3"):
        shards.bounds(2, 3)


def _ref(i, n, rows, span):
    return {"uri": f"mem://part-{i}", "sha256": "x", "rows": rows, "shard": i, "shards": n, "sets": list(span)}


def test_ordered_needs_every_shard_exactly_once():
    a, b = _ref(0, 2, 1, (0, 1)), _ref(1, 2, 1, (1, 2))
    assert shards.ordered([b, a], 2, "samples") == [a, b]
    with pytest.raises(ShardError, match=r"shard \[1\] of 2 missing"):
        shards.ordered([a, None], 2, "samples")
    with pytest.raises(ShardError, match="shard 0 of 2 is there twice"):
        shards.ordered([a, a], 2, "samples")
    with pytest.raises(ShardError, match="says it is shard 1 of 3"):
        shards.ordered([a, _ref(1, 3, 1, (1, 2))], 2, "samples")


def test_merge_checks_row_counts_and_set_ranges():
    refs = [_ref(0, 2, 2, (0, 1)), _ref(1, 2, 1, (1, 3))]
    parts = [[{"set_id": 0, "v": 1}, {"set_id": 0, "v": 2}], [{"set_id": 2, "v": 3}]]
    assert [r["v"] for r in shards.merge(parts, refs, "verdicts", every_set=False)] == [1, 2, 3]
    with pytest.raises(ShardError, match="no rows for sets \\[1\\]"):  # set 1 of shard 1 has no rows
        shards.merge(parts, refs, "samples", every_set=True)
    with pytest.raises(ShardError, match="holds 1 rows, its task wrote 2"):
        shards.merge([parts[0][:1], parts[1]], refs, "verdicts", every_set=False)
    with pytest.raises(ShardError, match=r"sets \[2\] outside its range \[0, 1\)"):
        shards.merge([[{"set_id": 2}, {"set_id": 0}], parts[1]], refs, "verdicts", every_set=False)


def test_add_costs_sums_numbers_and_nested_counters():
    a = {"requests": 2, "seconds": 1.5, "endpoints": {"u1": {"requests": 2, "marked_down": 0}}}
    b = {"requests": 3, "seconds": 0.5, "endpoints": {"u1": {"requests": 1, "marked_down": 1}, "u2": {"requests": 2}}}
    assert shards.add_costs([a, None, b]) == {
        "requests": 5,
        "seconds": 2.0,
        "endpoints": {"u1": {"requests": 3, "marked_down": 1}, "u2": {"requests": 2}},
    }
    assert shards.add_costs([None]) is None


def prompt_engine() -> FakeEngine:
    """Answers that depend on the prompt: the policy's sample j names the prompt's first words (odd ones "with
    detail"); the generator writes RUBRIC; the verifier says yes when the response holds the criterion's last
    word."""

    def text(req: Request):
        if req.json_schema is not None:
            return json.dumps({"rubrics": RUBRIC})
        head = "-".join(req.user.split()[:2])
        return [f"answer {j} {head}" + (" with detail" if j % 2 else "") for j in range(req.n)]

    def verdict(req: Request) -> str:
        criterion, response = req.check()
        return "yes" if criterion.split()[-1].lower() in response.lower() else "no"

    return FakeEngine(text, verdict=verdict, model_name="scripted")


def _cfg(n_shards: int):
    from dr_core.config import preset

    return preset("tiny", n_prompts=5, k=2, n_anchor=3, rubric_rollouts=2, scale={"shards": n_shards})


def _measure(cfg, store: str, run: str) -> dict:
    from prefect import flow

    from dr_core.runs.refs import StepContext
    from flows.steps import Steps, measure

    @flow(name="measure-test")
    def go():
        steps = Steps(StepContext(store=store, run_id=run, round_no=1))
        m = measure(steps, cfg, run_eval=False)
        return {"summary": m.summary, "artifacts": m.artifacts, "steps": steps.log.entries()}

    return go()


def test_merge_refuses_a_missing_or_changed_shard(monkeypatch, tmp_path):
    cfg = _cfg(2)
    serve(monkeypatch, cfg.engines, prompt_engine())
    store = str(tmp_path / "store")
    ctx = StepContext(store=store, run_id="r", round_no=1)
    inputs = round_tasks.select_inputs.fn(cfg, store)
    parts = [
        round_tasks.sample.fn(ctx, cfg, SampleInputs(prompts=inputs.prompts, policy_model="p@0"), shard=s)
        for s in Shard.all(2)
    ]
    merged = round_tasks.merge_shards.fn(ctx, "samples", parts, 2)
    assert merged.rows == 5 * 2 and merged.uri.endswith("/samples/run_id=r/round=1/measure-samples.parquet")
    with pytest.raises(ShardError, match=r"shard \[1\] of 2 missing"):
        round_tasks.merge_shards.fn(ctx, "samples", parts[:1], 2)
    st = Store.from_url(store)
    rows = st.read(parts[1].uri).to_pylist()[:-1]  # shard 1 rewritten without its last response
    st.write_shard("samples", rows, "measure-samples", 1, 2, run_id="r", round=1)
    with pytest.raises(ShardError, match="shard 1 .* changed after its task wrote it"):
        round_tasks.merge_shards.fn(ctx, "samples", parts, 2)


def test_the_whole_step_is_one_shard_whose_part_the_merge_passes_on(monkeypatch, tmp_path):
    """Unsharded, a model step is shard 0 of 1: it writes the step's own table part (nothing under _shards), and the
    merge returns its reference unchanged."""
    cfg = _cfg(1)
    serve(monkeypatch, cfg.engines, prompt_engine())
    store = str(tmp_path / "store")
    ctx = StepContext(store=store, run_id="r", round_no=1)
    inputs = round_tasks.select_inputs.fn(cfg, store)
    (whole,) = [
        round_tasks.sample.fn(ctx, cfg, SampleInputs(prompts=inputs.prompts, policy_model="p@0"), shard=s)
        for s in Shard.all(1)
    ]
    assert whole.uri.endswith("/samples/run_id=r/round=1/measure-samples.parquet") and whole.rows == 5 * 2
    assert round_tasks.merge_shards.fn(ctx, "samples", [whole], 1) == whole
    assert Store.from_url(store).files_under("_shards", ".parquet") == []
    assert (Shard().whole, Shard().span(5), Shard(index=1, count=2).span(5)) == (True, (0, 5), (3, 5))
