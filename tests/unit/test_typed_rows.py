"""Typed rows (issue 40): each table's row class is checked against its schema when defined and each row when
built, a row reads like the dict it replaces, and the stored bytes of typed rows equal those of the same dicts.

    .venv/bin/python -m pytest -q tests/unit/test_typed_rows.py
"""

from __future__ import annotations

import datetime as dt

import pytest

from dr_core.runs import round_steps
from dr_core.store import rows as typed
from dr_core.store.artifacts import Store
from dr_core.store.rows import (
    AnchorRow,
    CheckpointRow,
    EvalRow,
    IngestedPromptRow,
    RequestRow,
    RewardRow,
    Row,
    RubricRow,
    RunRow,
    SampleRow,
    ScoreRow,
    StepRow,
    VerdictRow,
    table_row,
)
from dr_core.store.schemas import TABLES

NOW = dt.datetime(2026, 12, 7, 3, 0, tzinfo=dt.UTC)
ROWS = {
    "runs": [RunRow("r", NOW, "completed", '{"k": 3}', "abc123")],
    "prompts": [IngestedPromptRow("d", "p0", "Say hi", None), IngestedPromptRow("d", "p1", "Say bye", "Bye.")],
    "anchors": [AnchorRow("d", "p0", "Say hi", k, f"hi {k}", "test", None if k > 1 else 0.5) for k in (1, 2)],
    "checkpoints": [CheckpointRow("policy", "s3://b/ck", None, "{}", NOW)],
    "requests": [
        RequestRow("service", 0, "b0", "q0", "rewards", "g0", 1, 0.5, "rb0", NOW, "Say hi", "fp", '{"reward": 0.5}')
    ],
    "samples": [SampleRow("measure", 0, "p0", j, "policy@0", f"answer {j}", 12, 3 + j) for j in range(3)],
    "rubrics": [
        RubricRow("measure", 0, "gen@0", 0, 0, "Says yes", 3, None),
        RubricRow("measure", 0, "gen@0", 1, None, None, None, "truncated_json"),
    ],
    "verdicts": [VerdictRow("measure", 0, 0, 0, t, n, v, "ver") for t, n, v in [("C", 0, True), ("anchor", 1, None)]],
    "scores": [ScoreRow("measure", 0, 0, "C", 0, 0.75), ScoreRow("measure", 0, 0, "anchor", 1, None)],
    "rewards": [RewardRow("measure", 0, r, 0.25 * r, -1.0, None, None, None) for r in range(2)],
    "eval": [EvalRow("rewardbench", "gen@0", "ver", 0, "accuracy", 0.5), EvalRow("rb", "g", None, -1, "ties", None)],
    "steps": [StepRow("e1", "dr-round", "sample", "Completed", NOW, 1.5, None)],
}


def test_a_row_reads_like_the_dict_it_replaces():
    row = ROWS["rubrics"][0]
    as_dict = dict(row)
    assert list(as_dict) == ["stage", "set_id", "generator_ckpt", "rollout", "item", "criterion", "weight", "error"]
    assert row["criterion"] == "Says yes" == row.criterion and row.get("missing") is None and "weight" in row
    assert {**row, "error": "x"}["error"] == "x" and dict(row, run_id="r")["run_id"] == "r"
    with pytest.raises(KeyError):
        row["run_id"]  # the partition keys are the writer's, not the row's
    with pytest.raises(AttributeError):
        row.item = 5  # frozen


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SampleRow("measure", 0, "p0", 0, "policy@0", None, None, None), "samples.response: None in a"),
        (lambda: VerdictRow("measure", 0, 0, 0, "C", True, True, "v"), "verdicts.response: expected int, got bool"),
        (lambda: RubricRow("measure", "0", "g", 0, 0, "c", 1, None), "rubrics.set_id: expected int, got str '0'"),
        (lambda: ScoreRow("measure", 0, 0, "C", 0, "0.5"), "scores.score: expected float, got str"),
        (lambda: StepRow("e", "f", "s", "Running", "2026-12-07", None, None), "steps.started_at: expected datetime"),
    ],
)
def test_a_bad_value_is_refused_when_the_row_is_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_row_class_that_is_not_its_table_is_refused_when_defined():
    with pytest.raises(TypeError, match="not table 'scores'"):

        @table_row("scores")
        class Misspelt(Row):  # "scor" for "score"
            stage: str
            set_id: int
            rollout: int
            target: str
            response: int
            scor: float | None

    with pytest.raises(TypeError, match="not table 'scores'"):

        @table_row("scores")
        class Reordered(Row):
            stage: str
            set_id: int
            rollout: int
            response: int
            target: str
            score: float | None


@pytest.mark.parametrize("table", sorted(ROWS))
def test_typed_rows_are_stored_byte_for_byte_as_the_same_dicts(tmp_path, table):
    typed, plain = Store.from_url(str(tmp_path / "typed")), Store.from_url(str(tmp_path / "plain"))
    rows = ROWS[table]
    keys = {k: v for k, v in {"run_id": "r", "round": 0, "dataset": "d"}.items() if k in TABLES[table].partition_by}
    a = typed.write(table, rows, "part", **keys)
    b = plain.write(table, [dict(r) for r in rows], "part", **keys)
    assert typed.content_hash(a) == plain.content_hash(b)
    stored = [{k: v for k, v in r.items() if k in rows[0]} for r in typed.read(a).to_pylist()]
    assert stored == [dict(r) for r in rows]


def test_every_table_has_its_typed_row():
    made = {
        cls.TABLE for cls in vars(typed).values() if isinstance(cls, type) and issubclass(cls, Row) and cls is not Row
    }
    assert made == set(TABLES) == set(ROWS)


def test_a_flow_result_with_a_misspelt_or_missing_field_is_refused_when_made():
    from pydantic import ValidationError

    from dr_core.runs.refs import RoundResult

    summary = round_steps.summarise([], [], [], [], [], [], None).model_dump()
    good = dict(run_id="r", round=1, numerics="bf16", summary=summary, steps={}, artifacts={"samples": "u"})
    assert RoundResult(**good).model_dump() == good  # what dr round --json writes: the same keys as before
    with pytest.raises(ValidationError, match="sumary"):
        RoundResult(**{**good, "sumary": {}})
    with pytest.raises(ValidationError, match="artifacts"):
        RoundResult(**{k: v for k, v in good.items() if k != "artifacts"})
    with pytest.raises(ValidationError, match="r_disk"):  # a misspelt figure in the summary
        RoundResult(**{**good, "summary": {**summary, "r_disk": 0.1}})
    with pytest.raises(ValidationError, match="verdicts_scored"):  # a figure left out
        RoundResult(**{**good, "summary": {k: v for k, v in summary.items() if k != "verdicts_scored"}})


def test_a_summary_counts_its_rows_and_leaves_what_it_cannot_compute_none():
    s = round_steps.summarise([], [], [], [], [], [], None)
    assert (s.prompts, s.verdicts, s.verdicts_scored, s.unscorable_scores) == (0, 0, 0, 0)
    assert (s.verifier_yes_rate, s.r_disc, s.r_anchor, s.anchor_gap, s.eval_accuracy, s.eval_n) == (None,) * 6


def test_an_update_summary_rounds_the_rewards_and_keeps_the_signal_counts():
    from dr_core.runs.refs import UpdateRef, UpdateSummary

    steps = [{"step": 0, "groups": 2, "zero_std_groups": 2, "zero_std_share": 1.0}]
    ref = UpdateRef(
        uri="/s/models/p",
        fingerprint="p@1",
        steps=1,
        seconds=2.5,
        group_size=4,
        reward_first=0.123456,
        reward_last=None,
        rollouts=8,
        history=[{"step": 0}],
        zero_std_by_step=steps,
        no_gradient_steps=1,
        unscorable=3,
    )
    u = UpdateSummary.of(ref)
    assert (u.reward_first, u.reward_last, u.steps, u.seconds, u.rollouts) == (0.1235, None, 1, 2.5, 8)
    assert (u.unscorable, u.unparseable, u.zero_std_by_step, u.no_gradient_steps) == (3, None, steps, 1)
    assert "history" not in u.model_dump()  # the per-step history stays on the reference


def test_an_update_metric_the_reference_does_not_declare_is_refused():
    from pydantic import ValidationError

    from dr_core.runs.refs import UpdateRef

    fields = dict(uri="/s/models/g", fingerprint="g@1", steps=2, seconds=1.0, group_size=4)
    assert UpdateRef(**fields, unparseable=1).unparseable == 1 and UpdateRef(**fields).unscorable is None
    with pytest.raises(ValidationError, match="unparsable"):  # misspelt
        UpdateRef(**fields, unparsable=1)
