"""Stage "route", the first: the reward service's HTTP routes (FastAPI). A route checks the bearer token, reads the
body (``--max-body-bytes``), has it parsed (``requests.parse``), hands it to its handler on the ``Service``
(``intake``), and answers with what comes back, or with the JSON error of what went wrong (``errors``).

Routes (docs/how-to/reward-service.md; every field and error in the site's HTTP API reference):

- ``POST /v1/score-set``: ``{prompt, responses[], rubric_rollouts?, seed?, request_id?}`` -> the rubric(s), the
  verdict matrix, Eq. 12 scores, R_disc, the unscorable parts and the request id.
- ``POST /v1/rewards``: ``{group_id, group_size, prompt, response, request_id}`` -> ``{reward, rubric_id, ...}``
  once the whole group has arrived (504 ``group_incomplete`` if it does not in time).
- ``POST /get_reward``: OpenRLHF ``--remote_rm_url``: ``{query, prompts, labels}`` -> ``{rewards, scores,
  extra_logs}``; groups form by prompt, ``group_size`` per set.
- ``POST /verify``: NeMo Gym's resources-server verify, ``BaseVerifyRequest`` ``{responses_create_params, response,
  ...}`` -> ``BaseVerifyResponse``, the request echoed with ``reward`` (and the ``/v1/rewards`` answer's fields)
  once ``--group-size`` rollouts of its prompt and task have arrived (504 ``group_incomplete`` if they do not in
  time). ``POST /seed_session``: NeMo Gym's, answers ``{}``.
- ``GET /health`` (the process answers), ``GET /ready`` (engines loaded, worker running), ``GET /metrics``
  (Prometheus text).

Every error is one JSON shape, ``{"error": <code>, "detail": <text>, "field": <dotted path> | null}``
(``requests.ErrorBody``, declared in the OpenAPI schema for each route's statuses): 401 ``unauthorized`` (a bearer
token is set and the request lacks it; /health and /ready stay open for probes), 404 ``not_found`` and 405
``method_not_allowed`` (a route or method the service does not have), 413 ``body_too_large``, 422
``invalid_request`` (the field named, also for a set, batch or text over the service's limits; nothing is
written), 503 ``not_ready`` / ``busy`` / ``engine_failure`` / ``batch_failure``, 504 ``group_incomplete``; a bug is
a 500 ``internal_error`` of the same shape. A request id answered before (this process or an earlier one on the same
store and run id) gets the same answer again; sent again with another body it is a 422.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager
from functools import partial
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from dr_core.service.answers import unscorable_count
from dr_core.service.errors import BadRequest, GroupIncomplete, TooManyGroups, Unavailable
from dr_core.service.intake import Service
from dr_core.service.requests import (
    ErrorBody,
    NeMoGymSeedSessionRequest,
    NeMoGymVerifyRequest,
    OpenRLHFBatch,
    RewardMember,
    ScoreSet,
    parse,
)

OPEN_ROUTES = ("/health", "/ready")
COUNTED_ROUTES = ("/v1/score-set", "/v1/rewards", "/get_reward", "/verify")

__all__ = ["Service", "create_app"]

#: what each error status of the routes means (the schema's ``responses``, each an ``ErrorBody``)
_ERRORS = {
    401: "unauthorized: a bearer token is set (--token-file) and the request lacks it",
    413: "body_too_large: the body is over --max-body-bytes (field: body)",
    422: "invalid_request: the body or the field named is refused (malformed, or over a limit: --max-responses, "
    "--max-queries, --max-text-chars); nothing is written",
    503: "not_ready / busy / engine_failure / batch_failure: retry later",
    504: "group_incomplete: the group's last member did not arrive within --group-timeout",
}


def _declared(*statuses: int, text_route: bool = False) -> dict:
    """The schema's ``responses`` for these error statuses; a route that answers text (``/metrics``) still answers
    its errors in JSON, declared by reference (the JSON routes put ``ErrorBody`` in the schema's components)."""
    if text_route:
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        return {s: {"description": _ERRORS[s], "content": {"application/json": {"schema": ref}}} for s in statuses}
    return {s: {"model": ErrorBody, "description": _ERRORS[s]} for s in statuses}


def create_app(service: Service) -> FastAPI:
    """The FastAPI app over ``service`` (its ``start`` runs in a thread at start-up, its ``stop`` at shutdown)."""
    app = FastAPI(
        title="dynamicrubric reward service",
        lifespan=partial(_lifespan, service),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.middleware("http")(partial(_auth_and_count, service))
    app.exception_handler(HTTPException)(_http_error)
    app.exception_handler(RequestValidationError)(_validation_error)
    app.exception_handler(Exception)(_internal_error)

    @app.post("/v1/score-set", responses=_declared(401, 413, 422, 503))
    async def score_set(request: Request):
        return await _handle(service, request, ScoreSet, service.score_set)

    @app.post("/v1/rewards", responses=_declared(401, 413, 422, 503, 504))
    async def rewards(request: Request):
        return await _handle(service, request, RewardMember, service.reward)

    @app.post("/get_reward", responses=_declared(401, 413, 422, 503, 504))
    async def get_reward(request: Request):
        return await _handle(service, request, OpenRLHFBatch, service.openrlhf)

    @app.post("/verify", responses=_declared(401, 413, 422, 503, 504))
    async def verify(request: Request):
        return await _handle(service, request, NeMoGymVerifyRequest, service.nemo_gym_verify)

    @app.post("/seed_session", responses=_declared(401, 413, 422, 503))
    async def seed_session(request: Request):
        return await _handle(service, request, NeMoGymSeedSessionRequest, service.nemo_gym_seed_session)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready", responses=_declared(503))
    async def ready():
        return _readiness(service)

    @app.get("/metrics", response_class=PlainTextResponse, responses=_declared(401, text_route=True))
    async def metrics():
        return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4")

    return app


@asynccontextmanager
async def _lifespan(service: Service, _app: FastAPI):
    threading.Thread(target=service.start, name="dr-service-start", daemon=True).start()
    yield
    service.close_groups()  # on the loop: waiting members get group_incomplete
    await asyncio.get_running_loop().run_in_executor(None, service.stop)


async def _auth_and_count(service: Service, request: Request, call_next):
    route = request.url.path
    started = time.perf_counter()
    if route not in OPEN_ROUTES and not service.authorized(request.headers.get("authorization")):
        response = _error(401, "unauthorized", "a bearer token is required (Authorization: Bearer ...)")
        response.headers["WWW-Authenticate"] = "Bearer"
    else:
        response = await call_next(request)
    if route in COUNTED_ROUTES:
        service.metrics.inc("dr_requests_total", route=route, status=str(response.status_code))
        service.metrics.observe("dr_request_seconds", time.perf_counter() - started, route=route)
    return response


async def _handle(service: Service, request: Request, model, run) -> JSONResponse:
    """Read, parse, run the handler; its answer, or the JSON error of what went wrong."""
    try:
        body = parse(model, await _read_body(request, service.settings.max_body_bytes), service.settings)
        answer = await run(body)
    except BadRequest as exc:
        code = "body_too_large" if exc.status == 413 else "invalid_request"
        return _error(exc.status, code, exc.message, exc.field)
    except Unavailable as exc:
        return _error(503, exc.reason, str(exc))
    except TooManyGroups as exc:
        return _error(503, "busy", str(exc))
    except GroupIncomplete as exc:
        return _error(504, "group_incomplete", str(exc))
    if n := unscorable_count(answer):
        service.metrics.inc("dr_unscorable_total", n)
    return JSONResponse(answer)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadRequest("body", f"{declared} bytes; the limit is {limit} (--max-body-bytes)", 413)
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise BadRequest("body", f"more than {limit} bytes (--max-body-bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _readiness(service: Service):
    if service.failed:
        return _error(503, "not_ready", f"the service failed to start: {service.failed}")
    if not service.ready.is_set():
        return _error(503, "not_ready", "the engines are still loading")
    return {
        "status": "ready",
        "run_id": service.settings.run_id,
        "generator": service.generator_name,
        "verifier": service.verifier_name,
    }


def _error(status: int, code: str, detail: str, field: str | None = None, headers=None) -> JSONResponse:
    body = ErrorBody(error=code, detail=detail, field=field)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


async def _http_error(_request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's own errors (an unknown route, a method a route does not have) in the service's shape."""
    phrase = HTTPStatus(exc.status_code).phrase if exc.status_code in HTTPStatus._value2member_map_ else "error"
    code = phrase.lower().replace(" ", "_").replace("-", "_")
    return _error(exc.status_code, code, str(exc.detail), headers=exc.headers)


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own validation (no route declares parameters today; a future one answers like ``parse``)."""
    err = (exc.errors() or [{"loc": (), "msg": "invalid request"}])[0]
    where = ".".join(str(p) for p in err["loc"] if p != "body") or "body"
    return _error(422, "invalid_request", str(err["msg"]), where)


async def _internal_error(_request: Request, exc: Exception) -> JSONResponse:
    return _error(500, "internal_error", f"{type(exc).__name__} (a bug in the service; see its log)")
