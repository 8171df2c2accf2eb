"""Several in-process vLLM engines in one process (generator, verifier and policy of a round): closing one must not
break the others (vLLM's engine shutdown tears down process-wide distributed state)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]


def _ask(engine):
    (c,) = engine.chat(
        [[{"role": "user", "content": "Is water wet? Answer yes or no."}]], max_tokens=2, choices=["yes", "no"]
    )
    return c.texts[0]


def test_closing_one_engine_leaves_the_others_working(vllm_engine, default_model_dir):
    from dr_core.config import EngineConfig
    from dr_core.engines import make_engine

    second = make_engine(EngineConfig(model=str(default_model_dir), max_model_len=1024, kv_cache_gib=1))
    assert _ask(second) in ("yes", "no")
    assert _ask(vllm_engine) in ("yes", "no")
    second.close()
    second.close()  # idempotent
    assert _ask(vllm_engine) in ("yes", "no")
