"""The one engine pool: an engine per distinct ``EngineConfig``, built on first use (a bundled model is prepared
first), shared by every role or step that names an equal config, and closed together at the end (or one at a time
once no later phase needs it). Used by ``dr score`` / ``dr eval-evaluator`` (``dr_core.evals.evaluate``),
``dr eval-policy`` (``dr_core.evals.policy_eval``) and the Prefect tasks' per-process pool (``tasks.runtime``).

``startup_s`` adds up the seconds spent preparing models and starting engines.

    python -c "from dr_core.engines.pool import EnginePool; from dr_core.config import EngineConfig; \\
               p = EnginePool(print); print(p.get(EngineConfig()).model_name); p.close()"
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from dr_core.config import EngineConfig
from dr_core.engines.base import Engine

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def _prepare_bundled(cfg: EngineConfig, log: Log) -> None:
    """Convert the bundled model ``cfg`` names, if it is one and not prepared yet (imported late: dr_core.model)."""
    from dr_core.model import is_bundled, prepare

    if cfg.kind == "vllm" and is_bundled(cfg.model):
        prepare(cfg.model, log)


class EnginePool:
    """Engines keyed by config. ``max_local``: a callable giving the most in-process (vLLM) engines kept loaded
    (asking for another closes the least recently used first); None: no limit. Engines handed in with ``adopt``
    belong to the caller: the pool uses them but never closes them."""

    def __init__(self, log: Log = _quiet, max_local: Callable[[], int] | None = None):
        self.log, self.max_local = log, max_local
        self.startup_s = 0.0
        self._open: dict[EngineConfig, Engine] = {}  # least recently used first
        self._external: set[EngineConfig] = set()
        self._lock = threading.RLock()

    def get(self, cfg: EngineConfig, role: str | None = None) -> Engine:
        """The engine for ``cfg``, started now if none is open (``role``: named in the log line only)."""
        with self._lock:
            if cfg in self._open:
                self._open[cfg] = self._open.pop(cfg)  # most recently used last
                return self._open[cfg]
            t = time.perf_counter()
            if cfg.kind == "vllm" and self.max_local is not None:
                local = [c for c in self._open if c.kind == "vllm"]
                while len(local) >= self.max_local():
                    self._drop(local.pop(0))
            _prepare_bundled(cfg, self.log)
            from dr_core import engines  # late: make_engine is the plug-in point tests replace

            self.log(f"starting {cfg.kind} engine{f' for {role}' if role else ''} (model {cfg.model})")
            self._open[cfg] = engines.make_engine(cfg)
            self.startup_s += time.perf_counter() - t
            return self._open[cfg]

    def open_roles(self, config, roles: Sequence[str]) -> dict[str, Engine]:
        """{role: engine} for the ``roles`` of an ``EnginesConfig`` (roles with equal configs share one engine);
        every bundled model they name is prepared before any engine starts."""
        t = time.perf_counter()
        for cfg in dict.fromkeys(getattr(config, r) for r in roles):
            _prepare_bundled(cfg, self.log)
        self.startup_s += time.perf_counter() - t
        return {role: self.get(getattr(config, role), role) for role in roles}

    def adopt(self, cfg: EngineConfig, engine: Engine) -> None:
        """Use ``engine`` (built, and closed, by the caller) for ``cfg``."""
        with self._lock:
            self._open[cfg] = engine
            self._external.add(cfg)

    def release(self, cfg: EngineConfig | None, still_needed: Sequence[EngineConfig | None] = ()) -> None:
        """Close the engine for ``cfg`` unless a config in ``still_needed`` is the same."""
        with self._lock:
            if cfg in self._open and cfg not in still_needed:
                self._drop(cfg)

    def keep_only(self, configs: Sequence[EngineConfig | None]) -> list[EngineConfig]:
        """Close every engine the pool started except those for ``configs`` (a step frees the models it does not
        use; adopted engines stay, their owner decides); returns the configs closed."""
        with self._lock:
            closed = [cfg for cfg in self._open if cfg not in configs and cfg not in self._external]
            for cfg in closed:
                self._drop(cfg)
            return closed

    def keep(self, *configs: EngineConfig | None) -> None:
        """``keep_only(configs)``, then the freed models' pages (weights, KV caches) returned to the OS: a training
        step keeps the engines its rewards use and frees the rest for the trainer before it loads."""
        if self.keep_only(configs):
            from dr_core.resources import return_freed_memory

            return_freed_memory()

    def close(self) -> None:
        """Close every engine the pool started (adopted ones are only forgotten)."""
        with self._lock:
            while self._open:
                self._drop(next(reversed(self._open)))
            self._external.clear()

    def _drop(self, cfg: EngineConfig) -> None:
        engine = self._open.pop(cfg)
        if cfg not in self._external:
            engine.close()
