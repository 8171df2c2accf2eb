"""flows/runners.py without a cluster: what --task-runner means, and what the Ray workers get from this process's
environment (what the engines and Prefect need, never a secret)."""

from __future__ import annotations

import pytest

from flows import runners


def test_task_runner_values():
    assert runners.parse_task_runner(None) is None and runners.parse_task_runner("thread") is None
    assert runners.parse_task_runner("ray") == ""
    assert runners.parse_task_runner("ray://10.0.0.5:10001") == "ray://10.0.0.5:10001"
    for bad in ("ray://", "spark", "ray:10.0.0.5", ""):
        with pytest.raises(runners.TaskRunnerError, match="expected 'thread', 'ray' or 'ray://HOST:PORT'"):
            runners.parse_task_runner(bad)
    assert runners.make_task_runner("thread") is None


def test_workers_get_the_engine_settings_and_the_api_but_no_secret(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_DIST_IDENT", "vllm_dist_this_process")  # set by a loaded engine: names this process
    monkeypatch.setenv("DR_CACHE_DIR", "/cache")
    monkeypatch.setenv("DR_SERVE_TOKEN", "s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    env = runners.worker_env("http://127.0.0.1:4200/api")
    assert env["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert env["OMP_NUM_THREADS"] == "1" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["DR_CACHE_DIR"] == "/cache" and env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8333"
    assert "VLLM_DIST_IDENT" not in env and "s3cret" not in env.values()


def test_fans_out_is_false_outside_a_ray_flow():
    assert runners.fans_out() is False


def test_deployments_take_the_runner_from_the_environment(monkeypatch):
    monkeypatch.delenv("DR_TASK_RUNNER", raising=False)
    assert runners.from_env() is None
    monkeypatch.setenv("DR_TASK_RUNNER", "ray://head:10001")
    runner = runners.from_env()
    assert type(runner).__name__ == "DynamicRubricRayTaskRunner" and runner.address == "ray://head:10001"
    monkeypatch.setenv("DR_TASK_RUNNER", "dask")
    with pytest.raises(runners.TaskRunnerError, match=r"\$DR_TASK_RUNNER: --task-runner 'dask'"):
        runners.from_env()


def test_ray_alone_starts_a_new_local_cluster_or_joins_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = runners.make_task_runner("ray")  # never whatever cluster this machine started last
    assert local.address == "local" and local.init_kwargs["include_dashboard"] is False
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    joined = runners.make_task_runner("ray")
    assert joined.address == "10.0.0.5:6379" and "include_dashboard" not in joined.init_kwargs


def _enter_failing(times: int, message: str):
    """An ``enter`` that raises ConnectionAbortedError(message) its first ``times`` calls, then returns 'connected'."""
    calls = []

    def enter():
        calls.append(1)
        if len(calls) <= times:
            raise ConnectionAbortedError(message)
        return "connected"

    return enter, calls


_PROXY_RACE = (
    "Initialization failure from server:\nTraceback (most recent call last):\n"
    "psutil.ZombieProcess: PID still exists but it's a zombie (pid=11120)\n"
)


def test_a_client_server_that_died_starting_is_connected_again():
    enter, calls = _enter_failing(2, _PROXY_RACE)
    warnings = []
    assert runners.connect_retrying(enter, warnings.append, attempts=3, pause_s=0) == "connected"
    assert len(calls) == 3 and len(warnings) == 2
    assert "zombie (pid=11120)" in warnings[0] and "(2 of 3, ray-project/ray#63202)" in warnings[0]


def test_the_last_attempt_and_other_errors_propagate():
    enter, calls = _enter_failing(3, _PROXY_RACE)
    with pytest.raises(ConnectionAbortedError, match="Initialization failure"):
        runners.connect_retrying(enter, lambda _: None, attempts=3, pause_s=0)
    assert len(calls) == 3
    enter, calls = _enter_failing(1, "authentication failed")  # not the proxy race: no second try
    with pytest.raises(ConnectionAbortedError, match="authentication failed"):
        runners.connect_retrying(enter, lambda _: None, attempts=3, pause_s=0)
    assert len(calls) == 1


def test_the_ray_runner_itself_connects_again_after_the_proxy_race(monkeypatch):
    """The runner's own __enter__ (Prefect's, then prefect_ray's ray.init) tried twice: a failed first init must not
    leave it marked started (CI: the retry failed with 'This task runner is already started')."""
    import prefect_ray.task_runners as prt

    inits = []

    def init(*args, **kwargs):
        inits.append((args, kwargs))
        if len(inits) == 1:
            raise ConnectionAbortedError(_PROXY_RACE)
        return object()

    monkeypatch.setattr(prt.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(prt.ray, "init", init)
    monkeypatch.setattr(prt.ray, "nodes", lambda: [{"alive": True}])
    monkeypatch.setattr("time.sleep", lambda _s: None)
    runner = runners.make_task_runner("ray://head:10001")
    assert runner.__enter__() is runner
    assert len(inits) == 2 and inits[1][0] == ("ray://head:10001",) and runner._started
    with pytest.raises(RuntimeError, match="already started"):  # a real second entry is still refused
        runner.__enter__()
