"""The process's one engine pool, shared by every pipeline step that runs in it (the Prefect tasks through
``tasks.runtime``, the training steps of ``dr_core.runs.updates``): a round's steps share loaded models.

At most ``$DR_MAX_ENGINES`` (default 3: generator, verifier, policy) in-process vLLM engines stay loaded; asking for
another closes the least recently used one first.
"""

from __future__ import annotations

import os

from dr_core.config import EngineConfig
from dr_core.engines.base import Engine
from dr_core.engines.pool import EnginePool

_POOL = EnginePool(max_local=lambda: int(os.environ.get("DR_MAX_ENGINES", "3")))


def engine_for(cfg: EngineConfig) -> Engine:
    """The process's engine for ``cfg`` (built on first use)."""
    return _POOL.get(cfg)


def adopt_engine(cfg: EngineConfig, engine: Engine) -> None:
    """Let the steps use an engine the caller built (and will close) for ``cfg``: a notebook's or a test
    session's already-loaded model."""
    _POOL.adopt(cfg, engine)


def keep_engines(*configs: EngineConfig | None) -> None:
    """Close the process's engines other than those for ``configs``: a training step keeps the engines its rewards
    use and frees the rest (their weights and KV caches) for the trainer, pages returned to the OS before it loads."""
    if _POOL.keep_only(configs):
        from dr_core.resources import return_freed_memory

        return_freed_memory()


def close_engines() -> None:
    """Close the process's engines (adopted ones are left to their owner)."""
    _POOL.close()
