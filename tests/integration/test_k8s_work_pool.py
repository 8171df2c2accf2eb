"""The integration half of tests/unit/test_k8s_work_pool.py (real models, servers or clusters); its helpers live
there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from dr_core.paths import REPO_DIR
from tests.unit.test_k8s_work_pool import K8S, TEMPLATE, _container, _env, _worker


@pytest.mark.slow
def test_prefect_deploy_accepts_the_gpu_deployments_and_the_worker_renders_their_jobs(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.support.fixtures_prefect import prefect_server

    spec = yaml.safe_load((K8S / "prefect.yaml").read_text())
    by_name = {d["name"]: d for d in spec["deployments"]}
    store = "s3://dr-test-bucket/dr"
    with prefect_server(tmp_path / "server") as api:
        env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(tmp_path / "cli-home"), "DR_STORE": store}
        prefect = [sys.executable, "-m", "prefect"]  # the project's Prefect (3.7.7), as a user deploys
        for cmd in (
            ["work-pool", "create", "dr-gpu", "--type", "kubernetes", "--base-job-template", str(TEMPLATE)],
            ["--no-prompt", "deploy", "--all", "--prefect-file", "infra/k8s/prefect.yaml"],
        ):
            out = subprocess.run([*prefect, *cmd], env=env, cwd=REPO_DIR, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stdout + out.stderr

        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            pool = client.read_work_pool("dr-gpu")
            assert pool.type == "kubernetes" and pool.base_job_template == json.loads(TEMPLATE.read_text())
            refresh = client.read_deployment_by_name("dynamicrubric-anchor-refresh/anchor-refresh-gpu")
            coevolve = client.read_deployment_by_name("dynamicrubric-coevolve/coevolve-gpu")
            for dep in (refresh, coevolve):
                assert dep.work_pool_name == "dr-gpu"
                assert dep.job_variables == by_name[dep.name]["work_pool"]["job_variables"]
                assert dep.job_variables["gpu_count"] == 4
                assert dep.pull_steps == spec["pull"]
            assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in refresh.schedules] == [
                ("0 3 * * *", "UTC", True)
            ]
            assert refresh.parameters["store"] == store and refresh.parameters["preset"] == "paper"
            assert coevolve.schedules == [] and coevolve.parameters["params"]["store"] == store
            # "accepted" means checked: the server validates job variables against the pool's template
            with pytest.raises(PrefectHTTPStatusError, match="422"):
                client.create_deployment(
                    flow_id=coevolve.flow_id,
                    name="bad-gpus",
                    work_pool_name="dr-gpu",
                    job_variables={"gpu_count": "lots"},
                )

        # the worker's view of a run of the deployment, with a run-level image override on top
        image = "registry.example.com/dynamicrubric-gpu:run"
        out = _worker(
            [
                "infra/k8s/render_job.py",
                "--deployment",
                "dynamicrubric-coevolve/coevolve-gpu",
                "--values",
                json.dumps({"image": image}),
            ],
            tmp_path,
            api=api,
        )
    job = json.loads(out.stdout)
    c = _container(job)
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 4} and c["resources"]["requests"] == {"memory": "64Gi"}
    assert c["image"] == image
    assert c["envFrom"] == [{"secretRef": {"name": "dynamicrubric-s3"}}]
    env = _env(c)
    assert (env["PREFECT__DEPLOYMENT_NAME"], env["PREFECT__FLOW_NAME"]) == ("coevolve-gpu", "dynamicrubric-coevolve")
    assert env["PREFECT_API_URL"] == api  # the pod reports to the worker's server
    assert job["metadata"]["labels"]["prefect.io/work-pool-name"] == "dr-gpu"
