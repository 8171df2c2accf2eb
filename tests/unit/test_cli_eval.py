"""`dr eval-evaluator`, `dr score`, `dr model prepare`: input errors stop the run before any model work (exit 2,
the file and line named, no output file); on the real model the commands write the documented outputs."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli.app import app
from dr_core.engines.pool import EnginePool

runner = CliRunner()


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if anything tries to start an engine."""

    def boom(*a, **k):
        raise AssertionError("model work started")

    monkeypatch.setattr(EnginePool, "open_roles", boom)
    monkeypatch.setattr(EnginePool, "get", boom)


def _pairs(path, n=2, bad_line=None):
    lines = [
        json.dumps({"id": f"p{i}", "prompt": "Say hi.", "chosen": "Hi there!", "rejected": "Go away."})
        for i in range(n)
    ]
    if bad_line is not None:
        lines.insert(bad_line - 1, '{"id": "bad", "prompt": "x", "chosen": "y"}')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_line_stops_before_model_work(tmp_path, no_model):
    data = _pairs(tmp_path / "pairs.jsonl", n=3, bad_line=3)
    out = tmp_path / "metrics.json"
    res = runner.invoke(
        app, ["eval-evaluator", str(data), "--format", "pairwise", "--limit", "1", "--output", str(out)]
    )
    assert res.exit_code == 2
    assert "pairs.jsonl:3" in res.stderr and "rejected" in res.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl"]


def test_score_refuses_malformed_sets(tmp_path, no_model):
    data = tmp_path / "sets.jsonl"
    data.write_text(json.dumps({"id": "s", "prompt": "p", "responses": ["a", 3]}) + "\n")
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["score", str(data), "--output", str(out)])
    assert res.exit_code == 2 and "sets.jsonl:1" in res.stderr and "responses[1]" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "triplets"], "--format must be one of"),
        (["--format", "pairwise", "--mode", "oracle"], "--mode must be one of"),
        (["--format", "pairwise", "--seeds", "0"], "--seeds must be >= 1"),
        (["--format", "pairwise", "--limit", "0"], "--limit must be >= 1"),
    ],
)
def test_bad_options(tmp_path, no_model, args, message):
    data = _pairs(tmp_path / "pairs.jsonl")
    res = runner.invoke(app, ["eval-evaluator", str(data), "--output", str(tmp_path / "m.json"), *args])
    assert res.exit_code == 2 and message in res.stderr


def test_bad_engine_config(tmp_path, no_model):
    data = _pairs(tmp_path / "pairs.jsonl")
    cfg = tmp_path / "engines.yaml"
    cfg.write_text("verifier:\n  kind: openai_http\n")
    res = runner.invoke(
        app,
        [
            "eval-evaluator",
            str(data),
            "--format",
            "pairwise",
            "--output",
            str(tmp_path / "m.json"),
            "--config",
            str(cfg),
        ],
    )
    assert res.exit_code == 2 and "base_url" in res.stderr


def _dr(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout)
