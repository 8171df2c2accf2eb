"""The integration half of tests/unit/test_secrets.py (real models, servers or clusters): its helpers live
there."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError

from dr_core.config import (
    REDACTED,
    CoevolveConfig,
    ConfigError,
    EngineConfig,
    EnginesConfig,
    RoundConfig,
    coevolve_preset,
    preset,
)
from dr_core.engines import EngineError, make_engine
from tests.integration.test_engines_http_errors import CONV, Replay, chat_reply
from tests.unit.test_secrets import (
    SECRET,
    SECRET2,
    USER,
    SecretParams,
    _prefect_flow,
    auth_header,
    clean,
    cred_url,
    http,
)


def test_a_server_echoing_the_key_is_scrubbed_from_the_error():
    echo = (401, lambda headers: {"error": f"key rejected: {headers.get('Authorization')}"})
    with Replay(default=echo) as srv:
        for cfg in (http(srv.url, api_key=SECRET), http(cred_url(srv.httpd.server_address[1]))):
            with make_engine(cfg) as eng, pytest.raises(EngineError) as err:
                eng.chat(CONV)
            assert "HTTP 401" in str(err.value) and clean(str(err.value)), str(err.value)
    assert SECRET in srv.requests[0][2]["Authorization"]  # the server did get it


def test_round_trip_through_model_dump_keeps_the_real_key():
    with Replay() as srv:
        cfg = preset("tiny", engines=EnginesConfig(verifier=http(srv.url, api_key=SECRET)))
        for copy in (
            RoundConfig.model_validate(cfg.model_dump()),
            RoundConfig(**cfg.model_dump()),
            preset("tiny", **{"engines": cfg.engines.model_dump()}),
            cfg.model_copy(),
            CoevolveConfig(**{**coevolve_preset("tiny").model_dump(), "round": cfg.model_dump()}).round,
        ):
            with make_engine(copy.engines.verifier) as eng:
                assert eng.chat(CONV)[0].texts == ("hello 0",)
            assert auth_header(srv) == f"Bearer {SECRET}"
        port = srv.httpd.server_address[1]
        with make_engine(EngineConfig.model_validate(http(cred_url(port)).model_dump())) as eng:
            eng.chat(CONV)
        assert auth_header(srv) == "Basic " + base64.b64encode(f"{USER}:pw-planted-Hy83Lm!x".encode()).decode()
        with make_engine(http(srv.url)) as eng:  # no key: what a local vLLM server ignores
            eng.chat(CONV)
        assert auth_header(srv) == "Bearer EMPTY"


def test_a_config_read_back_from_json_refuses_to_send_the_mask(monkeypatch):
    with Replay() as srv:
        cfg = preset("tiny", engines=EnginesConfig(verifier=http(srv.url, api_key=SECRET)))
        back = RoundConfig.model_validate_json(cfg.model_dump_json())  # e.g. the runs table's config_json
        assert back.engines.verifier.api_key.get_secret_value() == REDACTED
        with pytest.raises(ConfigError, match="read back from JSON"):
            make_engine(back.engines.verifier)
        # api_key_env survives the round trip: only the variable's name is recorded
        monkeypatch.setenv("DR_TEST_PLANTED_KEY", SECRET)
        env_cfg = preset("tiny", engines=EnginesConfig(verifier=http(srv.url, api_key_env="DR_TEST_PLANTED_KEY")))
        assert clean(env_cfg.model_dump_json())
        with make_engine(RoundConfig.model_validate_json(env_cfg.model_dump_json()).engines.verifier) as eng:
            eng.chat(CONV)
        assert auth_header(srv) == f"Bearer {SECRET}"
        assert all(REDACTED not in (h.get("Authorization") or "") for _, _, h in srv.requests)
        monkeypatch.delenv("DR_TEST_PLANTED_KEY")
        with pytest.raises(ConfigError, match=r"\$DR_TEST_PLANTED_KEY, which is not set"):
            make_engine(env_cfg.engines.verifier)
    with pytest.raises(ValidationError, match="not both"):
        http(api_key=SECRET, api_key_env="X")


def test_prefect_flow_sends_the_real_key_and_stores_only_the_mask(prefect_harness, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    from tasks.runtime import close_engines

    secret_flow = _prefect_flow()
    results = str(tmp_path / "results")
    with Replay(default=(200, chat_reply(text="judged"))) as srv:
        try:
            runs = []
            for key in (SECRET, SECRET2):  # the second run: a rotated key, same work
                cfg = preset("tiny", engines=EnginesConfig(verifier=http(srv.url, api_key=key)))
                state = secret_flow(SecretParams(config=cfg), results, return_state=True)
                runs.append((state.state_details.flow_run_id, state.result()))
        finally:
            close_engines()
    assert runs[0][1] == {"state": "Completed", "text": "judged 0"}
    assert runs[1][1] == {"state": "Cached", "text": "judged 0"}  # rotating the key kept the cache
    assert len(srv.requests) == 1 and srv.requests[0][2]["Authorization"] == f"Bearer {SECRET}"
    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        for run_id, _ in runs:
            stored = json.dumps(client.read_flow_run(run_id).parameters)
            assert REDACTED in stored and clean(stored)
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            assert logs and clean("\n".join(log.message for log in logs))
    for f in (tmp_path / "results").rglob("*"):
        if f.is_file():
            assert clean(f.read_bytes().decode("utf-8", "replace")), f
