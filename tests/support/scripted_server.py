"""A scripted OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1, no model, deterministic answers.

It implements what ``dr_core.engines.openai_http.OpenAIHTTPEngine`` sends (vLLM's dialect):

- ``GET /v1/models``: one served model.
- ``POST /v1/chat/completions`` with ``n``, ``max_tokens``, ``structured_outputs`` ``{"json": schema}`` (a rubric
  that satisfies the generator's schema) or ``{"choice": [...]}`` (one of the choices: "yes"/"no" for a verifier
  check, "A"/"B" for a judge), ``logprobs``/``top_logprobs`` (first-token log-probabilities that agree with the
  answer), ``return_token_ids`` (one id per word) and ``usage``. Anything else gets short plain text (a policy
  sample; the ``n`` samples of one request differ).

Every answer is a function of the request's messages only (SHA-256), so two runs with the same inputs store the
same rows, whichever server instance answers. Verdicts differ between checks, so scores are not constant.

Fault modes, set per instance while it runs (they count chat requests, retries included):
``fail_next(n, status=500)`` answers the next n requests with that status; ``hang_next(n, seconds)`` holds the
next n requests that long before answering (a client with a shorter timeout gives up first).
``auth`` (a set of whole ``Authorization`` header values, e.g. ``{"Bearer sk-..."}`` or ``{"Basic dXNlcjpwdw=="}``)
makes it answer 401 to a request without one of them; every header it saw is kept in ``auth_headers``.

    with ScriptedServer() as srv:      # srv.base_url = "http://127.0.0.1:PORT/v1"
        ...
    python -m tests.support.scripted_server    # serve in the foreground (prints the base URL)
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "scripted-model"

_ASPECTS = (
    "answers the question directly",
    "names a concrete example",
    "is free of irrelevant text",
    "uses correct facts",
    "stays under five sentences",
    "explains its reasoning",
    "is polite",
    "avoids repeating itself",
    "gives a final answer",
    "mentions a caveat",
    "uses plain words",
)
_WORDS = ("apple", "river", "lamp", "cloud", "stone", "garden", "bridge", "candle", "forest", "window")


def digest(obj) -> int:
    """A stable integer from any JSON-able value."""
    return int.from_bytes(hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).digest()[:8], "big")


def rubric_reply(h: int) -> str:
    """A rubric of 2-4 distinct criteria with weights 1..5 (GENERATOR_JSON_SCHEMA, MIN_ITEMS..MAX_GEN_ITEMS)."""
    m = 2 + h % 3
    start = (h >> 8) % len(_ASPECTS)
    items = [
        {"criterion": f"The response {_ASPECTS[(start + i) % len(_ASPECTS)]}.", "weight": 1 + (h >> (16 + 3 * i)) % 5}
        for i in range(m)
    ]
    return json.dumps({"rubrics": items})


def rubric_lines_reply(h: int) -> str:
    """The continuation of the 'lines' primer ("[3] The response"): the same criteria as ``rubric_reply``, one
    "[w] criterion" a line, the first one's start being the primer."""
    items = json.loads(rubric_reply(h))["rubrics"]
    first = items[0]["criterion"].removeprefix("The response")
    return first + "\n" + "\n".join(f"[{it['weight']}] {it['criterion']}" for it in items[1:]) + "\n"


def policy_reply(h: int, i: int) -> str:
    """A short answer; sample i of one request differs from the others."""
    words = [_WORDS[(h >> (4 * k + i)) % len(_WORDS)] for k in range(3 + (h + i) % 4)]
    return f"Answer {i}: " + " ".join(words) + "."


class ScriptedServer:
    """The server, in a daemon thread of this process. ``start()``/``stop()`` or use as a context manager."""

    def __init__(self, model: str = MODEL, auth: set[str] | None = None):
        self.model, self.auth = model, auth
        self.counts: Counter = Counter()  # "requests", "failed", "hung", "unauthorized", "models"
        self.auth_headers: set[str] = set()
        self._lock = threading.Lock()
        self._fail, self._fail_status = 0, 500
        self._hang, self._hang_s = 0, 0.0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ----------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def fail_next(self, n: int, status: int = 500) -> None:
        with self._lock:
            self._fail, self._fail_status = n, status

    def hang_next(self, n: int, seconds: float) -> None:
        with self._lock:
            self._hang, self._hang_s = n, seconds

    def reset(self) -> None:
        with self._lock:
            self._fail = self._hang = 0
            self.counts.clear()
            self.auth_headers.clear()

    def start(self) -> "ScriptedServer":
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"scripted-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hung requests
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=10)

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- answers ----------------------------------------------------------------------------------------------
    def _fault(self) -> tuple[int | None, float]:
        """(status to fail with or None, seconds to hang) for the next chat request."""
        with self._lock:
            self.counts["requests"] += 1
            if self._fail > 0:
                self._fail -= 1
                self.counts["failed"] += 1
                return self._fail_status, 0.0
            if self._hang > 0:
                self._hang -= 1
                self.counts["hung"] += 1
                return None, self._hang_s
        return None, 0.0

    def completion(self, body: dict) -> dict:
        messages = body.get("messages") or []
        h = digest(messages)
        n = int(body.get("n") or 1)
        so = body.get("structured_outputs") or {}
        if "json" in so:
            texts = [rubric_reply(digest([messages, i])) for i in range(n)]
        elif body.get("continue_final_message"):  # a primed rubric: the 'lines' format (rubric_lines_reply)
            texts = [rubric_lines_reply(digest([messages, i])) for i in range(n)]
        elif "choice" in so:
            options = list(so["choice"])
            texts = [options[digest([messages, i]) % len(options)] for i in range(n)]
        else:
            texts = [policy_reply(h, i) for i in range(n)]
        if body.get("max_tokens") == 1 and "choice" not in so and "json" not in so:  # a log-odds verdict
            texts = ["yes" if digest([messages, i]) % 2 else "no" for i in range(n)]
        choices = []
        for i, text in enumerate(texts):
            choice = {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            if body.get("return_token_ids"):
                choice["token_ids"] = list(range(max(1, len(text.split()))))
            if body.get("logprobs"):
                first = text.split()[0] if text.split() else text
                other = "no" if first == "yes" else "yes"
                top = [{"token": first, "logprob": -0.2}, {"token": other, "logprob": -1.8}]
                choice["logprobs"] = {
                    "content": [
                        {"token": first, "logprob": -0.2, "top_logprobs": top[: int(body.get("top_logprobs") or 2)]}
                    ]
                }
            choices.append(choice)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        completion_tokens = sum(len(c["token_ids"]) if "token_ids" in c else 1 for c in choices)
        return {
            "id": f"chatcmpl-{h:x}",
            "object": "chat.completion",
            "model": body.get("model", self.model),
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: ScriptedServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a hung request past its timeout)
            self.close_connection = True

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization")
        srv = self.owner
        with srv._lock:
            if auth:
                srv.auth_headers.add(auth)
            if srv.auth is not None and auth not in srv.auth:
                srv.counts["unauthorized"] += 1
                return False
        return True

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if not self._authorized():
            return self._send(401, {"error": {"message": "invalid api key"}})
        self.owner.counts["models"] += 1
        self._send(200, {"object": "list", "data": [{"id": self.owner.model, "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if not self._authorized():
            return self._send(401, {"error": {"message": "invalid api key"}})
        status, hang = self.owner._fault()
        if hang:
            self.owner._stopping.wait(hang)
        if status is not None:
            return self._send(status, {"error": {"message": f"scripted failure ({status})"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON"}})
        self._send(200, self.owner.completion(body))


if __name__ == "__main__":
    import time

    with ScriptedServer() as srv:
        print(srv.base_url, flush=True)
        while True:
            time.sleep(3600)
