"""Session fixtures for the real default model: the prepared checkpoint, ONE in-process vLLM engine per test
session, and a real vLLM OpenAI-compatible server on 127.0.0.1 (started on first use, stopped by its PID).

Tests using them are marked ``integration``. They skip with a reason when vLLM or the model package is missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dr_core.config.numerics import auto_dtype
from tests.support.netutil import free_port, wait_for_http

#: Small context: the tests' prompts are short, and a small KV cache starts faster.
TEST_MAX_MODEL_LEN = 2048


@pytest.fixture(scope="session")
def default_model_dir():
    from dr_core.model import ModelError, prepare_default_model

    try:
        return prepare_default_model()
    except ModelError as exc:
        pytest.skip(f"default model unavailable: {exc}")


@pytest.fixture(scope="session")
def vllm_engine(default_model_dir):
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    from dr_core.config import EngineConfig
    from dr_core.engines import make_engine

    engine = make_engine(EngineConfig(model=str(default_model_dir), max_model_len=TEST_MAX_MODEL_LEN))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def vllm_server(default_model_dir, tmp_path_factory):
    """Base URL of a real `vllm.entrypoints.openai.api_server` serving the default model (about 30-60 s to start)."""
    pytest.importorskip("vllm", reason="vllm (the cpu or gpu extra) is not installed")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING")
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
        str(TEST_MAX_MODEL_LEN),
    ]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_http(f"{base}/models", timeout=300, what="vLLM server", proc=proc, interval=1, log=log)
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="session")
def http_engine(vllm_server):
    from dr_core.config import EngineConfig
    from dr_core.engines import make_engine

    engine = make_engine(EngineConfig(kind="openai_http", base_url=vllm_server, model="default", concurrency=8))
    yield engine
    engine.close()
