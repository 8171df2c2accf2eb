"""The integration half of tests/unit/test_verify_order.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import sys
import types

import pytest

from dr_core.config import EngineConfig
from tests.unit.test_verify_order import _FakeLLM


@pytest.mark.parametrize(
    "cpu, block, expected", [(True, None, 32), (True, 128, 128), (False, None, None), (False, 64, 64)]
)
def test_the_engine_passes_the_block_size_to_vllm(monkeypatch, tmp_path, cpu, block, expected):
    from dr_core.engines import vllm_engine

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=_FakeLLM))
    monkeypatch.setattr(vllm_engine, "_cpu_build", lambda: cpu)
    for var in (
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_LOGGING_LEVEL",
        "TOKENIZERS_PARALLELISM",
    ):
        monkeypatch.setenv(var, "0")
    _FakeLLM.seen.clear()
    (tmp_path / "config.json").write_text("{}")  # a checkpoint directory, as far as the config can tell
    engine = vllm_engine.VLLMEngine(EngineConfig(model=str(tmp_path), block_size=block))
    engine.close()  # leaves no open engine behind (vllm_engine._OPEN)
    assert _FakeLLM.seen[-1]["block_size"] == expected
