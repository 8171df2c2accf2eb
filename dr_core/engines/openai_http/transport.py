"""Transport of an OpenAI-compatible engine (``OpenAIHTTPEngine``): its endpoints, their HTTP clients, and the
retry budget and failover of every request.

Request budget. Every request (``GET /models`` once when the engine starts and ``model`` is 'default', one
``POST /chat/completions`` per conversation) gets ``EngineConfig.attempts`` tries (default 3). Each try may wait
``connect_timeout_s`` (10 s) for a connection and ``timeout_s`` (600 s) for each piece of the reply (httpx's read
timeout: it bounds each wait for bytes, not a whole reply). A try that fails in transport (connection refused or
reset, a connect or read timeout) or gets HTTP 429 or 5xx is retried after ``retry_backoff_s * 2**k`` seconds
(1 s, then 2 s); a 400 that says the prompt is too long gives a ``prompt_too_long`` completion; any other HTTP
status, and a 200 reply that is not an OpenAI chat completion, raises ``EngineError`` at once
(dr_core/engines/openai_http/replies.py). After the last try: one line,
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
"""

from __future__ import annotations

import logging
import threading
import time

import httpx

from dr_core.config import EngineConfig
from dr_core.engines.base import EngineError
from dr_core.engines.openai_http.replies import excerpt
from dr_core.errors import DRError

#: The pause between attempts (a name of its own so tests can record it without patching time.sleep).
_sleep = time.sleep
#: The clock of the endpoints' cool-downs (likewise: tests move it on instead of waiting).
_clock = time.monotonic
#: The engine's logger: the warnings of endpoints going down and coming back are the engine's.
log = logging.getLogger("dr_core.engines.openai_http")


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: Transport errors that mean "this endpoint is gone": refused, reset, closed before it replied, no connection within
#: connect_timeout_s. With another endpoint live it is marked down and the request moves there at once. A read
#: timeout is not one (a busy server is slow, not gone): it spends an attempt, like a 429 or 5xx.
_UNREACHABLE = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
#: The counters ``endpoint_stats`` gives per endpoint (and ``down``, its state now).
COUNTERS = ("requests", "answered", "failures", "marked_down", "moved")


class EndpointDown(DRError):
    """A pinned request (the model listing of one endpoint) found its endpoint gone; it was marked down."""


class Endpoint:
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


class Clients:
    """The HTTP clients of one ``chat`` call (or of the model listing): one per (thread, endpoint), closed together.

    No client is shared between threads: httpcore 1.0.9's connection pool can close a keep-alive connection that
    another thread has just started a request on (encode/httpcore#1110; measured here against a fast local server:
    a request in 4 to 25 failed with ``ReadError: [Errno 9] Bad file descriptor`` or hung until its read timeout), and
    such a ReadError would mark a healthy endpoint down. A thread's own client still keeps its connection alive
    between its requests."""

    def __init__(self, make):
        self._make, self._lock = make, threading.Lock()
        self._clients: dict[tuple[int, int], httpx.Client] = {}

    def get(self, ep: Endpoint) -> httpx.Client:
        key = (threading.get_ident(), ep.index)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._make(ep)
            return self._clients[key]

    def __enter__(self) -> "Clients":
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


class EndpointTransport:
    """The transport of ``OpenAIHTTPEngine`` (mixed into it): which endpoint takes a request, the retry budget,
    endpoints marked down and back up, and messages with no secret in them. The engine sets ``config``,
    ``_endpoints``, ``_lock`` (guards the endpoints' state), ``_cursor`` (the round robin's next start),
    ``_client_args`` (what each HTTP client is built with) and ``_secrets`` (what ``_scrub`` removes)."""

    config: EngineConfig
    _endpoints: list[Endpoint]
    _lock: threading.Condition
    _cursor: int
    _client_args: dict
    _secrets: tuple[str, ...]

    def _client(self, ep: Endpoint) -> httpx.Client:
        return httpx.Client(base_url=ep.address, **self._client_args)

    def _scrub(self, message: str) -> str:
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _error(self, message: str) -> EngineError:
        """An EngineError whose message holds none of this engine's secrets."""
        return EngineError(self._scrub(message))

    def _budget(self) -> str:
        return f"(timeout {self.config.timeout_s:g}s, connect {self.config.connect_timeout_s:g}s)"

    # -- endpoints ----------------------------------------------------------------------------------------------
    def endpoint_stats(self) -> dict[str, dict]:
        """Per endpoint, by URL (redacted): ``requests`` (tries sent to it), ``answered`` (replies handed back: any
        status but 429/5xx), ``failures`` (tries that failed in transport or got 429/5xx), ``marked_down`` (times it
        went from up to down), ``moved`` (requests that went on to another endpoint after failing on this one) and
        ``down`` (its state now). Counters only grow: the cost of one call is the difference of two readings."""
        with self._lock:
            return {ep.url: {**ep.counts, "down": ep.down_at is not None} for ep in self._endpoints}

    def _states(self) -> str:
        return ", ".join(ep.state() for ep in self._endpoints)

    def _eligible(self, ep: Endpoint, now: float) -> bool:
        """Up, or down for a whole cool-down and not being probed by another request (call with the lock)."""
        return ep.down_at is None or (not ep.probing and now - ep.down_at >= self.config.endpoint_cooldown_s)

    def _take(self, avoid: Endpoint | None = None, pin: Endpoint | None = None) -> Endpoint | None:
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

    def _count(self, ep: Endpoint, counter: str) -> None:
        with self._lock:
            ep.counts[counter] += 1

    def _reached(self, ep: Endpoint) -> None:
        """The endpoint answered (with any status): a down one is back."""
        with self._lock:
            if ep.down_at is None:
                return
            ep.down_at, ep.probing, ep.cause = None, False, ""
        log.warning("%s is back up: it takes requests again", ep.url)

    def _unreachable(self, ep: Endpoint, cause: str, force: bool = False) -> bool:
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

    def _send(self, clients: Clients, ep: Endpoint, method: str, path: str, body: dict | None) -> httpx.Response:
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
        self, clients: Clients, method: str, path: str, body: dict | None = None, pin: Endpoint | None = None
    ) -> tuple[Endpoint, httpx.Response]:
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
                    raise EndpointDown()
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
                        raise EndpointDown() from None
                    free_moves -= 1
                    avoid = ep
                    continue  # moved at once: no attempt spent
            else:
                self._reached(ep)
                if resp.status_code != 429 and resp.status_code < 500:
                    self._count(ep, "answered")
                    return ep, resp
                cause, gone = f"HTTP {resp.status_code}: {excerpt(resp.text)}", False
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
