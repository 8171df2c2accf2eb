"""``dr serve``'s safe defaults as pure logic: which listen addresses need a token (``server.check_exposure``), and
the request size limits (``requests.parse`` against ``ServiceSettings``; the committed contract declares the
defaults). The same over real HTTP and a real process: tests/integration/test_service_safety.py."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dr_core.config.service import ServiceSettings
from dr_core.service.requests import BadRequest, OpenRLHFBatch, RewardMember, ScoreSet, parse
from dr_core.service.server import ServeError, check_exposure, is_loopback
from infra.docs.ref_http import CONTRACT

LOOPBACK = ["127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]", "localhost", "LOCALHOST", "localhost.",
            "::ffff:127.0.0.1"]  # fmt: skip
NETWORK = ["0.0.0.0", "::", "", "10.0.0.5", "192.168.1.10", "fd00::2", "example.com", "my-host", "::ffff:10.0.0.1"]


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_addresses(host):
    assert is_loopback(host)
    assert check_exposure(host, None) is None  # no token needed, no warning


@pytest.mark.parametrize("host", NETWORK)
def test_other_addresses_need_a_token_or_the_insecure_flag(host, tmp_path):
    assert not is_loopback(host)
    with pytest.raises(ServeError) as e:
        check_exposure(host, None)
    line = str(e.value)
    assert "\n" not in line and f"--host {host} " in line
    assert "--token-file" in line and "--insecure-no-token" in line
    assert check_exposure(host, tmp_path / "token") is None  # a token file: fine, no warning
    warning = check_exposure(host, None, insecure_no_token=True)
    assert warning.startswith("warning: ") and "\n" not in warning and host in warning
    assert "unauthenticated" in warning and "reachable from the network" in warning


def test_the_insecure_flag_changes_nothing_on_loopback():
    assert check_exposure("127.0.0.1", None, insecure_no_token=True) is None


def test_the_cli_refuses_before_reading_anything(tmp_path, monkeypatch):
    """The refusal comes first: before the engines file (here invalid), the store (here a file) and the port."""
    from cli.main import app

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("generator: {kind: nonsense}\n")
    store = tmp_path / "a-file"
    store.write_text("")
    started = []
    monkeypatch.setattr("dr_core.service.server.serve", lambda *a, **k: started.append(a) or 0)
    out = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--engines", str(bad_yaml), "--store", str(store), "--port", "70000"]
    )
    assert out.exit_code == 2 and not started, out.output
    assert "--host 0.0.0.0 is reachable from other machines" in out.output and "--insecure-no-token" in out.output
    assert "invalid engine config" not in out.output and "70000" not in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output


# -- limits ------------------------------------------------------------------------------------------------------


def _refused(model, body: dict, settings: ServiceSettings | None = None) -> BadRequest:
    with pytest.raises(BadRequest) as e:
        parse(model, json.dumps(body).encode(), settings or ServiceSettings())
    return e.value


def test_default_limits():
    s = ServiceSettings()
    assert (s.max_responses, s.max_queries, s.max_text_chars, s.max_body_bytes) == (64, 4096, 32_000, 1_048_576)


def test_a_set_of_10000_responses_is_refused_naming_responses():
    e = _refused(ScoreSet, {"prompt": "p", "responses": [f"r{i}" for i in range(10_000)]})
    assert (e.field, e.status) == ("responses", 422)
    assert e.message == "10000 responses; the limit is 64 (--max-responses)"
    ok = parse(ScoreSet, json.dumps({"prompt": "p", "responses": ["r"] * 64}).encode(), ServiceSettings())
    assert len(ok.responses) == 64  # the limit itself is allowed


def test_group_size_queries_and_text_limits_name_the_field():
    member = {"group_id": "g", "group_size": 10_000, "prompt": "p", "response": "r", "request_id": "r1"}
    assert _refused(RewardMember, member).field == "group_size"
    e = _refused(OpenRLHFBatch, {"query": ["pq"] * 10_000, "prompts": ["p"] * 10_000})
    assert (e.field, e.status) == ("query", 422) and "(--max-queries)" in e.message
    small = ServiceSettings(max_queries=3, max_text_chars=5)
    assert _refused(OpenRLHFBatch, {"query": ["pq"] * 4, "prompts": ["p"] * 4}, small).field == "query"
    assert parse(OpenRLHFBatch, json.dumps({"query": ["pq"] * 3, "prompts": ["p"] * 3}).encode(), small)
    e = _refused(ScoreSet, {"prompt": "p", "responses": ["ok", "x" * 6]}, small)
    assert e.field == "responses.1" and "(--max-text-chars)" in e.message


def test_the_contract_declares_the_default_limits():
    schemas = json.loads(CONTRACT.read_text())["components"]["schemas"]
    s = ServiceSettings()
    score_set = schemas["ScoreSet"]["properties"]
    assert score_set["responses"]["maxItems"] == s.max_responses
    assert score_set["responses"]["items"]["maxLength"] == score_set["prompt"]["maxLength"] == s.max_text_chars
    assert score_set["rubric_rollouts"]["maximum"] == 8
    assert schemas["RewardMember"]["properties"]["group_size"]["maximum"] == s.max_responses
    assert schemas["RewardMember"]["properties"]["response"]["maxLength"] == s.max_text_chars
    openrlhf = schemas["OpenRLHFBatch"]["properties"]
    assert openrlhf["query"]["maxItems"] == openrlhf["prompts"]["maxItems"] == s.max_queries


def test_every_limit_is_a_serve_option():
    from cli.main import app

    out = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    for option in ("--max-responses", "--max-queries", "--max-text-chars", "--max-body-bytes", "--insecure-no-token"):
        assert option in out.output, option
