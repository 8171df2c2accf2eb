"""``dr doctor`` as a real subprocess (``python -m cli.main doctor``): against a local store in tmp_path, the
session's real S3 server (SeaweedFS, ``s3_server``), and a real HTTP server on 127.0.0.1 answering Prefect's
``/health``, or a closed port. Each run takes under a second; the S3 server is the session's, started once.

The default bundled models are marked prepared in a fresh cache (their completion marker, which is all doctor
reads), so the exit status says what the test set up and not whether this machine converted them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dr_core import model as models
from dr_core.constants import COMPLETE_MARKER
from dr_core.runs import doctor as checks
from tests.support.fixtures_s3 import STORE_ENV, TEST_BUCKET
from tests.support.netutil import free_port

ROOT = Path(__file__).resolve().parents[2]
_CLEARED = ("PREFECT_API_URL", "PREFECT_API_KEY", "MLFLOW_TRACKING_URI", *STORE_ENV)


@pytest.fixture
def cache(tmp_path) -> Path:
    """A cache where the default-installed bundled models carry their completion marker."""
    root = tmp_path / "cache"
    for m in models.BUNDLED.values():
        if m.default_install:
            checkpoint = root / "models" / m.checkpoint_name
            checkpoint.mkdir(parents=True)
            (checkpoint / COMPLETE_MARKER).write_text(m.gguf_sha256)
    return root


def doctor(cache: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    """Run ``dr doctor`` in a fresh interpreter; (exit status, stdout lines)."""
    base = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "doctor", "--timeout", "2", *args],
        cwd=ROOT,
        env={**base, "DR_CACHE_DIR": str(cache), "COLUMNS": "100", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not proc.stderr.strip() or proc.returncode != 0, proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def line(lines: list[str], name: str) -> str:
    hits = [ln for ln in lines if ln.split()[1:2] == [name] or ln.split()[1:3] == name.split()]
    assert len(hits) == 1, (name, lines)
    return hits[0]


def test_a_local_store_in_tmp_path(cache, tmp_path):
    store = tmp_path / "store"
    rc, lines = doctor(cache, "--store", str(store))
    assert rc == 0, "\n".join(lines)
    assert line(lines, "store") == f"ok      {'store':<33}  local, {store}: does not exist yet, can be created"
    assert not store.exists()  # doctor creates nothing
    for name in ("python", "versions", "model smollm2-135m-instruct"):
        assert line(lines, name).split()[0] == "ok"
    # facts of this machine (CI's CPU varies: one without bf16 is a note): what doctor's own checks say in this process
    for name, found in (("cpu", checks.check_numerics()), ("cores", checks.check_cores())):
        assert found.status in ("ok", "note") and line(lines, name).split()[0] == found.status
    assert line(lines, "memory").split()[0] in ("ok", "note")  # available memory moves between two reads
    assert line(lines, "prefect").startswith("note")
    tracking = line(lines, "tracking")  # --track mlflow without MLFLOW_TRACKING_URI: beside the store
    assert tracking.startswith("note") and f"logs to sqlite:///{store}/mlflow/mlflow.db" in tracking
    assert lines[-1] == "no problems: this machine is ready for the project"
    store.mkdir()
    rc, lines = doctor(cache, "--json", DR_STORE=str(store))  # the same default as the other commands: DR_STORE
    found = {f["name"]: f for f in json.loads("\n".join(lines))["findings"]}
    assert rc == 0 and found["store"]["detail"] == f"local, {store}: writable" and not any(store.iterdir())


def test_an_unprepared_model_and_an_unwritable_store_are_problems_with_fixes(tmp_path):
    (tmp_path / "file").write_text("")
    rc, lines = doctor(tmp_path / "empty-cache", "--store", str(tmp_path / "file" / "store"))
    assert rc == 1
    store = line(lines, "store")
    assert store.startswith("problem") and store.endswith("— fix: give --store (or DR_STORE) a directory you can write")
    qwen = line(lines, "model qwen2.5-coder-0.5b-instruct")
    assert qwen.startswith("problem") and qwen.endswith("— fix: dr model prepare qwen2.5-coder-0.5b-instruct")
    assert lines[-1].startswith("3 problems:")  # the store and the two default models


def test_an_s3_store_on_the_real_server(cache, s3_server):
    url = f"s3://{TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    rc, lines = doctor(cache, "--store", url, **s3_server.env)
    assert rc == 0, "\n".join(lines)
    ok = line(lines, "store")
    assert ok.startswith("ok") and f"{url} at {s3_server.endpoint_url}: bucket '{TEST_BUCKET}' answers" in ok
    rc, lines = doctor(cache, "--store", "s3://no-such-bucket-dr/x", **s3_server.env)
    missing = line(lines, "store")
    assert rc == 1 and missing.startswith("problem") and s3_server.endpoint_url in missing
    assert "bucket 'no-such-bucket-dr' does not exist" in missing and "— fix: create the bucket" in missing


def test_an_s3_endpoint_that_is_down_is_a_problem_naming_it(cache, s3_server):
    endpoint = f"http://127.0.0.1:{free_port()}"
    rc, lines = doctor(cache, "--store", f"s3://{TEST_BUCKET}/x", **{**s3_server.env, "AWS_ENDPOINT_URL": endpoint})
    down = line(lines, "store")
    assert rc == 1 and down.startswith("problem") and f"at {endpoint}: checking the bucket failed" in down
    assert down.endswith(
        "— fix: check that the endpoint (AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3) is up and reachable from here"
    )


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the http.server name)
        ok = self.path == "/api/health"
        body = b"true" if ok else b"{}"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_prefect_api_reachable_or_not(cache, tmp_path, health_server):
    store = str(tmp_path / "store")
    rc, lines = doctor(cache, "--store", store, PREFECT_API_URL=f"{health_server}/api")
    assert rc == 0, "\n".join(lines)
    assert line(lines, "prefect").split()[:5] == ["ok", "prefect", "GET", f"{health_server}/api/health", "answered"]
    rc, lines = doctor(cache, "--store", store, PREFECT_API_URL=f"{health_server}/elsewhere")
    assert rc == 1 and "answered HTTP 404" in line(lines, "prefect")
    closed = f"http://127.0.0.1:{free_port()}/api"
    rc, lines = doctor(cache, "--store", store, PREFECT_API_URL=closed)
    refused = line(lines, "prefect")
    assert rc == 1 and refused.startswith("problem prefect") and f"GET {closed}/health failed" in refused
    assert "— fix: start that server (prefect server start) or correct PREFECT_API_URL" in refused


def test_mlflow_tracking_server_reachable_or_not(cache, tmp_path, health_server):
    store = str(tmp_path / "store")
    rc, lines = doctor(cache, "--store", store, MLFLOW_TRACKING_URI=f"{health_server}/api")
    assert rc == 0, "\n".join(lines)
    assert line(lines, "tracking").split()[:4] == ["ok", "tracking", "GET", f"{health_server}/api/health"]
    closed = f"http://127.0.0.1:{free_port()}"
    rc, lines = doctor(cache, "--store", store, MLFLOW_TRACKING_URI=closed)
    refused = line(lines, "tracking")
    assert rc == 1 and refused.startswith("problem tracking") and f"GET {closed}/health failed" in refused
    assert "— fix: start that server (mlflow server), or correct MLFLOW_TRACKING_URI" in refused
    (tmp_path / "file").write_text("")
    rc, lines = doctor(cache, "--store", store, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/file/mlflow.db")
    assert rc == 1 and "is a file, not a directory" in line(lines, "tracking")
