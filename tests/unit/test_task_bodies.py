"""The Prefect task bodies called through ``.fn`` (the undecorated function): no flow, no Prefect API, no cache. A
temporary local store, and one scripted engine (tests/support/fakes.py) in the tasks' engine pool for every role, so the
model steps run without a model. Each test checks the rows a step wrote and the reference it returned."""

from __future__ import annotations

import datetime as dt

import pytest

from dr_core.config import coevolve_preset, preset
from dr_core.engines.pool import EnginePool
from dr_core.evaluator.judge import judge_engine_config
from dr_core.runs.refs import ArtifactRef, CheckpointRef, RubricInputs, SampleInputs, StepContext, VerifyInputs
from dr_core.store.artifacts import Store
from tasks import round as round_tasks
from tasks import runtime
from tasks.policy_eval import evaluate_policy
from tasks.stale_fresh import restage_samples
from tests.support.fakes import FakeEngine, round_engine

RUBRIC = [{"criterion": "Mentions detail", "weight": 3}, {"criterion": "Says answer", "weight": 1}]
RUN, T, STAGE = "bodies", 1, "measure"
#: 2 prompts, K=2 responses, 3 anchors per prompt, 2 rubric rollouts per set.
CFG = preset("tiny", n_prompts=2, k=2, n_anchor=3, rubric_rollouts=2)


def serve(monkeypatch, engines, fake: FakeEngine) -> FakeEngine:
    """Make ``fake`` what ``tasks.runtime.engine_for`` returns for every role of ``engines`` (an EnginesConfig),
    in a fresh engine pool that is restored after the test."""
    pool = EnginePool()
    monkeypatch.setattr(runtime, "engines", lambda: pool)
    for role in ("generator", "verifier", "policy"):
        runtime.adopt_engine(getattr(engines, role), fake)
    return fake


@pytest.fixture
def engine(monkeypatch) -> FakeEngine:
    return serve(monkeypatch, CFG.engines, round_engine(RUBRIC))


@pytest.fixture
def store(tmp_path) -> str:
    return str(tmp_path / "store")


def ctx(store: str, run: str = RUN, round_no: int = T, stage: str = STAGE) -> StepContext:
    return StepContext(store=store, run_id=run, round_no=round_no, stage=stage)


def _read(store: str, ref: ArtifactRef) -> list[dict]:
    """The rows a reference points at, after checking the reference describes its file."""
    s = Store.from_url(store)
    table = s.read(ref.uri)
    assert ref.rows == table.num_rows and ref.sha256 == s.content_hash(ref.uri)
    return table.to_pylist()


def _partition(table: str, part: str, run: str = RUN, round_no: int = T) -> str:
    return f"/{table}/run_id={run}/round={round_no}/{part}.parquet"


@pytest.fixture
def measured(engine, store) -> dict:
    """select-inputs, sample, generate-rubrics, verify and score of one round, as the flow chains them."""
    inputs = round_tasks.select_inputs.fn(CFG, store)
    samples = round_tasks.sample.fn(ctx(store), CFG, SampleInputs(prompts=inputs.prompts, policy_model="policy@0"))
    rubrics = round_tasks.generate_rubrics.fn(
        ctx(store), CFG, RubricInputs(prompts=inputs.prompts, samples=samples, generator_model="gen@0")
    )
    verdicts = round_tasks.verify.fn(
        ctx(store),
        CFG,
        VerifyInputs(
            prompts=inputs.prompts, samples=samples, anchors=inputs.anchors, rubrics=rubrics, verifier_model="ver@0"
        ),
    )
    scored = round_tasks.score.fn(ctx(store), rubrics, verdicts)
    return {**dict(inputs), "samples": samples, "rubrics": rubrics, "verdicts": verdicts, **dict(scored)}


def test_select_inputs_writes_the_prompts_and_spread_anchor_lists(store):
    refs = round_tasks.select_inputs.fn(CFG, store)
    prompts, anchors = _read(store, refs.prompts), _read(store, refs.anchors)
    assert len(prompts) == 2 and len(anchors) == 2 * 3
    (ds,) = {r["dataset"] for r in prompts + anchors}
    assert ds.endswith(f".n2-a3-m{CFG.min_anchor_responses}")
    assert refs.prompts.uri.endswith(f"/prompts/dataset={ds}/selected.parquet")
    assert refs.anchors.uri.endswith(f"/anchors/dataset={ds}/selected.parquet")
    for p in prompts:  # 3 ranks per prompt, best first and worst last (spread_ranks)
        ranks = sorted(a["rank"] for a in anchors if a["prompt_id"] == p["prompt_id"])
        assert len(ranks) == 3 and ranks[0] == 1


def test_model_steps_write_their_rows_under_the_run_partition(measured, engine, store):
    samples = _read(store, measured["samples"])
    assert measured["samples"].uri.endswith(_partition("samples", "measure-samples"))
    assert sorted((r["set_id"], r["response_idx"], r["response"]) for r in samples) == [
        (0, 0, "answer 0"),
        (0, 1, "answer 1 with detail"),
        (1, 0, "answer 0"),
        (1, 1, "answer 1 with detail"),
    ]
    assert {(r["stage"], r["policy_ckpt"], r["run_id"], r["round"]) for r in samples} == {(STAGE, "policy@0", RUN, T)}

    rubrics = _read(store, measured["rubrics"])
    assert measured["rubrics"].uri.endswith(_partition("rubrics", "measure-rubrics"))
    assert len(rubrics) == 2 * 2 * len(RUBRIC) and {r["generator_ckpt"] for r in rubrics} == {"gen@0"}
    assert measured["rubrics"].cost["requests"] == 2 * 2  # one generation per (set, rollout)

    verdicts = _read(store, measured["verdicts"])
    assert len(verdicts) == 2 * 2 * len(RUBRIC) * (2 + 3)  # every item on C and on the anchors
    assert {r["verifier"] for r in verdicts} == {"ver@0"}
    # both rollouts wrote the same rubric: each distinct (response, criterion) check is asked once
    checks = {(r["set_id"], r["target"], r["response"], r["item"]) for r in verdicts}
    assert len(checks) == 2 * (2 + 3) * len(RUBRIC) == measured["verdicts"].cost["requests"]
    # one batched call per step: the policy's K samples, the generator's schema, the verifier's yes/no
    assert [(len(c.conversations), c.n, c.json_schema is not None, c.choices) for c in engine.calls] == [
        (2, CFG.k, False, None),
        (4, 1, True, None),
        (len(checks), 1, False, ["yes", "no"]),
    ]


def test_score_writes_eq12_scores_and_one_reward_row_per_rollout(measured, store):
    scores, rewards = _read(store, measured["scores"]), _read(store, measured["rewards"])
    assert measured["rewards"].uri.endswith(_partition("rewards", "measure-rewards"))
    assert len(scores) == 2 * 2 * (2 + 3) and len(rewards) == 2 * 2
    c = {(s["set_id"], s["rollout"], s["response"]): s["score"] for s in scores if s["target"] == "C"}
    # "answer 1 with detail" meets both items (3 + 1 of 4), "answer 0" only "Says answer" (1 of 4)
    assert c == {(s, r, j): 1.0 if j else 0.25 for s in (0, 1) for r in (0, 1) for j in (0, 1)}
    # Eq. 13 on C: "Mentions detail" splits the set 1/2, "Says answer" is unanimous
    assert [r["r_disc"] for r in rewards] == pytest.approx([3 * 0.25 / 4] * 4)


def test_summarise_counts_the_stored_rows(measured, store):
    summary = round_tasks.summarise.fn(ctx(store), measured)
    assert (summary.prompts, summary.sets, summary.responses, summary.rubric_rollouts) == (2, 2, 4, 4)
    assert summary.rubric_items == 8 and summary.rubric_failures == 0
    assert summary.verdicts == measured["verdicts"].rows == 40 and summary.unscorable_verdicts == 0
    assert summary.eval_accuracy is None and summary.r_disc == pytest.approx(3 * 0.25 / 4)


def test_adopt_copies_another_runs_artifacts_into_this_run(measured, store):
    here = round_tasks.adopt.fn(ctx(store), measured)
    assert here == measured  # already this run's: unchanged
    other = round_tasks.adopt.fn(ctx(store, "other", 2), measured)
    assert other["prompts"] == measured["prompts"]  # not a run table
    assert other["rubrics"].cost == measured["rubrics"].cost  # what the step returned besides the file
    for name in ("samples", "rubrics", "verdicts", "scores", "rewards"):
        assert other[name].uri.endswith(_partition(name, f"measure-{name}", "other", 2)), other[name]
        old, new = _read(store, measured[name]), _read(store, other[name])
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("run_id", "round")} for r in rows]  # noqa: E731
        assert strip(new) == strip(old) and {(r["run_id"], r["round"]) for r in new} == {("other", 2)}


def test_restage_samples_copies_a_set_under_a_new_stage(measured, store):
    ref = restage_samples.fn(ctx(store, RUN, 2, "stale"), measured["samples"].uri)
    assert ref.uri.endswith(_partition("samples", "stale-samples", RUN, 2))
    old, new = _read(store, measured["samples"]), _read(store, ref)
    key = lambda r: (r["set_id"], r["response_idx"])  # noqa: E731
    assert [r["response"] for r in sorted(new, key=key)] == [r["response"] for r in sorted(old, key=key)]
    assert {(r["stage"], r["round"]) for r in new} == {("stale", 2)}
    again = restage_samples.fn(ctx(store, RUN, 2, "stale"), measured["samples"].uri)
    assert again.sha256 == ref.sha256  # same content on every run: downstream cache keys hit


def test_close_interrupted_marks_only_other_executions_running_rows(store):
    start = "2026-01-02T03:04:05+00:00"
    done = {"state": "Completed", "seconds": 1.0, "started_at": start}
    running = {"state": "Running", "seconds": None, "started_at": start}
    round_tasks.record_steps.fn(ctx(store), "coevolve", "killed", {"sample": done, "verify": running})
    round_tasks.record_steps.fn(ctx(store, round_no=T + 1), "coevolve", "killed", {"score": done})
    round_tasks.record_steps.fn(ctx(store), "coevolve", "now", {"sample": running})
    round_tasks.record_steps.fn(ctx(store, run="other"), "coevolve", "x", {"verify": running})

    marked = round_tasks.close_interrupted(ctx(store), "now")
    assert [(m["execution"], m["step"]) for m in marked] == [("killed", "verify")]
    rows = Store.from_url(store).read_table("steps").to_pylist()
    states = {(r["run_id"], r["execution"], r["round"], r["step"]): (r["state"], r["seconds"]) for r in rows}
    assert states == {
        (RUN, "killed", T, "sample"): ("Completed", 1.0),
        (RUN, "killed", T, "verify"): ("Interrupted", None),  # its seconds stay unknown
        (RUN, "killed", T + 1, "score"): ("Completed", 1.0),
        (RUN, "now", T, "sample"): ("Running", None),  # this execution's own step is running, not interrupted
        ("other", "x", T, "verify"): ("Running", None),  # another run is not this execution's business
    }
    assert round_tasks.close_interrupted(ctx(store), "now") == []  # nothing left to mark


def test_record_steps_writes_one_row_per_step_and_replaces_its_file(store):
    start = "2026-01-02T03:04:05+00:00"
    entries = {
        "sample": {"state": "Completed", "seconds": 1.5, "started_at": start},
        "verify": {"state": "Cached", "seconds": 0.25, "started_at": start},
    }
    uri = round_tasks.record_steps.fn(ctx(store), "round", "e1", entries)
    assert uri.endswith(_partition("steps", "exec-e1"))
    entries["score"] = {"state": "Failed", "seconds": 2.0, "started_at": start}
    assert round_tasks.record_steps.fn(ctx(store), "round", "e1", entries) == uri
    rows = Store.from_url(store).read(uri).to_pylist()
    assert [(r["step"], r["state"], r["seconds"]) for r in rows] == [
        ("sample", "Completed", 1.5),
        ("verify", "Cached", 0.25),
        ("score", "Failed", 2.0),
    ]
    assert {(r["execution"], r["flow"], r["started_at"]) for r in rows} == {
        ("e1", "round", dt.datetime.fromisoformat(start))
    }


def test_evaluate_policy_writes_the_heldout_prompts_and_one_eval_row_per_metric(monkeypatch, store):
    cfg = coevolve_preset("tiny", policy_eval={"limit": 2})
    # policy, baseline P(0) and judge: the same answer everywhere; the judge says "A", the first choice
    fake = serve(monkeypatch, cfg.round.engines, FakeEngine("the same answer", model_name="scripted"))
    # the judge is the verifier's model in float32 (log-odds); this one returns no log-probabilities
    runtime.adopt_engine(judge_engine_config(cfg.round.engines.verifier), fake)
    ref = evaluate_policy.fn(ctx(store), cfg, CheckpointRef(uri="default", fingerprint="sha-of-p1"))
    assert ref.uri.endswith(_partition("eval", "policy-eval"))
    # no log-probabilities: structured choice, "A" in both orders: every pair a tie, counted half
    assert ref.metrics["n"] == 2 and ref.metrics["win_rate"] == 0.5 and ref.metrics["tie_rate"] == 1.0
    assert ref.metrics["judge_position_a_rate"] == 1.0 and ref.metrics["judge_procedure"] == "choice"
    rows = {r["metric"]: r for r in _read(store, ref)}
    assert rows["win_rate"]["value"] == 0.5 and rows["n"]["value"] == 2
    assert {(r["checkpoint"], r["benchmark"]) for r in rows.values()} == {("sha-of-p1", "policy-eval-arenahard.vs-P0")}
    held = Store.from_url(store).read_table("prompts").to_pylist()
    assert len(held) == 2 and {r["dataset"] for r in held} == {"heldout-policy-eval-arenahard"}
