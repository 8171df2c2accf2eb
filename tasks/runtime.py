"""What the tasks share at run time: artifact references, the per-process engine pool, model identities, and
where Prefect persists results and cache records (inside the artifact store).

An artifact reference is ``dr_core.runs.refs.ArtifactRef`` ``{uri, sha256, rows}`` (``sha256``: the part file's
content hash): tasks pass these, never frames. A checkpoint reference is ``CheckpointRef`` ``{uri, fingerprint}``
(``model_id``: an identity, not a file hash; tasks/train.py). The cache key of a downstream task uses the sha256 or
the fingerprint, not the uri (tasks/options.py).

``engines()`` is the process's engine pool, the one object of this codebase that is per process by design: a round's
tasks (threads of the flow's process, or tasks of one Ray worker) share the models the first of them loaded, and a
Prefect task receives only serializable inputs, so the pool cannot travel with them. The tasks pass it to dr_core
explicitly (``updates.train_policy(..., engines)``); dr_core holds no pool of its own. At most ``$DR_MAX_ENGINES``
(default 3: generator, verifier, policy) in-process vLLM engines stay loaded; asking for another closes the least
recently used one first.
"""

from __future__ import annotations

import functools
import os
from urllib.parse import urlparse

from dr_core.config import EngineConfig
from dr_core.engines.base import Engine
from dr_core.engines.identity import model_id
from dr_core.engines.pool import EnginePool
from dr_core.runs import round_steps
from dr_core.runs.refs import ArtifactRef, write_ref
from dr_core.store.artifacts import Store
from tasks.result_storage import storage_for

__all__ = [
    "adopt_engine",
    "close_engines",
    "engine_for",
    "engines",
    "in_run",
    "model_id",
    "read_rows",
    "result_storage",
    "write_ref",
]


@functools.cache
def engines() -> EnginePool:
    """This process's engine pool (made on first use)."""
    return EnginePool(max_local=lambda: int(os.environ.get("DR_MAX_ENGINES", "3")))


def engine_for(cfg: EngineConfig) -> Engine:
    """The process's engine for ``cfg`` (built on first use)."""
    return engines().get(cfg)


def adopt_engine(cfg: EngineConfig, engine: Engine) -> None:
    """Let the steps use an engine the caller built (and will close) for ``cfg``: a notebook's or a test session's
    already-loaded model."""
    engines().adopt(cfg, engine)


def close_engines() -> None:
    """Close the process's engines (adopted ones are left to their owner)."""
    engines().close()


def read_rows(store: Store, ref: ArtifactRef) -> list[dict]:
    """The rows of the part ``ref`` points at, without the run partition columns."""
    return round_steps.rows_of(store.read(ref.uri))


def result_storage(store_url: str):
    """Where Prefect keeps task results and cache records: ``<store>/_prefect/results``, through a saved block that
    writes every record atomically (tasks/result_storage.py): ``AtomicLocalFileSystem`` for a local store (temp file,
    fsync, rename), ``AtomicRemoteFileSystem`` for an S3 store (one ``pipe_file`` per record). Saved, as Prefect
    requires; the S3 block holds no credentials: s3fs reads them from the environment at run time."""
    store = Store.from_url(store_url)
    local = store.local_root()
    if local is not None:
        return storage_for(local / "_prefect" / "results")
    opts = store.s3
    # the store's own budget (dr_core.store.artifacts.S3Options: timeouts, one retry loop), never its keys
    settings = {
        "config_kwargs": {
            "connect_timeout": opts.connect_timeout_s,
            "read_timeout": opts.read_timeout_s,
            "retries": {"total_max_attempts": 1, "mode": "standard"},
        }
    }
    if store.endpoint_url:
        settings["client_kwargs"] = {"endpoint_url": store.endpoint_url}
    return storage_for(f"{store.url}/_prefect/results", settings)


def in_run(uri: str, run_id: str, round_no: int) -> bool:
    return f"/run_id={run_id}/round={round_no}/" in urlparse(uri).path + "/"
