"""dr eval-policy on the real default model (policy and judge: SmolLM2 in every role of
tests/support/engines_smollm2.yaml, these tests are not about the preset's models) against the shipped Arena-Hard
baseline answers, the same answers saved and judged again with the sides swapped (no generation), a verifiable math
task (as a user runs it: a subprocess whose log has no known noise and one models line), and the in-loop task
writing the win rate to the eval table. Kept to 2 prompts and short answers: a couple of minutes on a 2-core CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core.paths import bundled
from tests.support.noise import assert_quiet, user_env

pytestmark = [pytest.mark.slow]
runner = CliRunner()
ENGINES = str(Path(__file__).resolve().parents[1] / "support" / "engines_smollm2.yaml")


def test_eval_policy_default_model_against_shipped_baselines(default_model_dir, tmp_path):
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    out, recs = tmp_path / "m.json", tmp_path / "r.jsonl"
    res = runner.invoke(
        app,
        [
            "eval-policy",
            "--policy",
            "default",
            "--judge",
            "default",
            "--data",
            str(bundled("policy_eval_arenahard.jsonl")),
            "--limit",
            "2",
            "--max-tokens",
            "32",
            "--max-model-len",
            "2048",
            "--output",
            str(out),
            "--records",
            str(recs),
            "--engines",
            ENGINES,
        ],
    )
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())
    assert m["n"] == 2 and m["judge_verdicts"] == 4
    assert m["judge_procedure"] == "logodds" and m["judge_fallback"] is None and m["judge_tie_threshold"] == 0.01
    assert m["judge_invalid"] == 0  # "A" and "B" are among the judge's top first tokens
    assert m["scored"] + m["unscorable"] == 2
    assert m["wins"] + m["ties"] + m["losses"] == m["scored"]
    # a tie counts half (the two orders disagree)
    assert m["win_rate"] == (pytest.approx((m["wins"] + m["ties"] / 2) / m["scored"]) if m["scored"] else None)
    lo, hi = m["win_rate_ci95"]
    assert lo <= m["win_rate"] <= hi
    assert m["policy_mean_tokens"] <= 32 and m["baseline_mean_chars"] > 0 and m["baseline"] == "data:baseline"
    assert m["judge"] == m["policy"]
    lines = [json.loads(x) for x in recs.read_text().splitlines()]
    for r in lines:  # d is half the difference of the two orders' A-vs-B log-odds, and decides the outcome
        assert r["judge_d"] == pytest.approx((r["judge_policy_as_a"] - r["judge_policy_as_b"]) / 2)
        assert r["outcome"] == (1.0 if r["judge_d"] > 0.01 else 0.0 if r["judge_d"] < -0.01 else 0.5)
    assert m["judge_position_bias"] == pytest.approx(
        sum(r["judge_policy_as_a"] + r["judge_policy_as_b"] for r in lines) / 4
    )

    # the same answers, saved, judged again with the sides swapped: nothing is generated, d changes sign
    data, pol, base = tmp_path / "prompts.jsonl", tmp_path / "policy.jsonl", tmp_path / "baseline.jsonl"
    data.write_text("".join(json.dumps({"id": r["id"], "prompt": r["prompt"]}) + "\n" for r in lines))
    pol.write_text("".join(json.dumps({"id": r["id"], "answer": r["policy"]}) + "\n" for r in lines))
    base.write_text("".join(json.dumps({"id": r["id"], "answer": r["baseline"]}) + "\n" for r in lines))
    out2, recs2 = tmp_path / "m2.json", tmp_path / "r2.jsonl"
    res = runner.invoke(
        app,
        [
            "eval-policy",
            "--policy",
            str(base),
            "--baseline",
            str(pol),
            "--judge",
            "default",
            "--data",
            str(data),
            "--max-model-len",
            "2048",
            "--output",
            str(out2),
            "--records",
            str(recs2),
            "--engines",
            ENGINES,
        ],
    )
    assert res.exit_code == 0, res.output
    m2 = json.loads(out2.read_text())
    assert m2["policy"] == f"file:{base}" and m2["baseline"] == f"file:{pol}" and m2["policy_mean_tokens"] is None
    swapped = [json.loads(x) for x in recs2.read_text().splitlines()]
    for a, b in zip(lines, swapped):
        assert b["judge_d"] == pytest.approx(-a["judge_d"], abs=1e-3)
    assert (m2["wins"], m2["losses"]) == (m["losses"], m["wins"])


def test_eval_policy_verifiable_math(default_model_dir, tmp_path):
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    data = tmp_path / "math.jsonl"
    data.write_text(
        '{"prompt": "What is 1/2 as a decimal? Put the answer in \\\\boxed{}.", "answer": "0.5"}\n'
        '{"prompt": "What is 2+3? Put the answer in \\\\boxed{}.", "answer": "5"}\n'
    )
    out = tmp_path / "m.json"
    argv = [
        "--policy",
        "default",
        "--task",
        "math",
        "--data",
        str(data),
        "--max-tokens",
        "48",
        "--max-model-len",
        "2048",
    ]
    res = subprocess.run(
        [sys.executable, "-m", "cli.main", "eval-policy", *argv, "--output", str(out), "--engines", ENGINES],
        capture_output=True,
        text=True,
        env=user_env(),
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert_quiet(res.stdout + res.stderr, f"engines file {ENGINES} — policy smollm2-135m-instruct, task math")
    m = json.loads(out.read_text())
    assert m["n"] == 2 and m["task"] == "math" and m["policy_accuracy"] in (0.0, 0.5, 1.0)


def test_eval_policy_ifeval_generates_answers_and_checks_them_by_code(default_model_dir, tmp_path):
    """The default model answers 3 of IFEval's prompts (--limit; the whole file is validated first); every answer is
    checked by IFEval's own code, and the records agree with checking the saved answers again."""
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    from dr_core.ifeval import checks, testbed

    out, recs = tmp_path / "m.json", tmp_path / "r.jsonl"
    data = bundled(testbed.HELDOUT_FILE)
    args = ["eval-policy", "--policy", "default", "--task", "ifeval", "--data", str(data), "--limit", "3"]
    res = runner.invoke(
        app, [*args, "--max-tokens", "48", "--engines", ENGINES, "-o", str(out), "--records", str(recs)]
    )
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())
    assert m["n"] == 3 and m["task"] == "ifeval" and "SmolLM2-135M" in m["policy"]
    rows = {r.id: r for r in checks.load_rows(data, 3)}
    for rec in map(json.loads, recs.read_text().splitlines()):
        assert rec["policy"].strip()  # generated
        assert rec["policy_strict"] == [v.strict for v in checks.check(rows[rec["id"]], rec["policy"])]
    assert m["policy_prompt_level_strict_acc"] in (0.0, 1 / 3, 2 / 3, 1.0)


def test_in_loop_task_writes_win_rate_rows(test_engine_config, tmp_path):
    """P(0) against itself: greedy answers are identical, so a judge that is consistent at all can only tie."""
    from dr_core.config import EnginesConfig, coevolve_preset
    from dr_core.runs.refs import StepContext
    from dr_core.store import sql
    from dr_core.store.artifacts import Store
    from tasks.policy_eval import evaluate_policy
    from tasks.train import default_ref

    eng = test_engine_config.model_dump()
    cfg = coevolve_preset(
        "tiny",
        round={"engines": EnginesConfig(generator=eng, verifier=eng, policy=eng).model_dump()},
        policy_eval={"limit": 2, "max_tokens": 24},
    )
    store = str(tmp_path / "store")
    ref = evaluate_policy.fn(StepContext(store=store, run_id="run", round_no=1), cfg, default_ref()).model_dump()
    assert ref["metrics"]["n"] == 2 and ref["metrics"]["win_rate"] == 0.5 and ref["metrics"]["tie_rate"] == 1.0
    rows = sql.run(Store.from_url(store).connect(), "eval_summary", {"run_id": "run"}).to_pylist()
    got = {r["metric"]: r for r in rows}
    assert got["win_rate"]["mean"] == 0.5 and got["win_rate"]["round"] == 1
    assert got["win_rate"]["benchmark"] == "policy-eval-arenahard.vs-P0"
    assert {"tie_rate", "win_rate_ci_low", "win_rate_ci_high", "policy_mean_chars"} <= set(got)
