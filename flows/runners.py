"""Task runners of the round and co-evolution flows: Prefect's default (threads in the flow's process) or
``prefect_ray.RayTaskRunner``, which runs the model steps' shard tasks on a Ray cluster.

    dr round --task-runner ray                      # a Ray cluster started for the flow (or $RAY_ADDRESS)
    dr coevolve --task-runner ray://head:10001      # an existing cluster, through Ray Client
    DR_TASK_RUNNER=ray://head:10001 prefect worker start --pool dr-process   # deployments: the flows' default

What a shard task asks the cluster for comes from the config (``RoundConfig.scale.resources``: ``num_cpus``,
``num_gpus`` per role), through prefect_ray's ``remote_options``. The workers get the environment the engines and
Prefect need (``worker_env``): the Prefect API of this flow run (a Prefect server's URL, or the temporary local
server of an embedded run, which only workers on this machine can reach: a cluster on other machines needs
``PREFECT_API_URL`` set to a server they reach), the vLLM and thread settings, and the dynamicrubric cache; never
credentials (a worker reads the store's ``AWS_*`` keys from its own environment).
"""

from __future__ import annotations

import contextlib
import os

from dr_core.config import ConfigError

#: Environment variables passed to the Ray workers when set here (names, or prefixes ending in '_').
#: (Not every VLLM_ variable: a loaded vLLM engine sets some of its own, e.g. VLLM_DIST_IDENT, that name this process.)
WORKER_ENV = (
    "OMP_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY",
    "VLLM_LOGGING_LEVEL",
    "DR_",
    "TORCH_EXTENSIONS_DIR",
    "PREFECT_LOGGING_LEVEL",
    "PREFECT_SERVER_ANALYTICS_ENABLED",
    "S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)
#: Never passed, even under a passed prefix.
_SECRET_HINTS = ("KEY", "SECRET", "TOKEN", "PASSWORD")


class TaskRunnerError(ConfigError):
    """A --task-runner (or $DR_TASK_RUNNER) value that names no runner: one error line, exit 2."""


def parse_task_runner(spec: str | None) -> str | None:
    """'thread' (or None): Prefect's default runner, None. 'ray': a Ray cluster started for the flow run, or the one
    at $RAY_ADDRESS. 'ray://HOST:PORT': an existing cluster through Ray Client. Returns the Ray address ('' for a
    local or $RAY_ADDRESS cluster), None for threads."""
    if spec is None or spec == "thread":
        return None
    if spec == "ray":
        return ""
    if spec.startswith("ray://") and len(spec) > len("ray://"):
        return spec
    raise TaskRunnerError(f"--task-runner {spec!r}: expected 'thread', 'ray' or 'ray://HOST:PORT'")


def worker_env(api_url: str | None) -> dict[str, str]:
    """The variables a Ray worker needs from this process (``WORKER_ENV``), secrets left out, and the Prefect API
    the flow run uses."""
    env = {}
    for name, value in os.environ.items():
        wanted = any(name == w or (w.endswith("_") and name.startswith(w)) for w in WORKER_ENV)
        if wanted and not any(h in name.upper() for h in _SECRET_HINTS):
            env[name] = value
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def _api_url() -> str | None:
    """The Prefect API of this process: PREFECT_API_URL, or the temporary local server an embedded run started."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return url
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the process's one temporary server (started by the flow run's client)
    return server.api_url if server.server_process is not None else None


#: Ray Client connections tried per flow run when the cluster's proxy fails to start the client's server.
CLIENT_INIT_ATTEMPTS = 3


def connect_retrying(enter, warn, attempts: int = CLIENT_INIT_ATTEMPTS, pause_s: float = 1.0):
    """``enter()`` (the runner's ``ray.init``), tried again when a Ray Client proxy answers "Initialization failure
    from server": its per-client server can die while it is being forked (ray-project/ray#63202, open in Ray 2.60;
    seen here as ``psutil.ZombieProcess`` in the proxier). A failed client init disconnects itself, so a retry starts
    clean. Any other error, and the last attempt's, propagate unchanged."""
    import time

    for attempt in range(1, attempts):
        try:
            return enter()
        except ConnectionAbortedError as exc:
            if "Initialization failure from server" not in str(exc):
                raise
            last = next((ln.strip() for ln in reversed(str(exc).splitlines()) if ln.strip()), "")
            warn(
                f"Ray Client: the cluster could not start this client's server ({last}); "
                f"connecting again ({attempt + 1} of {attempts}, ray-project/ray#63202)"
            )
            time.sleep(pause_s)
    return enter()


def make_task_runner(spec: str | None):
    """The task runner for ``--task-runner`` (``parse_task_runner``), None for Prefect's default."""
    address = parse_task_runner(spec)
    if address is None:
        return None
    from prefect_ray import RayTaskRunner

    class DynamicRubricRayTaskRunner(RayTaskRunner):
        """RayTaskRunner whose workers get ``worker_env`` (computed when the flow run starts it, once the flow's
        Prefect API is known)."""

        def __enter__(self):
            runtime_env = dict(self.init_kwargs.get("runtime_env") or {})
            runtime_env["env_vars"] = {**worker_env(_api_url()), **runtime_env.get("env_vars", {})}
            self.init_kwargs = {**self.init_kwargs, "runtime_env": runtime_env}
            return connect_retrying(self._enter_once, self.logger.warning)

        def _enter_once(self):
            # Prefect's TaskRunner.__enter__ marks the runner started before ray.init runs: a failed init would leave
            # it so, and the next attempt would fail with "This task runner is already started"
            try:
                return super().__enter__()
            except BaseException:
                self._started = False
                raise

        def duplicate(self):
            return type(self)(address=self.address, init_kwargs=self.init_kwargs)

    init_kwargs: dict = {}
    if not address:
        address = os.environ.get("RAY_ADDRESS") or None
    if address is None:
        # a new cluster of this machine for the flow run ("local": ray.init would otherwise join whatever cluster was
        # started last on this machine), no dashboard, no usage report
        address = "local"
        init_kwargs.update(include_dashboard=False)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return DynamicRubricRayTaskRunner(address=address, init_kwargs=init_kwargs)


def from_env():
    """The flows' own default task runner: ``$DR_TASK_RUNNER`` (the values of ``--task-runner``), so a deployment
    (a work pool's job variables, ``env: {DR_TASK_RUNNER: ray://head:10001}``) fans out without a CLI. None when
    unset: Prefect's default."""
    spec = os.environ.get("DR_TASK_RUNNER") or None
    try:
        return make_task_runner(spec)
    except TaskRunnerError as exc:
        raise TaskRunnerError(f"$DR_TASK_RUNNER: {exc}") from None


def fans_out() -> bool:
    """True when the running flow's task runner is Ray: the model steps then go to the cluster as shard tasks."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None)
    return runner is not None and any(c.__name__ == "RayTaskRunner" for c in type(runner).__mro__)


def role_options(resources: dict[str, float]):
    """prefect_ray's ``remote_options`` for a role's shard tasks (a no-op context without Ray)."""
    if not fans_out():
        return contextlib.nullcontext()
    from prefect_ray.context import remote_options

    return remote_options(**resources)
