"""Engine secrets (an api_key, the password of a http://user:password@host URL) never leave the config object and
the HTTP engine: not in reprs, config JSON (what the runs table and Prefect's stored flow parameters hold), cache
keys, model ids, error messages or Prefect's logs; yet the engine still sends the real key, also after the config
was copied through model_dump/model_validate or handed to a Prefect flow and task in-process.

The servers are real (``Replay``: http.server on 127.0.0.1) and record the Authorization header they got.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, ValidationError

from dr_core.config import (
    REDACTED,
    ConfigError,
    EngineConfig,
    EnginesConfig,
    PolicyEvalConfig,
    RoundConfig,
    coevolve_preset,
    load_engines_config,
    preset,
    redact_url,
)
from dr_core.engines import EngineError, make_engine
from tests.integration.test_engines_http_errors import CONV, Replay
from tests.support.netutil import free_port

SECRET = "sk-planted-Zq7Xv9Kp2Wm4"
SECRET2 = "sk-rotated-Bn5Tc8Rr1Qx6"
PASSWORD = "pw-planted-Hy83Lm!x"
USER = "alice"
PLANTED = (SECRET, SECRET2, PASSWORD, "pw-planted-Hy83Lm%21x")


def clean(text: str) -> bool:
    return not any(p in text for p in PLANTED)


def http(url="http://127.0.0.1:9/v1", **fields) -> EngineConfig:
    return EngineConfig(
        **(
            {
                "kind": "openai_http",
                "base_url": url,
                "model": "served",
                "attempts": 2,
                "retry_backoff_s": 0.01,
                "timeout_s": 5,
                "connect_timeout_s": 1,
            }
            | fields
        )
    )


def cred_url(port: int = 9) -> str:
    return f"http://{USER}:pw-planted-Hy83Lm%21x@127.0.0.1:{port}/v1"  # percent-encoded "!" in the password


def all_configs():
    key, basic = http(api_key=SECRET), http(cred_url())
    engines = EnginesConfig(verifier=key, policy=basic)
    rc = preset("tiny", engines=engines)
    cc = coevolve_preset("tiny", round={"engines": engines.model_dump()}, policy_eval={"judge": key.model_dump()})
    return {
        "engine(api_key)": key,
        "engine(url credentials)": basic,
        "engines": engines,
        "round": rc,
        "coevolve": cc,
        "policy_eval": PolicyEvalConfig(judge=key),
    }


@pytest.mark.parametrize("name", list(all_configs()))
def test_no_secret_in_repr_str_or_json(name):
    from fastapi.encoders import jsonable_encoder  # what Prefect stores for a flow parameter

    cfg = all_configs()[name]
    for text in (
        repr(cfg),
        str(cfg),
        cfg.model_dump_json(),
        cfg.model_dump_json(indent=1),
        json.dumps(cfg.model_dump(mode="json")),
        json.dumps(jsonable_encoder(cfg)),
        repr(cfg.model_dump()),
    ):
        assert clean(text), text
    assert REDACTED in cfg.model_dump_json()


def test_url_credentials_are_taken_out_of_the_url():
    cfg = http(cred_url(8000))
    assert cfg.base_url == "http://127.0.0.1:8000/v1"
    assert cfg.basic_auth.get_secret_value() == f"{USER}:pw-planted-Hy83Lm%21x"
    assert redact_url(cred_url(8000)) == "http://***@127.0.0.1:8000/v1"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1" and redact_url(None) is None
    with pytest.raises(ValidationError, match="not both"):
        http(cred_url(), api_key=SECRET)


def test_engines_file_with_secrets(tmp_path):
    f = tmp_path / "engines.yaml"
    f.write_text(
        f"verifier:\n  kind: openai_http\n  base_url: {cred_url()}\n  model: judge\n"
        f"policy:\n  kind: openai_http\n  base_url: http://127.0.0.1:9/v1\n  api_key: {SECRET}\n"
    )
    cfg = load_engines_config(f)
    assert cfg.policy.api_key.get_secret_value() == SECRET
    assert clean(repr(cfg)) and clean(cfg.model_dump_json())
    f.write_text(f"policy:\n  kind: openai_http\n  api_key: {SECRET}\n")  # invalid: no base_url
    with pytest.raises(ConfigError) as err:
        load_engines_config(f)
    assert "base_url" in str(err.value) and clean(str(err.value))
    f.write_text(f"policy:\n  api_key: {SECRET}\n  kind: [openai_http\n")  # not YAML: PyYAML quotes the line
    with pytest.raises(ConfigError) as err:
        load_engines_config(f)
    assert "not valid YAML" in str(err.value) and clean(str(err.value))


def test_validation_errors_do_not_echo_the_input():
    for build in (
        lambda: EngineConfig(kind="openai_http", api_key=SECRET),
        lambda: EngineConfig(kind="openai_http", base_url=cred_url().replace("http", "ftp")),
        lambda: RoundConfig(k=1, engines={"verifier": {"kind": "openai_http", "api_key": SECRET}}),
        lambda: RoundConfig(
            n_anchor=9, engines={"verifier": {"kind": "openai_http", "base_url": cred_url(), "model": "m"}}
        ),
    ):
        with pytest.raises(ValidationError) as err:
            build()
        # str() is what a traceback or a log line shows (``errors()`` still carries the input: log it with
        # include_input=False, as dr_core.config._explain does)
        assert clean(str(err.value)) and clean(repr(err.value.errors(include_input=False))), str(err.value)
    with pytest.raises(ConfigError) as err:
        from dr_core.config import engine_config

        engine_config(kind="openai_http", api_key=SECRET)
    assert "needs base_url" in str(err.value) and clean(str(err.value))


def test_cache_key_and_model_id_ignore_the_secret():
    from tasks.options import _canonical, content_cache_key
    from tasks.runtime import model_id

    ctx = SimpleNamespace(task=SimpleNamespace(name="verify", fn=SimpleNamespace(__module__="tasks.round")))

    def key(**fields):
        cfg = preset("tiny", engines=EnginesConfig(verifier=http(**fields)))
        return content_cache_key(ctx, {"cfg": cfg, "store": "x"}), json.dumps(_canonical({"cfg": cfg}))

    (k1, p1), (k2, p2), (k0, _) = key(api_key=SECRET), key(api_key=SECRET2), key()
    assert k1 == k2 == k0 and clean(p1 + p2) and REDACTED not in p1
    (kb, pb), (kb2, _) = key(url=cred_url()), key(url=cred_url().replace("Hy83", "Zz00"))
    assert kb == kb2 == k0 and clean(pb)
    assert key(api_key=SECRET, model="other")[0] != k1  # what the model is still counts
    assert model_id(http(cred_url())) == "http://127.0.0.1:9/v1#served"


def test_engine_errors_hold_no_secret():
    port = free_port()  # nothing listens: connection refused
    for cfg in (http(cred_url(port)), http(f"http://127.0.0.1:{port}/v1", api_key=SECRET)):
        with make_engine(cfg) as eng, pytest.raises(EngineError) as err:
            eng.chat(CONV)
        msg = str(err.value)
        assert msg.startswith(f"http://127.0.0.1:{port}/v1/chat/completions: ConnectError") and clean(msg), msg
        assert err.value.__cause__ is None and clean(repr(eng))
    with pytest.raises(EngineError) as err:  # /models at start-up
        make_engine(http(cred_url(port), model="default"))
    assert clean(str(err.value)) and "/models" in str(err.value)


def auth_header(srv: Replay) -> str:
    return srv.requests[-1][2].get("Authorization")


# -- Prefect: the flow and its task get the object (the real key); the API stores the mask -------------------------
class SecretParams(BaseModel):
    config: RoundConfig


def _prefect_flow():
    from prefect import flow, task

    from tasks.options import content_cache_key
    from tasks.runtime import engine_for

    @task(name="secret-ask", cache_key_fn=content_cache_key, persist_result=True)
    def ask(cfg: RoundConfig, store: str) -> str:
        return engine_for(cfg.engines.verifier).chat(CONV)[0].texts[0]

    @flow(name="secret-flow", log_prints=True)
    def secret_flow(params: SecretParams, results: str) -> dict:
        print(f"config: {params.config!r}")  # a careless log line: the repr is masked
        state = ask.with_options(result_storage=Path(results))(params.config, results, return_state=True)
        return {"state": state.name, "text": state.result()}

    return secret_flow
