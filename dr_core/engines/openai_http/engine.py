"""The OpenAI-compatible HTTP engine itself (the package docstring says how it talks to vLLM's server)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from dr_core.config import DEFAULT_MODEL, EngineConfig, redact_url
from dr_core.engines.base import PROMPT_TOO_LONG, Completion, Conversation, Engine, SamplingParams
from dr_core.engines.openai_http.credentials import credentials
from dr_core.engines.openai_http.replies import completion, model_names, reply_object, says_prompt_too_long
from dr_core.engines.openai_http.transport import Clients, Endpoint, EndpointDown, EndpointTransport

__all__ = ["OpenAIHTTPEngine"]


class OpenAIHTTPEngine(EndpointTransport, Engine):
    supports_logprobs = True
    thread_safe = True  # one HTTP client per thread, endpoint state under a lock; the server batches continuously

    def __init__(self, config: EngineConfig):
        self.config = config
        # for messages and logs: the config already keeps credentials out of base_url; redact_url in case
        urls = [redact_url(u.rstrip("/")) for u in config.base_urls]
        self.base_url = ", ".join(urls)
        headers, auth, secrets = credentials(config, self.base_url)
        # only secrets long enough not to mangle a message when scrubbed (a shorter one protects nothing anyway)
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True))
        self._client_args = dict(
            headers=headers, auth=auth, timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        )
        self._endpoints = [
            Endpoint(i, url, raw.rstrip("/")) for i, (url, raw) in enumerate(zip(urls, config.base_urls))
        ]
        self._lock = threading.Condition()  # guards the endpoints' state; notified when a request leaves one
        self._cursor = 0  # where the round robin among equally loaded endpoints starts next
        self.model_name = self._served_model() if config.model == DEFAULT_MODEL else config.model

    def __repr__(self) -> str:
        return f"OpenAIHTTPEngine({self.base_url!r}, model={self.config.model!r})"

    def _served_model(self) -> str:
        """The one model every endpoint that answers serves (model 'default'). An endpoint that cannot be reached
        is marked down and left out; endpoints serving different models are an error."""
        served = {}
        with Clients(self._client) as clients:
            if len(self._endpoints) == 1:
                ep, resp = self._request(clients, "GET", "/models")
                served[self.base_url] = model_names(resp, ep.url, self._error)
            else:
                for ep in self._endpoints:
                    try:
                        _, resp = self._request(clients, "GET", "/models", pin=ep)
                    except EndpointDown:
                        continue
                    served[ep.url] = model_names(resp, ep.url, self._error)
        if not served:
            raise self._error(self._all_down("/models"))
        distinct = {tuple(m) for m in served.values()}
        if len(distinct) > 1:
            raise self._error(
                "the endpoints of base_url serve different models: "
                + ", ".join(f"{url} serves {m}" for url, m in served.items())
                + ": every endpoint must serve the same one model"
            )
        (models,) = distinct
        if len(models) != 1:
            raise self._error(
                f"{', '.join(served)} serve{'s' * (len(served) == 1)} {list(models)}: set the engine's "
                "model to one of them"
            )
        return models[0]

    def _post(self, clients: Clients, body: dict) -> tuple[dict, str, str] | None:
        """One chat request: (reply object, body text, its URL); None when the server says the prompt does not fit."""
        ep, resp = self._request(clients, "POST", "/chat/completions", body)
        if says_prompt_too_long(resp):
            return None
        url = f"{ep.url}/chat/completions"
        return reply_object(resp, url, self._error), resp.text, url

    def generate(self, conversations: list[Conversation], params: SamplingParams) -> list[Completion]:
        n, logprobs = params.n, params.logprobs
        base = {
            "model": self.model_name,
            "n": n,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "return_token_ids": True,
        }
        if params.json_schema is not None:
            base["structured_outputs"] = {"json": params.json_schema}
        elif params.choices is not None:
            base["structured_outputs"] = {"choice": list(params.choices)}
        if logprobs is not None:
            base["logprobs"] = True
            base["top_logprobs"] = logprobs

        def one(conv: Conversation) -> Completion:
            body = {**base, "messages": conv}
            if conv and conv[-1].get("role") == "assistant":  # a primer: vLLM's server continues it (base.Engine)
                body |= {"continue_final_message": True, "add_generation_prompt": False}
            reply = self._post(clients, body)
            if reply is None:
                return Completion(("",) * n, (PROMPT_TOO_LONG,) * n, 0, (0,) * n, None)
            return completion(*reply, n, logprobs, self._error)

        with (
            Clients(self._client) as clients,
            ThreadPoolExecutor(max_workers=self.config.concurrency * len(self._endpoints)) as pool,
        ):
            return list(pool.map(one, conversations))

    def close(self) -> None:
        """Nothing stays open between calls: each call's clients are closed when it returns."""
