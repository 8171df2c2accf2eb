"""Session fixtures for Prefect: one test harness (a temporary local API) for in-process flow runs, and a tiny
round config that runs on the session's vLLM engine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.netutil import free_port, wait_for_http


@contextlib.contextmanager
def prefect_server(home: Path, timeout: float = 180.0):
    """A real ``prefect server`` on 127.0.0.1 with its own PREFECT_HOME; yields its API URL once healthy, and is
    stopped by its process group id (SIGTERM, then SIGKILL after 30 s)."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", OMP_NUM_THREADS="1")
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        wait_for_http(
            f"{api}/health", timeout=timeout, what="prefect server health", proc=proc, log=home / "server.log"
        )
        yield api
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        log.close()


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    from dr_core.config.runtime import configure_prefect

    configure_prefect()
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def test_engine_config(default_model_dir, vllm_engine):
    """The session engine's config, registered with the task engine pool so flows reuse the loaded model."""
    from dr_core.config import EngineConfig
    from tasks.runtime import adopt_engine
    from tests.support.fixtures_model import TEST_MAX_MODEL_LEN

    cfg = EngineConfig(model=str(default_model_dir), max_model_len=TEST_MAX_MODEL_LEN)
    adopt_engine(cfg, vllm_engine)
    return cfg


@pytest.fixture(scope="session")
def micro_round(test_engine_config):
    """A round small enough for CI: 2 prompts, K=2, 3 anchors, short generations, 2 eval pairs."""
    from dr_core.config import EnginesConfig, preset

    eng = test_engine_config
    return preset(
        "tiny",
        n_prompts=2,
        k=2,
        n_anchor=3,
        eval_limit=2,
        policy_max_tokens=32,
        generator_max_tokens=200,
        engines=EnginesConfig(generator=eng, verifier=eng, policy=eng),
    )
