"""Several endpoints per role (``base_url`` as a list): the config's validation and round trip, the model identity,
and the HTTP engine's balancing and failover against real HTTP servers on 127.0.0.1 (tests/support/scripted_server.py):
requests go to the endpoint with the fewest outstanding; an endpoint that refuses or drops connections is marked down
at once (a warning line) and its requests move to the others without spending attempts; a 5xx spends one and the
retry goes elsewhere; a down endpoint is probed again after its cool-down (a clock the tests move, no waiting); the
error when every endpoint is down names each one and its cause; the counts reach the stages' costs.

    .venv/bin/python -m pytest -q tests/unit/test_engines_endpoints.py
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from dr_core.config import ConfigError, EngineConfig, engine_config, load_engines_config
from dr_core.engines import EngineError, make_engine
from dr_core.engines.openai_http import transport as openai_http_transport
from dr_core.evaluator.items import Check, StageStats
from dr_core.evaluator.verify import verify
from tasks.runtime import model_id
from tests.support.fakes import FakeEngine
from tests.support.netutil import free_port, free_ports
from tests.support.scripted_server import MODEL, ScriptedServer

PW = "pw-planted-Kd82Qw"


def conv(i: int) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"}]


def engine(urls, **fields):
    cfg = (
        dict(
            kind="openai_http",
            base_url=list(urls),
            model=MODEL,
            attempts=2,
            retry_backoff_s=0.01,
            timeout_s=5,
            connect_timeout_s=2,
            concurrency=2,
        )
        | fields
    )
    return make_engine(EngineConfig(**cfg))


class Front:
    """A real HTTP server that forwards every request to ``backend`` (a ScriptedServer's base URL) and logs it, or,
    while ``drop`` is set, closes each connection without a reply (what a killed server's clients see)."""

    def __init__(self, backend: str | None = None, drop: bool = False):
        self.backend, self.drop = backend, drop
        self.log: list[tuple[str, str]] = []  # (path, "dropped" | "forwarded")
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if front.drop:
                    front.log.append((self.path, "dropped"))
                    self.close_connection = True
                    return
                front.log.append((self.path, "forwarded"))
                resp = httpx.request(
                    self.command,
                    front.backend.removesuffix("/v1") + self.path,
                    content=raw,
                    headers={"Content-Type": "application/json"},
                )
                self.send_response(resp.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            do_GET = do_POST = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "Front":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Held(ScriptedServer):
    """A ScriptedServer that holds its first ``hold`` chat requests until ``release()`` (or its stop)."""

    def __init__(self, hold: int):
        super().__init__()
        self.hold, self.held = hold, 0
        self.gate = threading.Event()

    def _fault(self):
        with self._lock:
            mine = self.held < self.hold
            self.held += mine
        if mine:
            self.gate.wait(60)
        return super()._fault()

    def release(self) -> None:
        self.gate.set()

    def stop(self) -> None:
        self.release()
        super().stop()


@pytest.fixture
def clock(monkeypatch):
    """The engine's cool-down clock, moved on by hand: ``clock.now += 31``."""

    class Clock:
        now = 1000.0

        def __call__(self):
            return self.now

    c = Clock()
    monkeypatch.setattr(openai_http_transport, "_clock", c)
    return c


@pytest.fixture
def slept(monkeypatch):
    """The pauses between attempts, recorded instead of slept: an attempt spent shows here."""
    pauses: list[float] = []
    monkeypatch.setattr(openai_http_transport, "_sleep", pauses.append)
    return pauses


def expected(srv: ScriptedServer, i: int) -> str:
    return srv.completion({"messages": conv(i)})["choices"][0]["message"]["content"]


# -- config ---------------------------------------------------------------------------------------------------------
def test_a_list_of_urls_is_kept_as_a_tuple_and_round_trips_through_json():
    cfg = EngineConfig(
        kind="openai_http",
        base_url=["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"],
        model="m",
        endpoint_cooldown_s=5,
    )
    assert cfg.base_url == cfg.base_urls == ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1")
    back = EngineConfig.model_validate_json(cfg.model_dump_json())
    assert back == cfg and hash(back) == hash(cfg) and back.endpoint_cooldown_s == 5
    assert json.loads(cfg.model_dump_json())["base_url"] == list(cfg.base_urls)
    assert EngineConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    one = EngineConfig(kind="openai_http", base_url=["http://127.0.0.1:8000/v1"], model="m")
    assert one.base_url == "http://127.0.0.1:8000/v1" and one.base_urls == ("http://127.0.0.1:8000/v1",)
    assert one == EngineConfig(kind="openai_http", base_url="http://127.0.0.1:8000/v1", model="m")
    assert EngineConfig().base_urls == ()


def test_engines_file_takes_a_yaml_list(tmp_path):
    f = tmp_path / "engines.yaml"
    f.write_text(
        "verifier:\n  kind: openai_http\n  model: default\n  base_url:\n    - http://127.0.0.1:8000/v1\n"
        "    - http://127.0.0.1:8001/v1\n"
    )
    assert load_engines_config(f).verifier.base_urls == ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1")
    f.write_text("verifier:\n  kind: openai_http\n  model: default\n  base_url: [http://a/v1, http://a/v1/]\n")
    with pytest.raises(ConfigError, match=r"engines.yaml: invalid engine config\n.*lists 'http://a/v1/' twice"):
        load_engines_config(f)


@pytest.mark.parametrize(
    "fields, hint",
    [
        ({"base_url": []}, "base_url is an empty list"),
        ({"base_url": ["http://a/v1", "http://a/v1"]}, "lists 'http://a/v1' twice"),
        ({"base_url": ["http://a/v1", "a:8000"]}, "'a:8000' must start with http://"),
        ({"base_url": ["http://a/v1", 8000]}, "base_url"),
        ({"base_url": [f"http://u:{PW}@a/v1", "http://b/v1"]}, r"user:password@ in base_url\[0\] but not in the other"),
        ({"base_url": [f"http://u:{PW}@a/v1", "http://u:other@b/v1"]}, "different user:password@ in the URLs"),
        ({"base_url": [f"http://u:{PW}@a/v1", f"http://u:{PW}@b/v1"], "basic_auth": "u:x"}, "credentials given twice"),
        ({"base_url": ["http://a/v1", "http://b/v1"], "endpoint_cooldown_s": 0}, "endpoint_cooldown_s"),
        ({"kind": "vllm", "base_url": ["http://a/v1", "http://b/v1"]}, "only used with kind 'openai_http'"),
    ],
)
def test_bad_endpoint_lists_say_how_to_fix(fields, hint):
    with pytest.raises(ConfigError, match=hint) as err:
        engine_config(**({"kind": "openai_http", "model": "m"} | fields))
    assert PW not in str(err.value)


def test_the_same_credentials_in_every_url_become_one_basic_auth():
    cfg = EngineConfig(kind="openai_http", model="m", base_url=[f"http://u:{PW}@a/v1", f"http://u:{PW}@b/v1"])
    assert cfg.base_urls == ("http://a/v1", "http://b/v1") and cfg.basic_auth.get_secret_value() == f"u:{PW}"
    assert PW not in repr(cfg) + cfg.model_dump_json() + model_id(cfg)


def test_model_id_names_every_replica_sorted_and_one_url_as_before():
    a, b = "http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"
    ids = {model_id(EngineConfig(kind="openai_http", model="m", base_url=urls)) for urls in ([a, b], [b, a])}
    assert ids == {f"{a},{b}#m"}  # the order of the list is no part of the identity
    assert model_id(EngineConfig(kind="openai_http", model="m", base_url=a)) == f"{a}#m"  # unchanged
    assert model_id(EngineConfig(kind="openai_http", model="m", base_url=[a])) == f"{a}#m"
    assert f"{a}#m" not in ids  # adding a replica is a new identity: no silent reuse across server sets


def test_every_endpoint_down_fails_naming_each_one_and_its_cause(slept):
    dead = [f"http://127.0.0.1:{p}/v1" for p in free_ports(2)]
    with engine(dead) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat([conv(0)])
        msg = str(err.value)
        # A was marked down and the request moved to B, the last one left: B got its 2 attempts, then went down too
        assert msg.startswith(f"{dead[1]}/chat/completions: ConnectError") and "\n" not in msg
        assert "after 2 attempts (timeout 5s, connect 2s); endpoints: " in msg
        assert f"{dead[0]} (down: ConnectError" in msg and f"{dead[1]} (down: ConnectError" in msg
        assert slept == [0.01]
        with pytest.raises(EngineError) as err:  # now nothing is left: at once, no try, no pause
            eng.chat([conv(1)])
        stats = eng.endpoint_stats()
    msg = str(err.value)
    assert msg.startswith("every endpoint of base_url is down for /chat/completions: ")
    assert all(f"{u} (down: ConnectError" in msg for u in dead) and "probed again 30s after" in msg
    assert slept == [0.01] and sum(s["requests"] for s in stats.values()) == 3
    assert [s["marked_down"] for s in stats.values()] == [1, 1]


def test_dead_endpoints_with_a_tiny_cooldown_cannot_keep_a_request_going_round(slept):
    dead = [f"http://127.0.0.1:{p}/v1" for p in free_ports(3)]
    with engine(dead, endpoint_cooldown_s=1e-9, attempts=2) as eng:
        with pytest.raises(EngineError, match="after 2 attempts"):
            eng.chat([conv(0)])
        assert sum(s["requests"] for s in eng.endpoint_stats().values()) <= 2 + len(dead) - 1


def test_one_url_is_never_marked_down():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with engine([url]) as eng:
        with pytest.raises(EngineError) as err:
            eng.chat([conv(0)])
        stats = eng.endpoint_stats()
    assert str(err.value).startswith(f"{url}/chat/completions: ConnectError") and "endpoints:" not in str(err.value)
    assert str(err.value).endswith("after 2 attempts (timeout 5s, connect 2s)")
    assert stats[url] | {"down": False} == stats[url] and stats[url]["marked_down"] == 0


def test_an_engine_without_endpoints_adds_nothing_to_the_costs():
    _, stats = verify(FakeEngine(), [Check("p", "r", "c")])
    assert set(stats.as_dict()) == set(StageStats().as_dict())
