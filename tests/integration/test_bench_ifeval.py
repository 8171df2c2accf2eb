"""The IFEval benchmark's smoke run (infra/benchmarks/bench_ifeval.py --smoke): every phase of the protocol on tiny
sizes, real engines and real TRL training, with a tiny random Llama in every role (this checks that the phases run
and what the result holds, never what they measure: a random model follows no instruction). A rerun reuses every
stored phase, and ``dr report --learning`` draws the result. About 2 minutes on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fixtures_grpo import build_tiny_llama
from tests.support.noise import user_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]


def test_bench_ifeval_smoke_runs_every_phase_and_reuses_them(default_model_dir, tmp_path):
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    model = build_tiny_llama(default_model_dir, tmp_path / "tiny", hidden=128, heads=2)  # vLLM CPU: head size 64
    out, work = tmp_path / "result.json", tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "infra" / "benchmarks" / "bench_ifeval.py"), "--smoke", "--workdir", str(work)]
    cmd += [f"--{role}-model={model}" for role in ("policy", "generator", "verifier")] + ["--output", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=user_env(), timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["benchmark"] == "ifeval" and r["partial"] is False and r["audit_overlap_rows"] == 0
    assert r["args"]["heldout"] == 3 and list(r["seeds"]) == ["0"]
    for key in ("oracle_minus_P0", "GS_minus_G0_agreement", "PGS_minus_PG0"):
        assert {"mean", "ci95"} <= set(r["pooled"][key])
    assert set(r["seeds"]["0"]) == {"generator", "oracle", "PGS", "PG0"}
    assert all(r["seeds"]["0"][part]["curve"]["steps"] for part in ("generator", "oracle"))
    assert set(r["policies"]) == {"P0", "oracle-0", "PGS-0", "PG0-0"}
    assert r["gate"]["checks"] >= 1 and set(r["criteria"]) == {"a", "b", "c"}
    assert "| criterion |" in res.stdout  # the finished run prints its tables

    t = time.perf_counter()
    again = subprocess.run(cmd, capture_output=True, text=True, env=user_env(), timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("reusing") >= 9 and time.perf_counter() - t < 120  # no model work the second time
    assert json.loads(out.read_text())["pooled"] == r["pooled"]

    page = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "dr"), "report", "--learning", str(out), "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
        env=user_env(),
        timeout=120,
    )
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "report" / "learning.html").read_text()
    assert "The gate" in html and "(a) the control minus P(0)" in html and "<svg" in html
