"""Inference engines behind one interface (``Engine.chat``). ``make_engine`` is the one plug-in point.

    python -c "from dr_core.engines import make_engine; from dr_core.config import EngineConfig; \\
               print(make_engine(EngineConfig()).model_name)"
"""

from __future__ import annotations

import importlib

from dr_core.config import EngineConfig
from dr_core.engines.base import FINISH_LENGTH, PROMPT_TOO_LONG, Completion, Conversation, Engine, EngineError

__all__ = ["Completion", "Conversation", "Engine", "EngineError", "FINISH_LENGTH", "PROMPT_TOO_LONG", "make_engine"]

#: engine kind -> "module:class", imported only when that kind is asked for (vllm takes seconds to import)
_IMPLEMENTATIONS = {
    "vllm": "dr_core.engines.vllm_engine:VLLMEngine",
    "openai_http": "dr_core.engines.openai_http:OpenAIHTTPEngine",
}


def make_engine(config: EngineConfig) -> Engine:
    """Build the engine named by ``config.kind``."""
    module, cls = _IMPLEMENTATIONS[config.kind].split(":")
    return getattr(importlib.import_module(module), cls)(config)
