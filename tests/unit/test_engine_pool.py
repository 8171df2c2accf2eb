"""The engine pool frees what a step does not use (``EnginePool.keep_only``) and never closes adopted engines."""

from __future__ import annotations

from dr_core.config import EngineConfig
from dr_core.engines.pool import EnginePool
from tests.support.fakes import FakeEngine


class Closing(FakeEngine):
    def __init__(self):
        super().__init__("yes")
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_keep_only_closes_the_rest_but_not_adopted_engines(monkeypatch):
    import dr_core.engines as engines

    made: dict[str, Closing] = {}

    def make(cfg):
        made[cfg.model] = Closing()
        return made[cfg.model]

    monkeypatch.setattr(engines, "make_engine", make)
    pool = EnginePool()
    a, b, c = (EngineConfig(kind="openai_http", model=m, base_url="http://127.0.0.1:9/v1") for m in "abc")
    pool.get(a), pool.get(b)
    adopted = Closing()
    pool.adopt(c, adopted)
    assert pool.keep_only([b]) == [a]
    assert made["a"].closed and not made["b"].closed and not adopted.closed
    assert pool.get(b) is made["b"] and pool.get(c) is adopted  # kept, and the adopted one is still served
    pool.close()
    assert made["b"].closed and not adopted.closed
