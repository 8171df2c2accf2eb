"""The round flow on a real local Ray cluster through prefect_ray's RayTaskRunner, on the CPU with the default model:
a head node on 127.0.0.1 with no CPUs of its own and two worker nodes with one CPU each (``ray start --block``,
stopped by their pids), the model steps in 2 shards per step with one CPU per shard task (``scale.resources``).
The merged rows must be the unsharded in-process round's rows: the same Parquet bytes, with the same seeds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.netutil import free_ports, wait_until

pytestmark = [pytest.mark.slow]


def _stop(proc: subprocess.Popen) -> None:
    """Stop a `ray start --block` by its pid: SIGTERM makes it stop the Ray processes it started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive_nodes(gcs: str, env: dict) -> int:
    code = (
        "import ray; ray.init(address='%s', log_to_driver=False); "
        "print(sum(1 for n in ray.nodes() if n['Alive']))" % gcs
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


def _client_server_logs(root: Path) -> str:
    """The Ray client servers' stderr under this cluster's temp dir: why a ``ray://`` connection failed."""
    errs = sorted(root.glob("session_*/logs/ray_client_server*.err"))
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in errs) or "(no client server log)"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """(``ray://127.0.0.1:PORT``, the cluster's temp dir) of a head (0 CPUs) and two 1-CPU worker nodes, all on
    loopback. The temp dir is this cluster's own (short: Ray's socket paths must fit 107 bytes), so its logs are
    not mixed with another Ray's in /tmp/ray and a failure can show them."""
    pytest.importorskip("prefect_ray", reason="prefect-ray is not installed")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:
        pytest.skip("the ray command is not installed")
    logs = tmp_path_factory.mktemp("ray")
    gcs_port, client_port = free_ports(2)
    gcs = f"127.0.0.1:{gcs_port}"
    # no token auth on this loopback test cluster: a token file another Ray cluster of this machine left in
    # ~/.ray would make the worker nodes' start fail ("InvalidAuthToken")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled")
    root = Path(tempfile.mkdtemp(prefix="dr-ray-", dir="/tmp"))  # where Ray itself would put it
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--temp-dir", str(root), "--block"]
    procs: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [ray_bin, "start", *args, *common], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        procs.append(proc)
        wait_until(
            lambda: b"block forever" in (logs / f"{name}.log").read_bytes(),
            timeout=120,
            what=f"ray {name} node",
            proc=proc,
            log=logs / f"{name}.log",
        )
        return proc

    try:
        start(
            "head",
            [
                "--head",
                "--port",
                str(gcs_port),
                "--ray-client-server-port",
                str(client_port),
                "--num-cpus",
                "0",
                "--include-dashboard",
                "false",
            ],
        )
        for i in range(2):
            start(f"worker{i}", ["--address", gcs, "--num-cpus", "1"])
        wait_until(lambda: _alive_nodes(gcs, env) == 3, timeout=120, interval=1, what="3 live Ray nodes")
        yield f"ray://127.0.0.1:{client_port}", root
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def test_sharded_round_on_ray_workers_gives_the_unsharded_rows(
    ray_cluster, prefect_harness, test_engine_config, tmp_path, monkeypatch
):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the driver, like the cluster (fixture)
    from dr_core.config import EnginesConfig, preset
    from dr_core.store.artifacts import Store
    from flows.round import RoundParams, round_flow
    from flows.runners import make_task_runner

    eng = test_engine_config
    resources = {role: {"num_cpus": 1, "num_gpus": 0} for role in ("generator", "verifier", "policy")}
    cfg = preset(
        "tiny",
        n_prompts=2,
        k=2,
        n_anchor=3,
        policy_max_tokens=24,
        generator_max_tokens=200,
        engines=EnginesConfig(generator=eng, verifier=eng, policy=eng),
        scale={"shards": 2, "resources": resources},
    )

    def run(store: str, config, runner=None):
        flow_fn = round_flow if runner is None else round_flow.with_options(task_runner=runner)
        return flow_fn(RoundParams(config=config, store=store, run_id="ray", round_no=1, run_eval=False))

    address, root = ray_cluster
    try:
        on_ray = run(str(tmp_path / "ray"), cfg, make_task_runner(address))
    except Exception as exc:  # a failed ray:// connection names a log on the head: show it
        raise AssertionError(f"the round on Ray failed: {exc}\n{_client_server_logs(root)}") from exc
    steps = on_ray.steps
    for step in ("sample", "generate-rubrics", "verify"):
        assert [steps[f"{step}/shard-{i}"]["state"] for i in range(2)] == ["Completed", "Completed"], steps
        assert steps[step]["state"] == "Completed"  # the merge
    ray_store = Store.from_url(str(tmp_path / "ray"))
    assert len(ray_store.files_under("_shards/verdicts", ".parquet")) == 2

    alone = run(str(tmp_path / "alone"), cfg.model_copy(update={"scale": preset("tiny").scale}))
    assert "sample/shard-1" not in alone.steps  # in this process, unsharded: one shard of one
    assert alone.steps["sample/shard-0"]["state"] == alone.steps["sample"]["state"] == "Completed"
    assert on_ray.summary == alone.summary
    assert on_ray.summary.verdicts > 0
    for table in ("samples", "rubrics", "verdicts"):
        ref = Store.from_url(str(tmp_path / "alone")).content_hash(alone.artifacts[table])
        assert ray_store.content_hash(on_ray.artifacts[table]) == ref, table
