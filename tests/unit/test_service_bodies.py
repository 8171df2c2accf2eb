"""Bodies the JSON parser or the validator cannot take: every class is one declared 422 in the service's error shape,
naming the body (or the field), for every route's request model (dr_core/service/requests.py ``loads``). Over real
HTTP on every route, with nothing written: tests/integration/test_service_safety.py."""

from __future__ import annotations

import pytest

from dr_core.config.service import ServiceSettings
from dr_core.service import requests as rq
from dr_core.service.errors import BadRequest
from dr_core.service.requests import MAX_INT_DIGITS, parse

MODELS = [rq.ScoreSet, rq.RewardMember, rq.OpenRLHFBatch, rq.NeMoGymVerifyRequest, rq.NeMoGymSeedSessionRequest]

#: (class, body, the field named, words of the detail).
BAD_BODIES = [
    ("deep", b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "body", "nested deeper than the JSON parser takes"),
    ("long integer", b'{"group_size": ' + b"9" * 5000 + b"}", "body", f"5000 digits (at most {MAX_INT_DIGITS})"),
    ("beyond a float", b'{"prompt": "p", "seed": 1e999}', "body", "the number 1e999 is beyond a float"),
    ("NaN", b'{"prompt": NaN}', "body", "NaN is not JSON"),
    ("Infinity", b'{"prompt": -Infinity}', "body", "-Infinity is not JSON"),
    ("lone surrogate", b'{"prompt": "\\ud800 alone"}', "prompt", "lone surrogate"),
    ("UTF-16", '{"prompt": "p"}'.encode("utf-16"), "body", "not UTF-8 (byte 0)"),
    ("Latin-1", '{"prompt": "caf\xe9"}'.encode("latin-1"), "body", "not UTF-8 (byte 15)"),
]


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
@pytest.mark.parametrize("case,body,field,words", BAD_BODIES, ids=[c for c, *_ in BAD_BODIES])
def test_every_body_the_parser_cannot_take_is_a_422_naming_why(model, case, body, field, words):
    with pytest.raises(BadRequest) as caught:
        parse(model, body, ServiceSettings())
    assert caught.value.status == 422 and caught.value.field == field and words in caught.value.message, case


def test_a_surrogate_deep_in_a_list_is_named_by_its_path():
    body = b'{"prompt": "p", "responses": ["fine", "\\udfff"]}'
    with pytest.raises(BadRequest) as caught:
        parse(rq.ScoreSet, body, ServiceSettings())
    assert caught.value.field == "responses.1"


def test_what_json_allows_still_parses():
    body = '\ufeff{"prompt": "caf\xe9 \\ud83d\\ude00", "responses": ["1e300", "-0.5"]}'.encode()  # BOM, a pair
    s = parse(rq.ScoreSet, body, ServiceSettings())
    assert s.prompt == "caf\xe9 \U0001f600" and s.responses == ["1e300", "-0.5"]
    member = b'{"group_id": "g", "group_size": 2, "prompt": "p", "response": "r", "request_id": "r-1"}'
    ok = parse(rq.RewardMember, member, ServiceSettings())
    assert ok.group_size == 2
