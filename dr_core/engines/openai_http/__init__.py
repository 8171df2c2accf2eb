"""OpenAI-compatible HTTP engine: runs a role on a remote vLLM server (``/v1/chat/completions``).

Structured outputs use vLLM's request extension ``"structured_outputs": {"json": SCHEMA}`` or
``{"choice": [...]}`` (vllm/entrypoints/openai/chat_completion/protocol.py, 0.32); per-sample completion token
counts come from ``"return_token_ids": true``. Requests run ``concurrency`` at a time so the server can batch them
(and serve shared prefixes from its prefix cache). Seeds are not sent: a seeded request crashes a vLLM-CPU server
on chunked prefill (ENVIRONMENT.md). ``chat(logprobs=N)`` sends ``"logprobs": true, "top_logprobs": N``.

Start a server (CPU):
    python -m vllm.entrypoints.openai.api_server --model DIR --host 127.0.0.1 --port 8000 \\
        --dtype bfloat16 --enforce-eager --max-model-len 2048    # float32 on a CPU without bf16 instructions
and point a role at it: ``{kind: openai_http, base_url: http://127.0.0.1:8000/v1, model: default}``.
Two of them (ports 8000 and 8001) serve one role as ``base_url: [http://127.0.0.1:8000/v1,
http://127.0.0.1:8001/v1]``; ``python -c "from dr_core.config import EngineConfig; from dr_core.engines import
make_engine; e = make_engine(EngineConfig(kind='openai_http', model='default', base_url=['http://127.0.0.1:8000/v1',
'http://127.0.0.1:8001/v1'])); e.chat([[{'role': 'user', 'content': 'Hi'}]] * 8); print(e.endpoint_stats())"``.

The engine's parts, each documented where it lives:
    engine.py       the engine: a chat request per conversation, ``concurrency`` at a time per endpoint
    transport.py    the request budget (attempts, timeouts, back-off) and several endpoints (balancing,
                    failover, ``endpoint_stats``)
    replies.py      reading replies: a chat completion, a model listing, errors
    credentials.py  api_key, api_key_env, basic auth; secrets kept out of messages
With model 'default' the engine asks every endpoint it can reach for its model (``GET /models``), and all must serve
the same one.
"""

from __future__ import annotations

from dr_core.engines.openai_http.engine import OpenAIHTTPEngine
from dr_core.engines.openai_http.transport import COUNTERS

__all__ = ["COUNTERS", "OpenAIHTTPEngine"]
