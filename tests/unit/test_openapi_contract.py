"""The reward service's contract: docs/api/openapi.json is the app's OpenAPI schema (built as the docs build builds
it, no engines), and every error status a route declares answers the one error shape, ``ErrorBody``."""

from __future__ import annotations

import json

from infra.docs import ref_http


def test_committed_schema_is_the_apps_schema():
    drift = ref_http.contract_drift()
    assert drift is None, drift


def test_drift_names_the_command_that_rewrites_it(tmp_path, monkeypatch):
    stale = tmp_path / "openapi.json"
    stale.write_text(json.dumps({"openapi": "3.1.0", "paths": {}}))
    monkeypatch.setattr(ref_http, "CONTRACT", stale)
    assert ref_http.contract_drift().endswith(".venv/bin/python -m infra.docs.ref_http --write")
    assert ref_http.main(["--check"]) == 1
    assert ref_http.main(["--write"]) == 0 and ref_http.contract_drift() is None


def test_every_declared_error_is_the_error_body_and_every_body_route_declares_422():
    schema = json.loads(ref_http.CONTRACT.read_text())
    error_body = schema["components"]["schemas"]["ErrorBody"]
    assert error_body["required"] == ["error", "detail", "field"]
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            errors = {s: r for s, r in op["responses"].items() if int(s) >= 400}
            for status, resp in errors.items():
                ref = resp["content"]["application/json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/ErrorBody", (method, path, status)
            if "requestBody" in op:
                assert {"401", "413", "422", "503"} <= set(errors), (method, path)
