"""``dr serve``'s safe defaults with a real process and real HTTP (engines: the scripted OpenAI-compatible server on
127.0.0.1, so no model loads):

- a non-loopback ``--host`` without ``--token-file`` exits 2 at once with one line naming the address and the two
  options, before anything else is read, loaded or bound;
- with ``--insecure-no-token`` it starts, warns on every start and serves without a token (bound to a non-loopback
  address of this machine, skipped when it has none; the decision itself: tests/unit/test_serve_safety.py);
- a set of 10,000 responses (and a group or batch as large) is answered 422 naming the field, with nothing scored.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from tests.support.netutil import free_port
from tests.support.scripted_server import ScriptedServer
from tests.support.serve_proc import ROOT, ServeProcess, engines_file

SET = {"prompt": "Which planet is closest to the sun?", "responses": ["Mercury.", "Venus, I think.", "Mars"]}


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServer() as srv:
        yield srv


def _serve(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


# -- refused: one line, exit 2, nothing started ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5"])
def test_a_network_address_without_a_token_is_refused_before_anything_starts(tmp_path, scripted, host):
    scripted.reset()
    store = tmp_path / "store"
    with socket.socket() as held:  # the port is taken: a port check would say "already in use" instead
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        engines = engines_file(tmp_path / "engines.yaml", scripted.base_url)
        started = time.monotonic()
        out = _serve("--host", host, "--port", str(port), "--store", str(store), "--engines", str(engines))
        took = time.monotonic() - started
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0] == (
        f"error: --host {host} is reachable from other machines and no --token-file was given: give --token-file FILE "
        "(clients then send its token as a bearer token) or, to serve it unauthenticated anyway, --insecure-no-token"
    )
    assert "Traceback" not in out.stderr and "serving on" not in out.stderr and not out.stdout
    assert not store.exists()  # the store was not even checked
    assert sum(scripted.counts.values()) == 0  # the engines were never contacted
    assert took < 30, took  # a Python start-up, not an engine start


def test_the_default_preset_is_refused_without_loading_its_models(tmp_path):
    """No engines file: the tiny preset's in-process models would take minutes to load; the refusal is at once."""
    out = _serve("--host", "0.0.0.0", "--store", str(tmp_path / "store"), timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--host 0.0.0.0 is reachable from other machines" in out.stderr
    assert "SmolLM2" not in out.stderr and "loading" not in out.stderr


def test_loopback_without_a_token_still_serves(tmp_path, scripted):
    srv = ServeProcess(
        tmp_path, store=tmp_path / "store", engines=engines_file(tmp_path / "engines.yaml", scripted.base_url)
    )
    with srv, srv.client() as c:
        assert c.post("/v1/score-set", json=SET).status_code == 200
    assert "warning" not in srv.logs()


# -- --insecure-no-token: starts, warns on every start ---------------------------------------------------------------


def test_insecure_no_token_on_a_network_address_warns_on_every_start_before_anything_else(tmp_path, scripted):
    """The warning is the first thing ``dr serve --insecure-no-token`` says on a network address, before its other
    start-up checks; here the store check then fails (a store under a regular file), so the test binds nothing on a
    network interface (test servers listen on 127.0.0.1 only): two starts, two warnings, each followed by the error."""
    scripted.reset()
    engines = engines_file(tmp_path / "engines.yaml", scripted.base_url)
    (tmp_path / "a-file").write_text("")
    store = tmp_path / "a-file" / "store"
    for _start in (1, 2):
        out = _serve(
            "--host", "10.0.0.5", "--port", str(free_port()), "--insecure-no-token", "--store", str(store),
            "--engines", str(engines),
        )  # fmt: skip
        lines = [line for line in out.stderr.splitlines() if line.startswith(("warning: ", "error: "))]
        assert out.returncode == 2, out.stderr
        assert lines[0] == (
            "warning: --insecure-no-token: the scorer on 10.0.0.5 is unauthenticated and reachable from the network "
            "(anyone who can connect can score and write to the store); use --token-file to require a token"
        ), out.stderr
        assert len(lines) == 2 and lines[1].startswith("error: ") and "a-file" in lines[1], out.stderr
        assert "serving on" not in out.stderr
    assert sum(scripted.counts.values()) == 0


# -- limits: an oversize set is refused at once, nothing scored ------------------------------------------------------


@pytest.fixture(scope="module")
def served(scripted, tmp_path_factory):
    work = tmp_path_factory.mktemp("limits")
    srv = ServeProcess(
        work,
        store=work / "store",
        engines=engines_file(work / "engines.yaml", scripted.base_url),
        args=("--group-size", "2", "--group-timeout", "3", "--max-queries", "100"),
    )
    with srv:
        yield srv


def _parquet_parts(srv) -> list[str]:
    return sorted(str(p) for p in srv.store.rglob("*.parquet")) if srv.store.exists() else []


OVERSIZE = [
    ("/v1/score-set", {"prompt": "p", "responses": [f"response {i}" for i in range(10_000)]}, "responses", "64"),
    (
        "/v1/rewards",
        {"group_id": "g", "group_size": 10_000, "prompt": "p", "response": "r", "request_id": "r-1"},
        "group_size",
        "64",
    ),
    ("/get_reward", {"query": [f"p answer {i}" for i in range(10_000)], "prompts": ["p"] * 10_000}, "query", "100"),
]


@pytest.mark.parametrize("route,body,field,limit", OVERSIZE, ids=[f for _, _, f, _ in OVERSIZE])
def test_an_oversize_request_is_refused_at_once_naming_the_field(served, scripted, route, body, field, limit):
    scripted.reset()
    before = _parquet_parts(served)
    with served.client(timeout=30) as c:
        started = time.monotonic()
        r = c.post(route, json=body)
        took = time.monotonic() - started
        answer = r.json()
        assert r.status_code == 422, r.text
        assert (answer["error"], answer["field"]) == ("invalid_request", field), answer
        assert f"the limit is {limit}" in answer["detail"], answer
    assert sum(scripted.counts.values()) == 0  # no rubric generated, no verdict asked
    assert _parquet_parts(served) == before  # nothing written
    assert took < 10, took  # refused on arrival, not after a scoring job


def test_a_set_at_the_limit_is_scored(served, scripted):
    with served.client() as c:
        r = c.post("/v1/score-set", json={"prompt": "p", "responses": [f"response {i}" for i in range(64)]})
    assert r.status_code == 200 and len(r.json()["scores"]) == 64, r.text


# -- bodies the parser cannot take: a declared 422 on every route, nothing scored or written -------------------------
POST_ROUTES = ["/v1/score-set", "/v1/rewards", "/get_reward", "/verify", "/seed_session"]


def test_every_body_the_parser_cannot_take_is_a_declared_422_on_every_route(served, scripted):
    from tests.unit.test_service_bodies import BAD_BODIES

    spec = json.loads((ROOT / "docs" / "api" / "openapi.json").read_text())["paths"]  # the committed contract
    scripted.reset()
    before = _parquet_parts(served)
    with served.client(timeout=30) as c:
        for route in POST_ROUTES:
            assert "422" in spec[route]["post"]["responses"], route  # declared
            for case, body, field, words in BAD_BODIES:
                r = c.post(route, content=body, headers={"content-type": "application/json"})
                assert r.status_code == 422, (route, case, r.status_code, r.text[:300])
                answer = r.json()
                assert set(answer) == {"error", "detail", "field"}, (route, case, answer)  # the one error shape
                assert (answer["error"], answer["field"]) == ("invalid_request", field), (route, case, answer)
                assert words in answer["detail"], (route, case, answer)
        assert c.get("/health").status_code == 200  # the service is still up after all of them
    assert sum(scripted.counts.values()) == 0  # nothing scored
    assert _parquet_parts(served) == before  # nothing written
