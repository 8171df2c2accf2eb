"""The integration half of tests/unit/test_cli_eval.py (real models, servers or clusters): its helpers live
there. Each command runs as a subprocess with its output to pipes (a log): the default log has none of the known
noise and one models line (tests/support/noise.py); ``--verbose`` lets the noise through. The models are SmolLM2 in
every role (tests/support/engines_smollm2.yaml): these tests are not about the default preset (its larger verifier
would only add time; the default's roles are checked without a model in tests/unit/test_models_line.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dr_core.paths import bundled
from tests.support.noise import assert_quiet, models_lines, noise_in, user_env
from tests.unit.test_cli_eval import _pairs

ENGINES = str(Path(__file__).resolve().parents[1] / "support" / "engines_smollm2.yaml")


def _dr(*args, timeout=600):
    """``dr ARGS`` in a subprocess, as a user's shell runs it (``user_env``: the log a user gets)."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, env=user_env(), timeout=timeout
    )


@pytest.mark.slow
def test_model_prepare_prints_the_checkpoint(default_model_dir):
    res = _dr("model", "prepare")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(default_model_dir)


@pytest.mark.slow
def test_eval_evaluator_on_held_out_human_pairs(tmp_path, default_model_dir):
    data = tmp_path / "hh.jsonl"
    data.write_text("".join(bundled("eval_hh_harmless_pairs.jsonl").read_text().splitlines(True)[:2]))
    out = tmp_path / "metrics.json"
    res = _dr(
        "eval-evaluator", str(data), "--format", "pairwise", "--seeds", "2", "--output", str(out), "--engines", ENGINES
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert_quiet(res.stdout + res.stderr, f"engines file {ENGINES}", "verifier smollm2-135m-instruct (system prompt")
    m = json.loads(out.read_text())
    assert m["n"] == 2 and m["seeds"] == 2 and m["mode"] == "dynamic"
    # AVG@2 over the seeds of shares of 2 pairs
    assert len(m["accuracy_per_seed"]) == 2 and m["accuracy"] == pytest.approx(sum(m["accuracy_per_seed"]) / 2)
    for key in ("accuracy", "ties", "unscorable"):
        assert 4 * m[key] == pytest.approx(round(4 * m[key])), (key, m[key])
    assert m["accuracy"] + m["ties"] <= 1.0 + 1e-9  # a tied pair is not a correct one
    gen, ver = m["costs"]["generation"], m["costs"]["verification"]
    assert gen["requests"] == 4 and gen["prompt_tokens"] > 0 and gen["seconds"] > 0
    assert ver["requests"] == 0 or ver["seconds"] > 0
    assert m["seconds"] >= gen["seconds"] + ver["seconds"]  # the wall clock spans both stages


@pytest.mark.slow
def test_score_writes_rubrics_verdicts_scores(tmp_path, default_model_dir):
    data = tmp_path / "sets.jsonl"
    data.write_text(
        json.dumps(
            {
                "id": "s1",
                "prompt": "What is the capital of France?",
                "responses": ["Paris.", "I think it is Lyon.", "The capital of France is Paris."],
            }
        )
        + "\n"
    )
    out = tmp_path / "scored.jsonl"
    res = _dr("score", str(data), "--output", str(out), "--mode", "static", "--engines", ENGINES)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_quiet(res.stdout + res.stderr, f"engines file {ENGINES}", "generator smollm2-135m-instruct")
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["id"] == "s1" and len(rec["seeds"]) == 1
    s = rec["seeds"][0]
    if s["rubric"] is None:  # a weak model may write an unusable rubric: then it says why
        assert s["rubric_error"] and s["unscorable"] and s["scores"] is None
    else:
        assert len(s["verdicts"]) == 3 and all(len(row) == len(s["rubric"]) for row in s["verdicts"])
        assert len(s["scores"]) == 3 and set(s) >= {"r_disc", "unscorable", "shown_order", "rubric_text"}


@pytest.mark.slow
def test_verbose_lets_the_third_party_log_through(tmp_path, default_model_dir):
    data = tmp_path / "sets.jsonl"
    data.write_text(json.dumps({"id": "s1", "prompt": "Say hi.", "responses": ["Hi!", "Go away."]}) + "\n")
    argv = ["score", str(data), "-o", str(tmp_path / "scored.jsonl"), "--mode", "static", "--config", ENGINES]
    res = _dr(*argv, "--verbose")
    assert res.returncode == 0, res.stderr[-3000:]
    log = res.stdout + res.stderr
    assert {"cpu_worker.py", "NUMA binding"} <= set(noise_in(log)), log[-3000:]  # vLLM's and torch's lines are back
    assert len(models_lines(log)) == 1  # --config: the old name of --engines


@pytest.mark.slow
def test_eval_evaluator_with_roles_on_a_remote_vllm_server(tmp_path, vllm_server):
    data = _pairs(tmp_path / "pairs.jsonl", n=2)
    cfg = tmp_path / "engines.yaml"
    role = f"  kind: openai_http\n  base_url: {vllm_server}\n  model: default\n"
    cfg.write_text(f"generator:\n{role}verifier:\n{role}")
    out = tmp_path / "metrics.json"
    res = _dr(
        "eval-evaluator",
        str(data),
        "--format",
        "pairwise",
        "--seeds",
        "1",
        "--mode",
        "static",
        "--config",
        str(cfg),
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert_quiet(res.stderr, f"generator default at {vllm_server}, verifier default at {vllm_server}")
    m = json.loads(out.read_text())
    assert m["models"] == {"generator": "smollm2-135m", "verifier": "smollm2-135m"}
    assert m["n"] == 2 and m["costs"]["generation"]["requests"] == 2
