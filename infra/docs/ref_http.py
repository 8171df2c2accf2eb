"""reference/http-api.md, and the committed contract docs/api/openapi.json: the reward service's HTTP API, from
FastAPI's OpenAPI schema.

The app is ``dr_core.service.app.create_app`` over a real ``Service`` whose engines are never opened (the app is
built, not started: no lifespan, no request). The routes read their bodies themselves (``requests.parse``, so that a
bad body is the service's own 422), which leaves FastAPI's schema without request bodies; each route's body model
is the pydantic model its handler names (``ScoreSet`` for ``/v1/score-set``, ...), found in the handler's code, and
added to the schema as its ``requestBody``. Every error status a route declares answers ``requests.ErrorBody``.

``docs/api/openapi.json`` (``CONTRACT``) is this schema, committed: clients and the fuzz test read it, the site
publishes it, and tests/unit/test_openapi_contract.py and the docs build fail when the app's schema differs from it.
After changing a route or a body model, rewrite it with (``--check`` only compares)::

    .venv/bin/python -m infra.docs.ref_http --write
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from infra.docs import md

_REF = "#/components/schemas/{model}"

#: the committed schema (under docs/: the site publishes it as api/openapi.json)
CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.json"
#: the one command that rewrites ``CONTRACT`` from the app
WRITE_COMMAND = ".venv/bin/python -m infra.docs.ref_http --write"


def _app():
    from dr_core.config.service import ServiceSettings
    from dr_core.service.app import Service, create_app
    from dr_core.store.artifacts import Store

    def no_engines():
        raise RuntimeError("the documentation build never starts the service")

    store = Store.from_url(str(Path(tempfile.gettempdir()) / "dr-docs-store-never-written"))
    return create_app(Service(ServiceSettings(), store, no_engines))


def body_model(endpoint) -> type[BaseModel] | None:
    """The pydantic model a route's handler parses its body with: a BaseModel its code names, or None."""
    code, names = endpoint.__code__, endpoint.__globals__
    found = [names[n] for n in code.co_names if isinstance(names.get(n), type) and issubclass(names[n], BaseModel)]
    return found[0] if found else None


def openapi() -> dict:
    """The service's OpenAPI schema, with each route's request body added from its handler's model."""
    app = _app()
    schema = app.openapi()
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for route in app.routes:
        model = body_model(route.endpoint) if hasattr(route, "endpoint") and hasattr(route, "methods") else None
        if model is None:
            continue
        model_schema = model.model_json_schema(ref_template=_REF)
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
        for method in route.methods:
            operation = schema["paths"][route.path][method.lower()]
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}},
            }
            operation["x-dr-body-model"] = f"{model.__module__}.{model.__qualname__}"
    return schema


def _schema_type(prop: dict) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " | ".join(_schema_type(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return f"array of {_schema_type(prop.get('items') or {})}"
    return prop.get("type", "any")


_BOUNDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)


def _bounds(prop: dict) -> str:
    found = [f"{k} {prop[k]}" for k in _BOUNDS if k in prop]
    found += [f"items {k} {prop['items'][k]}" for k in _BOUNDS if k in prop.get("items", {})]
    for alt in prop.get("anyOf", ()):
        found += [f"{k} {alt[k]}" for k in (*_BOUNDS, "pattern") if k in alt]
    if "pattern" in prop:
        found.append(f"pattern {prop['pattern']}")
    return md.code(", ".join(found)) if found else "–"


def body_table(model_schema: dict) -> str:
    required = set(model_schema.get("required", ()))
    rows = []
    for name, prop in model_schema.get("properties", {}).items():
        default = "required" if name in required else md.code(json.dumps(prop.get("default")))
        rows.append([md.code(name), md.code(_schema_type(prop)), default, _bounds(prop)])
    extra = model_schema.get("additionalProperties")
    note = "Unknown fields are refused (422)." if extra is False else "Unknown fields are accepted and ignored."
    return md.table(["field", "type", "default", "constraints"], rows) + "\n\n" + note


def route_section(path: str, method: str, operation: dict, components: dict) -> str:
    parts = [
        f"### `{method.upper()} {path}` {{#{md.slug(method + ' ' + path)}}}",
        md.text(operation.get("summary", "")),
    ]
    body = operation.get("requestBody")
    if body:
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        parts += [f"Request body (JSON, `{operation.get('x-dr-body-model', ref)}`):", body_table(components[ref])]
    else:
        parts.append("No request body.")
    rows = [
        [md.code(status), md.cell(resp.get("description", "")), md.cell(", ".join(resp.get("content", {})) or "–")]
        for status, resp in operation.get("responses", {}).items()
    ]
    parts += ["Responses in the schema (errors: see above):", md.table(["status", "description", "content"], rows)]
    return "\n\n".join(parts)


def page(schema: dict | None = None) -> str:
    from dr_core.service import app as service_app

    schema = schema or openapi()
    components = schema.get("components", {}).get("schemas", {})
    routes = [(p, m, op) for p, methods in schema["paths"].items() for m, op in methods.items()]
    index = md.table(
        ["method", "path", "request body"],
        [[md.code(m.upper()), f"[`{p}`](#{md.slug(m + ' ' + p)})", md.cell(_body_name(op))] for p, m, op in routes],
    )
    raw = json.dumps(schema, indent=2)
    parts = [
        "# HTTP API",
        f"Generated at build time from the reward service's FastAPI app (`dr_core/service/app.py`, "
        f"{schema['info']['title']} {schema['info']['version']}, OpenAPI {schema['openapi']}) by "
        "`infra/docs/ref_http.py`. The raw schema is the committed contract [openapi.json](../api/openapi.json) "
        f"(`{WRITE_COMMAND}` rewrites it; a build whose app differs from it fails). `dr serve` runs this app; "
        "the routes read and check their bodies themselves, so the request bodies below come from the pydantic "
        "model each handler names.",
        "## Routes and errors",
        md.paragraphs(service_app.__doc__),
        index,
        "## Each route",
        *(route_section(p, m, op, components) for p, m, op in routes),
        "## The schema",
        '??? note "openapi.json"\n\n    ```json\n'
        + "\n".join("    " + line for line in raw.splitlines())
        + "\n    ```",
    ]
    return "\n\n".join(parts) + "\n"


def _body_name(operation: dict) -> str:
    body = operation.get("requestBody")
    return body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1] if body else "–"


def contract_text(schema: dict | None = None) -> str:
    """The schema as ``CONTRACT`` holds it."""
    return json.dumps(schema or openapi(), indent=2) + "\n"


def contract_drift() -> str | None:
    """None when ``CONTRACT`` is the app's schema, else why not, with the command that rewrites it."""
    if not CONTRACT.exists():
        return f"{CONTRACT} is missing; write it with: {WRITE_COMMAND}"
    if CONTRACT.read_text() != contract_text():
        return f"{CONTRACT} differs from the service's OpenAPI schema; rewrite it with: {WRITE_COMMAND}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.docs.ref_http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {CONTRACT.name} from the app")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed schema differs from the app's")
    args = parser.parse_args(argv)
    if args.write:
        CONTRACT.parent.mkdir(parents=True, exist_ok=True)
        CONTRACT.write_text(contract_text())
        print(f"wrote {CONTRACT}")
        return 0
    if args.check:
        drift = contract_drift()
        print(drift or f"{CONTRACT}: up to date", file=sys.stderr if drift else sys.stdout)
        return 1 if drift else 0
    sys.stdout.write(contract_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
