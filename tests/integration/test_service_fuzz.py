"""The reward service against its committed contract (docs/api/openapi.json), fuzzed: schemathesis generates valid
and invalid requests for every route of a real ``dr serve`` (127.0.0.1, uvicorn, a real store; its engines the
scripted OpenAI-compatible server) and the answers are checked against the schema and the error contract:

- no 5xx but the declared 503 and 504 (a group that does not fill, ``--group-timeout`` short here);
- status code, content type and body as the schema declares them for that route;
- every 4xx is the one error shape (``ErrorBody``), and a 422 names the field at fault (``body`` or a field of the
  route's body model);
- every row of the store traces to a request the service accepted: a refused (4xx) request wrote nothing. A
  ``/v1/score-set`` or ``/v1/rewards`` row has the request id of an answer 200; a ``/get_reward`` row (its ids are
  the service's own) has the prompt of a batch answered 200 or 504 (a batch's complete groups are scored and
  committed even when another of its groups times out).

Hypothesis runs derandomized (the same cases every run) without its example database.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from dr_core.store.artifacts import Store
from infra.docs.ref_http import CONTRACT
from tests.support.scripted_server import ScriptedServer
from tests.support.serve_proc import ServeProcess, engines_file

#: generated cases per route (a route whose inputs are few, the GET probes, gets fewer: hypothesis stops early)
CASES = {"post": 110, "get": 20}
MIN_TOTAL = 500
DECLARED_5XX = {503, 504}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    with ScriptedServer() as scripted:
        srv = ServeProcess(
            work,
            store=work / "store",
            engines=engines_file(work / "engines.yaml", scripted.base_url),
            args=("--group-timeout", "0.1", "--group-size", "2", "--batch-wait-ms", "0"),
        )
        with srv:
            yield srv


def _body_fields(operation) -> set[str]:
    contract = json.loads(CONTRACT.read_text())
    op = contract["paths"][operation.path][operation.method.lower()]
    body = op.get("requestBody")
    if not body:
        return set()
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    return set(contract["components"]["schemas"][ref].get("properties", {}))


def _content_type(response: schemathesis.Response) -> str:
    """The media type (schemathesis's ``Response.headers``: lowercase names, each a list of values)."""
    return (response.headers.get("content-type") or [""])[0].split(";")[0].strip()


def _check_error_contract(operation, response: schemathesis.Response) -> None:
    status, label = response.status_code, f"{operation.method.upper()} {operation.path}"
    assert status < 500 or status in DECLARED_5XX, (label, status, response.text)
    if status < 400:
        return
    assert _content_type(response) == "application/json", (label, status, response.headers)
    body = response.json()
    assert set(body) == {"error", "detail", "field"}, (label, status, body)
    assert isinstance(body["error"], str) and body["error"] and isinstance(body["detail"], str), (label, body)
    if status in (413, 422):
        field = body["field"]
        assert isinstance(field, str) and field, (label, body)
        assert field == "body" or field.split(".", 1)[0] in _body_fields(operation), (label, body)


def _answered_ids(answer: dict) -> set[str]:
    ids = set(answer.get("request_ids") or ())
    if answer.get("request_id"):
        ids.add(answer["request_id"])
    return ids


def _fuzz(operation, base_url: str, tally: Counter, answered: set, session: requests.Session) -> None:
    modes = [operation.as_strategy(generation_mode=m) for m in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    conformance = [
        st_checks.status_code_conformance,
        st_checks.content_type_conformance,
        st_checks.response_schema_conformance,
    ]

    @settings(
        max_examples=CASES[operation.method.lower()],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(modes))
    def run(case):
        response = case.call(base_url=base_url, session=session, timeout=30)
        tally[(operation.method.upper(), operation.path, response.status_code)] += 1
        _check_error_contract(operation, response)
        case.validate_response(response, checks=conformance)
        if response.status_code == 200 and _content_type(response) == "application/json":
            answered.update(_answered_ids(response.json()))
        if operation.path == "/get_reward" and response.status_code in (200, 504) and isinstance(case.body, dict):
            answered.update(f"prompt:{p}" for p in case.body["prompts"])

    run()


def test_every_route_fuzzed_against_the_contract(served):
    schema = schemathesis.openapi.from_dict(json.loads(CONTRACT.read_text()))
    operations = [result.ok() for result in schema.get_all_operations()]
    tally, answered = Counter(), set()
    with requests.Session() as session:
        for operation in operations:
            _fuzz(operation, served.url, tally, answered, session)
    per_route = Counter()
    for (method, path, _status), n in tally.items():
        per_route[(method, path)] += n
    assert set(per_route) == {(op.method.upper(), op.path) for op in operations}, per_route
    assert sum(per_route.values()) >= MIN_TOTAL, per_route
    statuses = Counter()
    for (_m, _p, status), n in tally.items():
        statuses[status] += n
    assert statuses[200] and statuses[422], statuses  # both kinds of request were generated
    # the store: every commit record (and every scored sample's set) belongs to a request answered 200
    store = Store.from_url(str(served.store))
    stored = store.read_table("requests", run_id="service", round=0).to_pylist() if statuses[200] else []
    keys = {row["request_id"] if row["route"] != "get_reward" else f"prompt:{row['prompt']}" for row in stored}
    assert keys <= answered, sorted(keys - answered)
    assert stored and answered, (len(stored), len(answered))  # the accepted requests were committed and seen
    print(f"fuzzed {sum(per_route.values())} cases: {dict(per_route)}; statuses {dict(statuses)}")
