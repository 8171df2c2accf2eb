"""Policy evaluation without a model: the win-rate math (both orders, ties counted half), the bootstrap interval,
judge-output parsing (one test per malformed shape), eval rows, engine words, the held-out audit in SQL, and the
command refusing bad input before any model work."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app
from dr_core.config import ConfigError
from dr_core.datasets import PromptRow
from dr_core.engines import PROMPT_TOO_LONG, Completion
from dr_core.evals import policy_eval as pe
from dr_core.evaluator.judge import choice_of
from dr_core.store.schemas import conform
from tests.support.fakes import FakeEngine

verdict = st.sampled_from(["A", "B", None])


# -- pair_outcome and the summary -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "as_a, as_b, expected",
    [
        ("A", "B", 1.0),  # policy picked in both orders
        ("B", "A", 0.0),  # baseline picked in both orders
        ("A", "A", 0.5),  # judge always picks the first position: split, a tie
        ("B", "B", 0.5),  # always the second position: a tie
        (None, "B", None),  # a missing verdict: unscorable, never a guess
        ("A", None, None),
        ("yes", "B", None),
    ],
)
def test_pair_outcome_table(as_a, as_b, expected):
    assert pe.pair_outcome(as_a, as_b) == expected


@given(st.lists(st.tuples(verdict, verdict), min_size=1, max_size=40))
def test_swapping_policy_and_baseline_mirrors_the_win_rate(pairs):
    """Seen from the baseline's side the two judge calls are the same, in the other order (the call that showed the
    policy as A showed the baseline as B). Its win rate is 1 - the policy's; ties and unscorable are unchanged."""
    mine = pe.win_rate_summary([pe.pair_outcome(a, b) for a, b in pairs])
    theirs = pe.win_rate_summary([pe.pair_outcome(b, a) for a, b in pairs])
    assert (mine["ties"], mine["unscorable"]) == (theirs["ties"], theirs["unscorable"])
    assert (mine["wins"], mine["losses"]) == (theirs["losses"], theirs["wins"])
    if mine["win_rate"] is None:
        assert theirs["win_rate"] is None
    else:
        assert mine["win_rate"] + theirs["win_rate"] == pytest.approx(1.0)


@given(st.lists(st.sampled_from(["A", "B"]), min_size=1, max_size=30))
def test_a_judge_with_pure_position_bias_gives_all_ties(first_choice):
    """A judge that answers by position only (same letter in both orders) cannot make the policy win or lose."""
    s = pe.win_rate_summary([pe.pair_outcome(c, c) for c in first_choice])
    assert s["win_rate"] == 0.5 and s["tie_rate"] == 1.0 and s["wins"] == s["losses"] == 0


def test_summary_counts_and_rates():
    s = pe.win_rate_summary([1.0, 1.0, 0.5, 0.0, None])
    assert (s["n"], s["scored"], s["unscorable"], s["wins"], s["ties"], s["losses"]) == (5, 4, 1, 2, 1, 1)
    assert s["win_rate"] == pytest.approx(2.5 / 4) and s["tie_rate"] == 0.25 and s["loss_rate"] == 0.25
    assert pe.win_rate_summary([None, None])["win_rate"] is None


# -- bootstrap -------------------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=50), st.integers(0, 2**16))
def test_bootstrap_interval_brackets_the_mean_within_the_data_range(values, seed):
    lo, hi = pe.bootstrap_ci(values, n_boot=500, seed=seed)
    assert min(values) <= lo <= float(np.mean(values)) + 1e-9
    assert float(np.mean(values)) - 1e-9 <= hi <= max(values)


def test_bootstrap_constant_values_give_a_point_and_none_for_nothing():
    assert pe.bootstrap_ci([1.0] * 7) == (1.0, 1.0)
    assert pe.bootstrap_ci([]) is None


def test_bootstrap_matches_a_slow_reference_loop():
    values = np.random.default_rng(3).choice([0.0, 0.5, 1.0], size=17)
    idx = np.random.default_rng(11).integers(0, values.size, size=(300, values.size))  # same draws
    means = [sum(values[j] for j in row) / len(row) for row in idx]  # one resample at a time
    ref = tuple(float(q) for q in np.quantile(means, [0.025, 0.975]))
    assert pe.bootstrap_ci(values, n_boot=300, seed=11) == pytest.approx(ref)


def test_bootstrap_narrows_with_more_prompts():
    rng = np.random.default_rng(0)
    small = rng.choice([0.0, 1.0], size=10)
    big = np.tile(small, 20)
    w_small = np.subtract(*pe.bootstrap_ci(small)[::-1])
    w_big = np.subtract(*pe.bootstrap_ci(big)[::-1])
    assert w_big < w_small / 2


# -- judge output, one test per malformed shape -----------------------------------------------------------------------
def _c(text, reason="stop"):
    return Completion((text,), (reason,), 10, (1,))


@pytest.mark.parametrize(
    "completion, expected",
    [
        (_c("A"), "A"),
        (_c(" B\n"), "B"),  # whitespace around a valid label
        (_c(""), None),  # empty
        (_c("C"), None),  # not a label
        (_c("A or B"), None),  # free text
        (_c("a"), None),  # wrong case: the grammar only allows "A"/"B"
        (_c("", PROMPT_TOO_LONG), None),  # the pair did not fit the judge's context
        (Completion((), (), 0, ()), None),
    ],
)
def test_judge_choice_shapes(completion, expected):
    assert choice_of(completion) == expected


def scripted_judge(good="GOOD") -> FakeEngine:
    """Prefers the answer containing ``good`` wherever it is shown; ``calls`` records what it saw."""

    def choose(req):
        assert req.choices == ["A", "B"]
        a = req.user.split("[ANSWER A]")[1].split("[END ANSWER A]")[0]
        return "A" if good in a else "B"

    return FakeEngine(verdict=choose, model_name="scripted")


def test_judge_sees_both_orders_and_position_bias_cancels():
    rows = [PromptRow("1", "q1", "base GOOD"), PromptRow("2", "q2", "base"), PromptRow("3", "q3", "base")]
    pol = [pe.Answer("pol", 3), pe.Answer("pol GOOD", 4), pe.Answer("GOOD pol", 5, truncated=True)]
    judge = scripted_judge()
    metrics, records = pe.judge_and_score(judge, rows, pol, pe.fixed_baseline(rows), seed=0)
    seen = [user for call in judge.calls for user in call.users]
    assert len(seen) == 6
    assert seen[0].index("pol") < seen[0].index("base")  # policy as A first
    assert seen[1].index("base") < seen[1].index("pol")  # then as B
    assert [r["outcome"] for r in records] == [0.0, 1.0, 1.0]
    assert metrics["win_rate"] == pytest.approx(2 / 3) and metrics["tie_rate"] == 0
    assert metrics["judge_position_a_rate"] == 0.5 and metrics["policy_truncated"] == 1
    assert metrics["policy_mean_tokens"] == 4 and metrics["baseline_mean_tokens"] is None
    assert metrics["baseline_mean_chars"] == pytest.approx((9 + 4 + 4) / 3)
    # the interval is the seeded bootstrap of these outcomes: 0 of 3 wins is drawn 1/27 = 3.7% > 2.5% of the time,
    # 3 of 3 8/27, so the 95% interval is the whole range
    assert metrics["win_rate_ci95"] == list(pe.bootstrap_ci([0.0, 1.0, 1.0], seed=0)) == [0.0, 1.0]


def test_a_prompt_too_long_for_an_answer_is_unscorable():
    m, outcomes = pe.pairwise_metrics(
        [pe.Answer("", 0, prompt_too_long=True), pe.Answer("x")],
        [pe.Answer("b"), pe.Answer("b")],
        [{"outcome": 1.0}, {"outcome": 1.0}],
    )
    assert outcomes == [None, 1.0] and m["unscorable"] == 1 and m["prompt_too_long"] == 1 and m["win_rate"] == 1.0


def test_eval_rows_conform_to_the_eval_table():
    m, _ = pe.pairwise_metrics(
        [pe.Answer("x")],
        [pe.Answer("y")],
        [{"outcome": None}],
        {"judge_position_a_rate": None, "judge_position_bias": None},
    )
    rows = pe.eval_rows(m, benchmark="arena.vs-P0", checkpoint="p1", judge="j", seed=0)
    t = conform("eval", [dict(r, run_id="r", round=1) for r in rows])
    got = {r["metric"]: r["value"] for r in t.to_pylist()}
    assert got["win_rate"] is None and got["unscorable"] == 1.0 and got["n"] == 1.0  # NULL, never a made-up 0


# -- engine words ---------------------------------------------------------------------------------------------------
def test_engine_spec_words(tmp_path):
    assert pe.engine_spec("default").model == "default"
    url = pe.engine_spec("http://127.0.0.1:8000/v1#Qwen/Qwen3-8B")
    assert (url.kind, url.base_url, url.model) == ("openai_http", "http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B")
    assert pe.engine_spec("https://api.example.com/v1").model == "default"
    with pytest.raises(ConfigError, match="config.json"):
        pe.engine_spec(str(tmp_path))
    assert pe.is_checkpoint_spec(str(tmp_path)) and not pe.is_checkpoint_spec(str(tmp_path / "answers.jsonl"))


# -- the in-loop task refuses an overlapping held-out slice (the audit's own tests: test_policy_eval_sql.py) --
def test_the_in_loop_task_refuses_an_overlapping_heldout_slice_before_model_work(tmp_path):
    from dr_core.config import coevolve_preset
    from dr_core.runs.refs import CheckpointRef, StepContext
    from dr_core.store.artifacts import Store
    from tasks.policy_eval import evaluate_policy

    anchors = [json.loads(x) for x in open(_bundled("anchors_alpacaeval.jsonl"))][:2]
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"id": f"h{i}", "prompt": a["prompt"]}) + "\n" for i, a in enumerate(anchors)))
    store = str(tmp_path / "store")
    s = Store.from_url(store)
    s.write(
        "anchors",
        [
            {"prompt_id": a["id"], "prompt": a["prompt"], "rank": 1, "response": a["responses"][0], "source": ""}
            for a in anchors
        ],
        part="x",
        dataset="alpaca",
    )
    cfg = coevolve_preset("tiny", policy_eval={"data": str(held), "limit": 2})
    with pytest.raises(ValueError, match="2 held-out prompt"):
        evaluate_policy.fn(
            StepContext(store=store, run_id="r", round_no=1), cfg, CheckpointRef(uri="default", fingerprint="x")
        )


def _bundled(name):
    from dr_core.paths import bundled

    return bundled(name)


# -- the command refuses bad input before any model work -------------------------------------------------------------
runner = CliRunner()


@pytest.mark.parametrize(
    "lines, where",
    [
        (['{"id": "1", "prompt": "hi", "baseline": "hello"}', '{"id": "2", "baseline": "x"}'], ":2: field 'prompt'"),
        (['{"id": "1", "prompt": "hi", "baseline": 3}'], ":1: field 'baseline'"),
        (['{"id": "1", "prompt": "hi"'], ":1: invalid JSON"),
        (['{"id": "1", "prompt": "hi"}'], "field 'baseline'"),  # no baseline answer and no --baseline
    ],
)
def test_eval_policy_malformed_input_exits_2_and_writes_nothing(tmp_path, lines, where):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.json"
    res = runner.invoke(
        app, ["eval-policy", "--policy", "default", "--judge", "default", "--data", str(data), "--output", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert where in res.output.replace("\n", "") and not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "algebra"], "--task must be one of"),
        ([], "--judge is required"),
        (["--judge", "default", "--limit", "0"], "--limit must be >= 1"),
        (["--judge", "/no/such/checkpoint"], "config.json"),
    ],
)
def test_eval_policy_bad_options_exit_2(tmp_path, args, message):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "1", "prompt": "hi", "baseline": "hello"}\n')
    res = runner.invoke(app, ["eval-policy", "--policy", "default", "--data", str(data), *args])
    assert res.exit_code == 2 and message in res.output.replace("\n", ""), res.output


def test_eval_policy_verifiable_bad_reference_stops_with_file_line_field(tmp_path):
    data = tmp_path / "v.jsonl"
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "half?", "answer": "about a half"}\n')
    res = runner.invoke(app, ["eval-policy", "--policy", "default", "--task", "numeric", "--data", str(data)])
    assert res.exit_code == 2 and "v.jsonl:2: field 'answer'" in res.output.replace("\n", ""), res.output


# -- saved answers ----------------------------------------------------------------------------------------------------
def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_saved_answers_are_matched_by_id_and_extra_rows_ignored(tmp_path):
    rows = [PromptRow("a", "qa", line=1), PromptRow("b", "qb", line=2)]
    f = _jsonl(
        tmp_path / "ans.jsonl", [{"id": "b", "answer": "B!"}, {"id": "z", "answer": "?"}, {"id": "a", "answer": ""}]
    )
    assert [a.text for a in pe.answers_from_file(rows, f, "policy")] == ["", "B!"]


def test_a_prompt_without_a_saved_answer_is_named(tmp_path):
    from dr_core.datasets import DataError

    f = _jsonl(tmp_path / "ans.jsonl", [{"id": "a", "answer": "x"}])
    with pytest.raises(DataError, match="no policy answer with id 'b' \\(the prompt on line 7"):
        pe.answers_from_file([PromptRow("a", "q"), PromptRow("b", "q", line=7)], f, "policy")


def test_a_baseline_file_may_hold_saved_answers_or_baseline_rows(tmp_path):
    rows = [PromptRow("a", "qa", line=1)]
    answers = _jsonl(tmp_path / "a.jsonl", [{"id": "a", "answer": "from answers"}])
    baselines = _jsonl(tmp_path / "b.jsonl", [{"id": "a", "prompt": "qa", "baseline": "from baselines"}])
    assert pe.baseline_from_file(rows, answers)[0].baseline == "from answers"
    assert pe.baseline_from_file(rows, baselines)[0].baseline == "from baselines"


def test_judge_and_score_with_log_odds_records_d_and_the_bias(tmp_path):
    from tests.unit.test_judge import content_judge

    rows = [PromptRow("1", "q1", "base"), PromptRow("2", "q2", "base GOOD")]
    pol = [pe.Answer("pol GOOD"), pe.Answer("pol")]
    metrics, records = pe.judge_and_score(
        content_judge(bias=1.5, preference=0.8), rows, pol, pe.fixed_baseline(rows), seed=0
    )
    assert [r["outcome"] for r in records] == [1.0, 0.0]
    assert [r["judge_d"] for r in records] == [pytest.approx(0.8), pytest.approx(-0.8)]
    assert metrics["judge_procedure"] == "logodds" and metrics["judge_position_bias"] == pytest.approx(1.5)
    assert metrics["judge_tie_threshold"] == 0.01 and metrics["identical_answers"] == 0


def test_the_coevolution_table_says_when_a_win_rate_is_all_identical_answers():
    from dr_core.report.tables import win_rate_cell

    pe_metrics = {"win_rate": 0.5, "win_rate_ci95": [0.5, 0.5], "n": 4, "identical_answers": 4}
    assert win_rate_cell({"policy_eval": pe_metrics}) == (
        "0.5000 [0.50, 0.50] (n=4; 4 of 4 answers identical to P(0)'s: a tie each)"
    )
    assert win_rate_cell({"policy_eval": {**pe_metrics, "identical_answers": 0}}) == "0.5000 [0.50, 0.50] (n=4)"
    assert win_rate_cell({"policy_eval": None}) == "-"
