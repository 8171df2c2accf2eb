"""How every pipeline task caches, persists and retries: one place, declared on the tasks in tasks/round.py.

Caching by content. A task's cache key is a SHA-256 over its name, the code version (every source file of dr_core,
tasks and sql), and its inputs, where an artifact input counts by its content hash (``ArtifactRef.sha256``), never
by its URI: URIs carry run ids, and the same work under another run id must hit the cache. Model checkpoints count
by their fingerprint (``dr_core.model.checkpoint_fingerprint``), configs by their JSON without their secrets
(``dr_core.config.AUTH_FIELDS``: an API key or password is never hashed, and rotating one keeps the cache).

Persistence. Results (small dicts of URIs and numbers) and cache records are stored under the artifact store
(``<store>/_prefect/results``), so a new process, or a new machine pointed at the same S3 prefix, hits the cache.

Retries. Model and storage steps retry on transient failures (engine crash, out-of-memory, S3/network errors) with
backoff; never on bad input (``BadInput`` and the data/config errors of dr_core), which fails at once.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from dr_core.config import AUTH_FIELDS
from dr_core.datasets import DataError
from dr_core.paths import REPO_DIR

#: Exceptions that mean "the input is wrong": retrying cannot help.
BAD_INPUT = (DataError, ValueError, TypeError, KeyError, FileNotFoundError)


@lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 (first 16 hex) over the source of dr_core, tasks and sql: any code change invalidates caches."""
    h = hashlib.sha256()
    for folder, pattern in (("dr_core", "*.py"), ("tasks", "*.py"), ("sql", "*.sql")):
        for path in sorted((REPO_DIR / folder).rglob(pattern)):
            h.update(str(path.relative_to(REPO_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _canonical(value: Any) -> Any:
    """Inputs reduced to what determines the output: artifacts by content hash, models by fingerprint; secrets
    (an engine's api_key, basic_auth, api_key_env) left out: they do not change what a model answers."""
    if isinstance(value, dict):
        if "sha256" in value and "uri" in value:  # an ArtifactRef-shaped dict: content, not location
            return {"sha256": value["sha256"]}
        return {k: _canonical(v) for k, v in sorted(value.items()) if k not in {"run_id", "store", *AUTH_FIELDS}}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if hasattr(value, "model_dump"):
        return _canonical(value.model_dump(mode="json"))
    if isinstance(value, Path):
        return str(value)
    return value


def content_key(task_name: str, parameters: dict[str, Any]) -> str:
    """SHA-256 of a task's name, the code version and its canonical inputs (run id, store and round left out)."""
    payload = {
        "task": task_name,
        "code": code_version(),
        "inputs": _canonical({k: v for k, v in parameters.items() if k not in {"run_id", "store", "round_no"}}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def content_cache_key(context, parameters: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn``: ``content_key`` of the task run. Run ids and the store URL are left out on purpose
    (see module docstring)."""
    return content_key(context.task.name, parameters)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: anything that is not bad input (engine crash, OOM, network, S3)."""
    if isinstance(exc, (MemoryError, ConnectionError, TimeoutError)):
        return True
    return not isinstance(exc, BAD_INPUT)


def retry_on_transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry unless the exception says the input is bad."""
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we classify, not swallow
        return is_transient(exc)
    return False
