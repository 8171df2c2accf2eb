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
- ``GET /health`` (the process answers), ``GET /ready`` (engines loaded, worker running), ``GET /metrics``
  (Prometheus text).

Errors are JSON ``{"error": <code>, "field"?: ..., "detail": ...}``: 401 ``unauthorized`` (a bearer token is set and
the request lacks it; /health and /ready stay open for probes), 413 ``body_too_large``, 422 ``invalid_request``
(the field named; nothing is written), 503 ``not_ready`` / ``busy`` / ``engine_failure`` / ``batch_failure``, 504
``group_incomplete``. A request id answered before (this process or an earlier one on the same store and run
id) gets the same answer again; sent again with another body it is a 422.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from dr_core.service.answers import unscorable_count
from dr_core.service.errors import BadRequest, GroupIncomplete, TooManyGroups, Unavailable
from dr_core.service.intake import Service
from dr_core.service.requests import OpenRLHFBatch, RewardMember, ScoreSet, parse

OPEN_ROUTES = ("/health", "/ready")
COUNTED_ROUTES = ("/v1/score-set", "/v1/rewards", "/get_reward")

__all__ = ["Service", "create_app"]


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

    @app.post("/v1/score-set")
    async def score_set(request: Request):
        return await _handle(service, request, ScoreSet, service.score_set)

    @app.post("/v1/rewards")
    async def rewards(request: Request):
        return await _handle(service, request, RewardMember, service.reward)

    @app.post("/get_reward")
    async def get_reward(request: Request):
        return await _handle(service, request, OpenRLHFBatch, service.openrlhf)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        return _readiness(service)

    @app.get("/metrics")
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


def _error(status: int, code: str, detail: str, field: str | None = None) -> JSONResponse:
    body = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)
