"""Render the Kubernetes Job that the prefect-kubernetes worker would submit for a flow run, with the worker's own
code (``KubernetesWorkerJobConfiguration``), check it against the Kubernetes client's models, and print it as JSON.

Runs in the worker's environment (``bash infra/k8s/install-worker.sh``); it needs no cluster:

    .venv-worker/bin/python infra/k8s/render_job.py --values '{"gpu_count": 2}'       # the pool template, no server
    PREFECT_API_URL=http://prefect:4200/api .venv-worker/bin/python infra/k8s/render_job.py \\
        --deployment dynamicrubric-coevolve/coevolve-gpu --values '{"image": "reg/dr-gpu:0.1.0"}'
    ... | kubectl apply --dry-run=server -f -                                       # and let a cluster check it too

Without ``--deployment`` the template (``--template``, default ``base-job-template.json`` beside this file) is
rendered with ``--values`` as a flow run's job variables. With it, the work pool and the deployment are read from
the Prefect server and merged as the worker merges them for a run (pool defaults < deployment < ``--values``);
nothing is written to the server. A job variable that the template does not declare is an error here: Prefect
itself ignores it, so a misspelt ``gpus: 2`` would run on the default GPU count without a word.

The check is strict: the Job is read into ``kubernetes_asyncio.client.V1Job`` and written back, and every field of
the manifest must survive the round trip. A field the models do not know (a typo like ``nodeSelecter``, which the
API server drops with only a warning) or a value of the wrong shape is reported by its path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

try:
    from dr_core.errors import DRError
except ImportError:  # the Kubernetes worker's own environment, without the project installed

    class DRError(Exception):  # type: ignore[no-redef]
        """Stands in for ``dr_core.errors.DRError`` where the project is not installed."""


TEMPLATE = Path(__file__).resolve().parent / "base-job-template.json"
RENDER_NAME = "dr-render"  # the flow-run name of a rendering; the Job's generateName starts with it

#: Pod-spec fields that prefect-kubernetes 0.8.0 requires in every template (``_get_base_job_manifest``: they belong
#: to the Job spec, and a pod spec has no such fields). The API server drops them; the round trip may too.
WORKER_REQUIRED_EXTRAS = frozenset({"/spec/template/spec/parallelism", "/spec/template/spec/completions"})


class RenderError(DRError, ValueError):
    """Bad input or an invalid manifest: one line, naming the file, variable or manifest path."""


def load_template(path: Path) -> dict:
    try:
        template = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RenderError(f"{path}: not a readable JSON base job template ({exc})") from None
    for key in ("job_configuration", "variables"):
        if not isinstance(template.get(key), dict):
            raise RenderError(f"{path}: field '{key}' is missing or not an object")
    return template


def check_variables(template: dict, values: dict, where: str) -> None:
    """Every job variable named in ``values`` (``env.FOO`` counts as ``env``) is declared by the template, and the
    values fit its schema (Prefect's own check, the one its server runs on a deployment's job variables)."""
    from prefect.utilities.schema_tools import ValidationError, validate

    known = set(template["variables"].get("properties", {}))
    unknown = sorted({k.split(".")[0] for k in values} - known)
    if unknown:
        raise RenderError(
            f"{where}: job variable(s) {unknown} not declared by the work pool's template "
            f"(declared: {', '.join(sorted(known))})"
        )
    try:
        validate(
            {k: v for k, v in values.items() if "." not in k},
            template["variables"],
            raise_on_error=True,
            ignore_required=True,
        )
    except ValidationError as exc:
        raise RenderError(f"{where}: {exc}") from None


def _paths(obj: Any, prefix: str = "") -> dict[str, str]:
    """JSON-pointer path -> str(leaf) for every non-null leaf (an empty dict or list is a leaf too)."""
    if isinstance(obj, dict) and obj:
        return {p: v for k, sub in obj.items() for p, v in _paths(sub, f"{prefix}/{k}").items()}
    if isinstance(obj, list) and obj:
        return {p: v for i, sub in enumerate(obj) for p, v in _paths(sub, f"{prefix}/{i}").items()}
    return {} if obj is None else {prefix: json.dumps(obj) if isinstance(obj, (dict, list)) else str(obj)}


async def validate(manifest: dict):
    """The manifest as a ``V1Job``; raises RenderError naming every path the Kubernetes models lose or change."""
    from kubernetes_asyncio.client import ApiClient

    class _Response:  # ApiClient.deserialize reads a REST response's body
        data = json.dumps(manifest)

    async with ApiClient() as api:
        try:
            job = api.deserialize(_Response(), "V1Job")
        except (ValueError, TypeError, AttributeError) as exc:
            raise RenderError(f"the rendered manifest is not a valid V1Job: {exc}") from None
        back = _paths(api.sanitize_for_serialization(job))
    sent = _paths(manifest)
    lost = sorted(p for p in set(sent) - set(back) if p not in WORKER_REQUIRED_EXTRAS)
    changed = sorted(p for p in set(sent) & set(back) if sent[p] != back[p])
    if lost or changed:
        raise RenderError(
            "the rendered manifest does not fit the Kubernetes models: "
            + "; ".join(
                [f"{p}: unknown field or wrong shape" for p in lost]
                + [f"{p}: {sent[p]!r} reads back as {back[p]!r}" for p in changed]
            )
        )
    if job.kind != "Job" or job.api_version != "batch/v1":
        raise RenderError(f"the rendered manifest is a {job.api_version}/{job.kind}, not a batch/v1 Job")
    return job


async def render_template(template: dict, values: dict) -> dict:
    """The Job for a flow run named ``RENDER_NAME`` with ``values`` as its job variables, rendered exactly as the
    worker does (``from_template_and_values`` then ``prepare_for_flow_run``), with no Prefect server."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.objects import FlowRun
    from prefect.utilities.templating import PlaceholderType, find_placeholders
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    server_side = sorted(
        p.full_match
        for p in find_placeholders(template["job_configuration"])
        if p.type in (PlaceholderType.BLOCK_DOCUMENT, PlaceholderType.VARIABLE)
    )
    if server_side:
        raise RenderError(f"the template reads {server_side} from a Prefect server: render with --deployment")
    # Given a client, the worker's resolvers use it only for block and variable references (none, checked above);
    # without one they would start a temporary Prefect server. This one is never opened.
    offline = PrefectClient("http://127.0.0.1:1/api")
    config = await KubernetesWorkerJobConfiguration.from_template_and_values(template, values, client=offline)
    config.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), name=RENDER_NAME, flow_id=uuid.uuid4(), job_variables=values))
    return config.job_manifest


async def render_deployment(name: str, values: dict) -> dict:
    """The Job that a run of deployment ``name`` (``FLOW/DEPLOYMENT``) with job variables ``values`` would get, read
    from the Prefect server at PREFECT_API_URL the way the worker reads it (``resolve_for_flow_run``). The flow run
    is not created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import FlowRun
    from prefect.exceptions import ObjectNotFound
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    async with get_client() as client:
        try:
            deployment = await client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise RenderError(f"--deployment: no deployment {name!r} on the server") from None
        if not deployment.work_pool_name:
            raise RenderError(f"--deployment: {name!r} has no work pool")
        pool = await client.read_work_pool(deployment.work_pool_name)
        if pool.type != "kubernetes":
            raise RenderError(
                f"--deployment: {name!r} is on work pool {pool.name!r} of type {pool.type!r}, not kubernetes"
            )
        check_variables(pool.base_job_template, deployment.job_variables or {}, f"deployment {name}")
        check_variables(pool.base_job_template, values, "--values")
        run = FlowRun(
            id=uuid.uuid4(),
            name=RENDER_NAME,
            flow_id=deployment.flow_id,
            deployment_id=deployment.id,
            work_pool_name=pool.name,
            job_variables=values,
        )
        config = await KubernetesWorkerJobConfiguration.resolve_for_flow_run(
            run, client=client, work_pool=pool, worker_name="render-job", deployment=deployment
        )
    return config.job_manifest


async def render(template_path: Path, values: dict, deployment: str | None) -> dict:
    """The checked Job manifest of a run: from the template file, or from ``deployment`` on the server."""
    from pydantic import ValidationError

    try:
        if deployment:
            manifest = await render_deployment(deployment, values)
        else:
            template = load_template(template_path)
            check_variables(template, values, "--values")
            manifest = await render_template(template, values)
    except ValidationError as exc:  # the worker's own checks of the job configuration and its manifest
        first = exc.errors()[0]
        raise RenderError(
            f"the template does not give a valid worker configuration: "
            f"{'.'.join(map(str, first['loc'])) or 'job_configuration'}: {first['msg']}"
        ) from None
    await validate(manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--template", type=Path, default=TEMPLATE, help="base job template (JSON); default: %(default)s")
    ap.add_argument("--values", default="{}", help="job variables of the run, a JSON object")
    ap.add_argument("--deployment", help="FLOW/DEPLOYMENT on the server at PREFECT_API_URL (instead of --template)")
    args = ap.parse_args(argv)
    try:
        values = json.loads(args.values)
        if not isinstance(values, dict):
            raise RenderError(f"--values: a JSON object of job variables, not {type(values).__name__}")
        manifest = asyncio.run(render(args.template, values, args.deployment))
    except json.JSONDecodeError as exc:
        print(f"render_job: --values: not JSON ({exc})", file=sys.stderr)
        return 2
    except RenderError as exc:
        print(f"render_job: {exc}", file=sys.stderr)
        return 2
    json.dump(manifest, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
