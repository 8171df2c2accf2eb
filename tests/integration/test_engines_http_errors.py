"""The HTTP engine against a real local server (http.server on 127.0.0.1) that answers badly: malformed replies raise
EngineError naming the URL, what was wrong and the body's start (never KeyError/JSONDecodeError/TypeError);
429/5xx and transport errors (refused, a read timeout) are retried within the budget (attempts, backoff), then fail
in one line "<url>/chat/completions: <cause> after N attempts (timeout Xs, connect Ys)".

``Replay`` (the server) is shared with tests/unit/test_secrets.py.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dr_core.config import EngineConfig
from dr_core.engines import EngineError, make_engine
from dr_core.engines.openai_http import transport as openai_http_transport
from tests.support.netutil import free_port

CONV = [[{"role": "user", "content": "Hi"}]]


def chat_reply(n: int = 1, text: str = "hello") -> dict:
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"{text} {i}"},
                "finish_reason": "stop",
                "token_ids": [1, 2, 3],
            }
            for i in range(n)
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3 * n},
    }


OK = (200, chat_reply())


class Replay:
    """A real HTTP server in a thread: each request gets the next scripted answer ``(status, body[, delay_s])``
    (body: bytes, str, JSON-able, or a function of the request headers giving one), then ``default`` once the
    script is used up. ``requests`` records
    (method, path, headers) of every request received."""

    def __init__(self, script=(), default=OK):
        self.script, self.default = list(script), default
        self.requests: list[tuple[str, str, dict]] = []
        self.lock = threading.Lock()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with replay.lock:
                    replay.requests.append((self.command, self.path, dict(self.headers)))
                    status, body, *delay = replay.script.pop(0) if replay.script else replay.default
                if delay:
                    time.sleep(delay[0])
                if callable(body):  # a reply made from the request's headers (a server that echoes them)
                    body = body(dict(self.headers))
                raw = (
                    body
                    if isinstance(body, bytes)
                    else body.encode()
                    if isinstance(body, str)
                    else json.dumps(body).encode()
                )
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up (a timeout test)
                    pass

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "Replay":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def engine(url: str, **fields):
    cfg = (
        dict(
            kind="openai_http",
            base_url=url,
            model="served",
            attempts=3,
            retry_backoff_s=0.01,
            timeout_s=5,
            connect_timeout_s=2,
        )
        | fields
    )
    return make_engine(EngineConfig(**cfg))


# -- malformed replies ----------------------------------------------------------------------------------------------
MALFORMED = [
    (b"<html>502 gateway says hi</html>", "reply is not JSON", "<html>502 gateway says hi"),
    (b"", "reply is not JSON", "(empty body)"),
    ([1, 2, 3], "reply is a JSON list, not an object", "[1, 2, 3]"),
    ('"just a string"', "reply is a JSON str", "just a string"),
    ({"object": "error", "message": "boom"}, "no 'choices' list", '"message": "boom"'),
    ({"choices": []}, "empty 'choices'", '{"choices": []}'),
    ({"choices": "nope"}, "no 'choices' list", "nope"),
    ({"choices": ["text"]}, "choices[0] is not an object", "text"),
    ({"choices": [{"message": {"content": "a"}}]}, "choices[0] has no integer 'index'", '"content": "a"'),
    ({"choices": [{"index": "0", "message": {"content": "a"}}]}, "no integer 'index'", '"index": "0"'),
    ({"choices": [{"index": 0}]}, "choices[0] has no 'message' object", '"index": 0'),
    ({"choices": [{"index": 0, "message": "hi"}]}, "choices[0] has no 'message' object", '"message": "hi"'),
    ({"choices": [{"index": 0, "message": {"content": ["a"]}}]}, "content is not a string", '"content"'),
    (
        {"choices": [{"index": 3, "message": {"content": "a"}}]},
        "asked for n=1 samples, got choices with index [3]",
        '"index": 3',
    ),
    (
        {"choices": [{"index": 0, "message": {"content": "a"}}], "usage": {"prompt_tokens": "many"}},
        "ValueError",
        '"prompt_tokens": "many"',
    ),
    ({"choices": [{"index": 0, "message": {"content": "a"}}], "usage": ["x"]}, "AttributeError", '"usage"'),
]


@pytest.mark.parametrize("body, what, quoted", MALFORMED, ids=[m[1][:30] for m in MALFORMED])
def test_malformed_chat_reply_is_an_engine_error_with_url_cause_and_body(body, what, quoted):
    with Replay(default=(200, body)) as srv, engine(srv.url) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat(CONV)
    msg = str(err.value)
    assert msg.startswith(f"{srv.url}/chat/completions: malformed reply: ") or msg.startswith(
        f"{srv.url}/chat/completions: reply is "
    )
    assert what in msg and quoted in msg and "\n" not in msg
    assert len(srv.requests) == 1  # a malformed 200 is not retried by the engine (Prefect's step retry may)


def test_malformed_logprobs_are_an_engine_error():
    body = {"choices": [{"index": 0, "message": {"content": "a"}, "logprobs": {"content": [{"top_logprobs": 5}]}}]}
    with Replay(default=(200, body)) as srv, engine(srv.url) as eng:
        with pytest.raises(EngineError, match=r"/chat/completions: malformed reply: (KeyError|TypeError)"):
            eng.chat(CONV, logprobs=2)


def test_body_is_quoted_up_to_200_characters_on_one_line():
    body = "line one\nline two " + "x" * 1000
    with Replay(default=(200, body)) as srv, engine(srv.url) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat(CONV)
    msg = str(err.value)
    assert "\n" not in msg and "line one\\nline two" in msg and msg.endswith("...")
    assert msg.count("x") < 200


@pytest.mark.parametrize(
    "body, status, what",
    [
        (b"not json at all", 200, "reply is not JSON"),
        ([{"id": "m"}], 200, "JSON list, not an object"),
        ({"data": "m"}, 200, "cannot list served models"),
        ({"data": [{"name": "m"}]}, 200, "cannot list served models"),
        ({"models": ["m"]}, 200, "cannot list served models"),
        ({"error": "no such route"}, 404, "HTTP 404"),
        ({"data": [{"id": "a"}, {"id": "b"}]}, 200, "serves ['a', 'b']: set the engine's model"),
    ],
)
def test_models_listing_garbage_is_an_engine_error(body, status, what):
    with Replay(default=(status, body)) as srv:
        with pytest.raises(EngineError) as err:
            engine(srv.url, model="default")
    assert srv.url in str(err.value) and what in str(err.value)
    assert srv.requests[0][:2] == ("GET", "/v1/models")


def test_models_listing_is_read():
    with Replay(default=(200, {"object": "list", "data": [{"id": "only-model", "object": "model"}]})) as srv:
        with engine(srv.url, model="default") as eng:
            assert eng.model_name == "only-model"


# -- retries and timeouts ---------------------------------------------------------------------------------------------
def test_500_twice_then_200_recovers():
    with (
        Replay([(500, "overloaded"), (502, "bad gateway")], default=(200, chat_reply(n=2))) as srv,
        engine(srv.url) as eng,
    ):
        (c,) = eng.chat(CONV, n=2)
    assert c.texts == ("hello 0", "hello 1") and c.prompt_tokens == 5 and c.completion_tokens == (3, 3)
    assert len(srv.requests) == 3


def test_429_is_retried():
    with Replay([(429, "slow down")]) as srv, engine(srv.url) as eng:
        assert eng.chat(CONV)[0].texts == ("hello 0",)
    assert len(srv.requests) == 2


def test_5xx_every_time_fails_in_one_line_after_the_budget():
    with Replay(default=(503, "x" * 500)) as srv, engine(srv.url, timeout_s=7) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat(CONV)
    msg = str(err.value)
    assert msg.startswith(f"{srv.url}/chat/completions: HTTP 503: xxx")
    assert msg.endswith("after 3 attempts (timeout 7s, connect 2s)") and "\n" not in msg
    assert len(srv.requests) == 3


def test_one_attempt_means_no_retry():
    with Replay(default=(500, "down")) as srv, engine(srv.url, attempts=1) as eng:
        with pytest.raises(EngineError, match=r"HTTP 500: down after 1 attempt \("):
            eng.chat(CONV)
    assert len(srv.requests) == 1


def test_client_errors_are_not_retried():
    with Replay(default=(401, {"error": "bad key"})) as srv, engine(srv.url) as eng:
        with pytest.raises(EngineError, match=r"/chat/completions: HTTP 401: .*bad key.*\(not retried\)"):
            eng.chat(CONV)
    assert len(srv.requests) == 1


def test_prompt_too_long_is_a_completion_not_an_error():
    with (
        Replay(default=(400, {"message": "This model's maximum context length is 2048 tokens"})) as srv,
        engine(srv.url) as eng,
    ):
        (c,) = eng.chat(CONV, n=2)
    assert c.finish_reasons == ("prompt_too_long",) * 2 and c.texts == ("", "")


def test_backoff_is_1s_then_2s_by_default(monkeypatch):
    slept = []
    monkeypatch.setattr(openai_http_transport, "_sleep", slept.append)
    with Replay(default=(500, "down")) as srv, engine(srv.url, retry_backoff_s=1.0) as eng:
        with pytest.raises(EngineError, match="after 3 attempts"):
            eng.chat(CONV)
    assert slept == [1.0, 2.0]
    assert (EngineConfig().attempts, EngineConfig().retry_backoff_s) == (3, 1.0)
    assert (EngineConfig().timeout_s, EngineConfig().connect_timeout_s) == (600.0, 10.0)


def test_a_hung_reply_is_cut_off_and_retried():
    with Replay([(200, chat_reply(), 1.5)]) as srv, engine(srv.url, timeout_s=0.3) as eng:
        start = time.perf_counter()
        (c,) = eng.chat(CONV)
        took = time.perf_counter() - start
    assert c.texts == ("hello 0",) and len(srv.requests) == 2
    assert took < 1.2  # cut off at ~0.3 s, not after the server's 1.5 s


def test_a_server_that_always_hangs_fails_after_the_budget():
    with Replay(default=(200, chat_reply(), 1.5)) as srv, engine(srv.url, timeout_s=0.3, attempts=2) as eng:
        start = time.perf_counter()
        with pytest.raises(EngineError) as err:
            eng.chat(CONV)
        took = time.perf_counter() - start
    msg = str(err.value)
    assert msg.startswith(f"{srv.url}/chat/completions: ReadTimeout")
    assert msg.endswith("after 2 attempts (timeout 0.3s, connect 2s)") and "\n" not in msg
    assert len(srv.requests) == 2 and took < 1.5


def test_connection_refused_fails_after_the_budget():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with engine(url) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat(CONV)
    msg = str(err.value)
    assert msg.startswith(f"{url}/chat/completions: ConnectError") and msg.endswith(
        "after 3 attempts (timeout 5s, connect 2s)"
    )
