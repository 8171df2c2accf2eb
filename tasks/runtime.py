"""What the tasks share at run time: artifact references, the per-process engine pool, model identities, and
where Prefect persists results and cache records (inside the artifact store).

An artifact reference is a small dict ``{"uri", "sha256", "rows"}`` (``sha256``: the part file's content hash):
tasks pass these, never frames. A checkpoint reference is ``{"uri", "fingerprint"}`` (``model_id``: an identity,
not a file hash; tasks/train.py). The cache key of a downstream task uses the sha256 or the fingerprint, not the
uri (tasks/options.py).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from dr_core.config import EngineConfig, redact_url
from dr_core.engines import Engine
from dr_core.engines.pool import EnginePool
from dr_core.hashing import update_from_file
from dr_core.model import is_bundled, model_identity
from dr_core.store.artifacts import Store

_POOL = EnginePool(max_local=lambda: int(os.environ.get("DR_MAX_ENGINES", "3")))


def write_ref(store: Store, table: str, rows, part: str, **keys) -> dict:
    """Write one step's rows and return its reference (uri, content hash, row count)."""
    uri = store.write(table, rows, part=part, **keys)
    return {"uri": uri, "sha256": store.content_hash(uri), "rows": len(rows)}


def engine_for(cfg: EngineConfig) -> Engine:
    """One engine per distinct config per process, so a round's steps share loaded models. At most
    ``$DR_MAX_ENGINES`` (default 3: generator, verifier, policy) in-process vLLM engines stay loaded; asking for
    another closes the least recently used one first."""
    return _POOL.get(cfg)


def adopt_engine(cfg: EngineConfig, engine: Engine) -> None:
    """Let the tasks use an engine the caller built (and will close) for ``cfg``: a notebook's or a test
    session's already-loaded model."""
    _POOL.adopt(cfg, engine)


def keep_engines(*configs: EngineConfig) -> None:
    """Close the process's engines other than those for ``configs``: a training step keeps the engines its rewards
    use and frees the rest (their weights and KV caches) for the trainer, pages returned to the OS before it loads."""
    if _POOL.keep_only(configs):
        from dr_core.resources import return_freed_memory

        return_freed_memory()


def close_engines() -> None:
    """Close the process's engines (adopted ones are left to their owner)."""
    _POOL.close()


@lru_cache(maxsize=64)
def _dir_fingerprint(path: str) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.is_file() and (f.suffix in {".json", ".safetensors", ".bin", ".model", ".txt", ".jinja"}):
            h.update(f.name.encode())
            with f.open("rb") as fh:
                update_from_file(h, fh)
    return h.hexdigest()[:16]


def model_id(cfg: EngineConfig) -> str:
    """A model's identity for artifacts and cache keys: a bundled checkpoint by the GGUF hash it came from, a
    local checkpoint by a hash of its files, a served model by URL (never its credentials) and name.

    A list of endpoints is identified by all its URLs, sorted and joined by ","
    (``http://a/v1,http://b/v1#name``): the order of the list changes nothing, while adding, removing or swapping a
    replica gives a new identity, so results of one set of servers are never reused for another that may serve a
    different model (the name is often 'default': whatever each server serves). The price is a cache miss when a
    replica of the same model is added; the step's engine config changes then too, and that is in its cache key
    anyway. One URL keeps its identity of before."""
    if cfg.kind == "openai_http":
        return f"{','.join(sorted(redact_url(u) for u in cfg.base_urls))}#{cfg.model}"
    if is_bundled(cfg.model):
        return model_identity(cfg.model)
    return f"{Path(cfg.model).name}@{_dir_fingerprint(str(Path(cfg.model).expanduser().resolve()))}"


def result_storage(store_url: str):
    """Where Prefect keeps task results and cache records: ``<store>/_prefect/results``. A local store gets a
    plain path; an S3 store a RemoteFileSystem block (saved, as Prefect requires; it holds no credentials: s3fs
    reads them from the environment at run time)."""
    store = Store.from_url(store_url)
    local = store.local_root()
    if local is not None:
        return local / "_prefect" / "results"
    from prefect.filesystems import RemoteFileSystem

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
    block = RemoteFileSystem(basepath=f"{store.url}/_prefect/results", settings=settings)
    name = "dr-results-" + hashlib.sha256(block.basepath.encode()).hexdigest()[:12]
    block.save(name, overwrite=True)
    return RemoteFileSystem.load(name)


def in_run(uri: str, run_id: str, round_no: int) -> bool:
    return f"/run_id={run_id}/round={round_no}/" in urlparse(uri).path + "/"
