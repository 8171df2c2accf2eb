"""The reward service's HTTP routes (FastAPI), over one ``Service``: engines, ledger, batcher, group collector.

Routes (README "Reward service"):

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
import hmac
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from dr_core.engines.base import Engine
from dr_core.service.batcher import Batcher, Unavailable
from dr_core.service.clients import fill_unscorable
from dr_core.service.groups import GroupCollector, GroupIncomplete, OpenGroup, TooManyGroups
from dr_core.service.ledger import Ledger
from dr_core.service.metrics import Metrics
from dr_core.service.requests import BadRequest, OpenRLHFBatch, RewardMember, ScoreSet, fingerprint, parse, prompt_id
from dr_core.service.scoring import Member, SetJob, score_jobs
from dr_core.service.settings import ServiceSettings
from dr_core.store.artifacts import Store

Log = Callable[[str], None]
OPEN_ROUTES = ("/health", "/ready")


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Service:
    """Everything behind the routes. ``start()`` (a background thread: the process answers /health meanwhile)
    opens the ledger, then the engines, then the worker; ``open_engines`` returns (generator, verifier)."""

    def __init__(
        self,
        settings: ServiceSettings,
        store: Store,
        open_engines: Callable[[], tuple[Engine, Engine]],
        *,
        token: str | None = None,
        log: Log = lambda _m: None,
        close_engines: Callable[[], None] = lambda: None,
    ):
        self.settings, self.store, self.log = settings, store, log
        self._open_engines, self._close_engines = open_engines, close_engines
        self._token = token.encode() if token else None
        self.metrics = Metrics()
        self.ledger = Ledger(store, settings.run_id, log)
        self.batcher: Batcher | None = None
        self.collector: GroupCollector | None = None
        self.failed: str | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.on_failure: Callable[[], None] | None = None  # the server stops itself (exit 2)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._inflight: dict[str, tuple[str, asyncio.Future]] = {}
        self._prompt_groups: dict[str, str] = {}
        self.metrics.gauge("dr_queue_depth", lambda: self.batcher.depth() if self.batcher else 0)
        self.metrics.gauge("dr_open_groups", lambda: len(self.collector.open) if self.collector else 0)

    # -- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.ledger.open()
            generator, verifier = self._open_engines()
            s = self.settings

            def score(jobs):
                stats: dict = {}
                try:
                    return score_jobs(
                        generator,
                        verifier,
                        jobs,
                        temperature=s.rubric_temperature,
                        max_tokens=s.rubric_max_tokens,
                        stats=stats,
                    )
                finally:
                    for stage, st in stats.items():
                        self.metrics.inc("dr_stage_seconds_total", st.seconds, stage=stage)
                        self.metrics.inc("dr_stage_tokens_total", st.prompt_tokens, stage=stage, kind="prompt")
                        self.metrics.inc("dr_stage_tokens_total", st.completion_tokens, stage=stage, kind="completion")

            def commit(scored):
                started = time.perf_counter()
                try:
                    return self.ledger.commit(scored, generator.model_name, verifier.model_name)
                finally:
                    self.metrics.inc("dr_stage_seconds_total", time.perf_counter() - started, stage="store")

            self.batcher = Batcher(
                score,
                commit,
                max_batch_sets=s.max_batch_sets,
                batch_wait_s=s.batch_wait_s,
                max_queue_sets=s.max_queue_sets,
                on_batch=self._on_batch,
            ).start()
            self.generator_name, self.verifier_name = generator.model_name, verifier.model_name
            self.ready.set()
            self.log(
                f"ready: generator {generator.model_name}, verifier {verifier.model_name}; "
                f"{len(self.ledger)} earlier answers in run {s.run_id!r}"
            )
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            self.log(f"error: the service could not start: {self.failed}")
            if self.on_failure is not None:
                self.on_failure()

    def stop(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self._close_engines()
        self.stopped.set()

    def _on_batch(self, n: int, seconds: float, error: str | None) -> None:
        self.metrics.inc("dr_batches_total", outcome=error or "ok")
        self.metrics.observe("dr_batch_sets", n)
        if error == "engine_failure":
            self.metrics.inc("dr_engine_failures_total")
        if error:
            self.log(f"a batch of {n} set(s) failed ({error}) after {seconds:.1f} s; its requests got 503")

    def _require_ready(self) -> None:
        if self.failed:
            raise Unavailable("not_ready", f"the service failed to start: {self.failed}")
        if not self.ready.is_set():
            raise Unavailable("not_ready", "the engines are still loading; retry when GET /ready answers 200")

    def collector_on_loop(self) -> GroupCollector:
        if self.collector is None:
            self.loop = asyncio.get_running_loop()
            self.collector = GroupCollector(
                self._group_complete,
                timeout_s=self.settings.group_timeout_s,
                max_open=self.settings.max_open_groups,
                scored=self.ledger.group_scored,
                on_timeout=lambda _g: self.metrics.inc("dr_group_timeouts_total"),
            )
        return self.collector

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), self._token)

    # -- scoring ----------------------------------------------------------------------------------------------
    async def _submit(self, job: SetJob) -> dict:
        return await asyncio.wrap_future(self.batcher.submit(job))

    def _group_complete(self, g: OpenGroup) -> None:
        responses, members = [], []
        for k, (resp, m) in enumerate(g.members.values()):
            responses.append(resp)
            members.append(replace(m, index=k))
        job = SetJob(f"group:{g.group_id}", g.prompt, tuple(responses), self.settings.rubric_rollouts, 0, members)
        try:
            cf = self.batcher.submit(job)
        except Unavailable as exc:
            g.future.set_exception(exc)
            g.future.exception()
            return
        loop = self.loop

        def transfer(f):
            if g.future.done():
                return
            if f.exception() is not None:
                g.future.set_exception(f.exception())
                g.future.exception()
            else:
                g.future.set_result(f.result())

        cf.add_done_callback(lambda f: loop.call_soon_threadsafe(transfer, f))

    def _replay(self, request_id: str, fp: str) -> dict | None:
        done = self.ledger.get(request_id)
        if done is None:
            return None
        if done.fingerprint != fp:
            raise BadRequest("request_id", f"{request_id!r} was answered before for a different body")
        return done.answer

    async def score_set(self, body: ScoreSet) -> dict:
        self._require_ready()
        rid = body.request_id or f"auto-{uuid.uuid4().hex}"
        fp = fingerprint("score-set", body.prompt, body.responses, body.rubric_rollouts, body.seed)
        if (ans := self._replay(rid, fp)) is not None:
            return ans
        if rid in self._inflight:
            other_fp, fut = self._inflight[rid]
            if other_fp != fp:
                raise BadRequest("request_id", f"{rid!r} is being scored for a different body")
            return (await asyncio.shield(fut))[rid]
        job = SetJob(
            f"set:{rid}",
            body.prompt,
            tuple(body.responses),
            body.rubric_rollouts,
            body.seed,
            [Member(rid, "score-set", fp, _now())],
        )
        fut = asyncio.ensure_future(self._submit(job))
        self._inflight[rid] = (fp, fut)
        fut.add_done_callback(lambda _f: self._inflight.pop(rid, None))
        return (await asyncio.shield(fut))[rid]

    async def reward(self, body: RewardMember) -> dict:
        self._require_ready()
        fp = fingerprint("rewards", body.group_id, body.group_size, body.prompt, body.response)
        if (ans := self._replay(body.request_id, fp)) is not None:
            return ans
        member = Member(body.request_id, "rewards", fp, _now(), group_id=body.group_id)
        fut = self.collector_on_loop().join(body.group_id, body.group_size, body.prompt, body.response, member)
        answers = await asyncio.shield(fut)
        return answers[body.request_id]

    async def openrlhf(self, body: OpenRLHFBatch) -> dict:
        self._require_ready()
        collector = self.collector_on_loop()
        if len(self._prompt_groups) > 4 * self.settings.max_open_groups:  # forget prompts whose group has closed
            self._prompt_groups = {p: g for p, g in self._prompt_groups.items() if g in collector.open}
        pairs = body.pairs()
        new_groups = {prompt_id(p) for p, _ in pairs} - {
            pid for pid, g in self._prompt_groups.items() if g in collector.open
        }
        if len(collector.open) + len(new_groups) > self.settings.max_open_groups:  # refuse whole, join nothing
            raise TooManyGroups(
                f"{len(new_groups)} new groups would pass --max-open-groups "
                f"({self.settings.max_open_groups}); {len(collector.open)} are open"
            )
        waits = []
        for prompt, response in pairs:
            pid = prompt_id(prompt)
            gid = self._prompt_groups.get(pid)
            if gid is None or gid not in collector.open:
                gid = self._prompt_groups[pid] = f"openrlhf-{pid}-{uuid.uuid4().hex[:12]}"
            rid = f"openrlhf-{uuid.uuid4().hex}"
            member = Member(rid, "get_reward", fingerprint("get_reward", prompt, response), _now(), group_id=gid)
            waits.append((rid, collector.join(gid, self.settings.group_size, prompt, response, member)))
        results = await asyncio.gather(*(asyncio.shield(f) for _, f in waits))
        answers = [res[rid] for (rid, _), res in zip(waits, results)]
        rewards: list[float] = [0.0] * len(answers)
        unscorable: list[float] = [0.0] * len(answers)
        by_set: dict[int, list[int]] = {}
        for i, a in enumerate(answers):
            by_set.setdefault(a["set_id"], []).append(i)
        for idx in by_set.values():  # OpenRLHF needs a number: unscorable gets its set's mean, and is flagged
            filled, flags = fill_unscorable([answers[i]["reward"] for i in idx])
            for i, f, u in zip(idx, filled, flags):
                rewards[i], unscorable[i] = f, u
        return {
            "rewards": rewards,
            "scores": rewards,
            "extra_logs": {"dr_unscorable": unscorable, "dr_set_id": [float(a["set_id"] % 2**52) for a in answers]},
            "rubric_ids": [a["rubric_id"] for a in answers],
            "request_ids": [a["request_id"] for a in answers],
        }


def _error(status: int, code: str, detail: str, field: str | None = None) -> JSONResponse:
    body = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)


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


def create_app(service: Service) -> FastAPI:
    """The FastAPI app over ``service`` (its ``start`` runs in a thread at start-up, its ``stop`` at shutdown)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_app):
        service.loop = asyncio.get_running_loop()
        service.collector_on_loop()
        threading.Thread(target=service.start, name="dr-service-start", daemon=True).start()
        yield
        if service.collector is not None:
            service.collector.close()  # on the loop: waiting members get group_incomplete
        await asyncio.get_running_loop().run_in_executor(None, service.stop)

    app = FastAPI(
        title="dynamicrubric reward service", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    m, settings = service.metrics, service.settings

    @app.middleware("http")
    async def auth_and_count(request: Request, call_next):
        route = request.url.path
        started = time.perf_counter()
        if route not in OPEN_ROUTES and not service.authorized(request.headers.get("authorization")):
            response = _error(401, "unauthorized", "a bearer token is required (Authorization: Bearer ...)")
            response.headers["WWW-Authenticate"] = "Bearer"
        else:
            response = await call_next(request)
        if route in ("/v1/score-set", "/v1/rewards", "/get_reward"):
            m.inc("dr_requests_total", route=route, status=str(response.status_code))
            m.observe("dr_request_seconds", time.perf_counter() - started, route=route)
        return response

    async def handle(request: Request, model, run):
        try:
            body = parse(model, await _read_body(request, settings.max_body_bytes), settings)
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
        _count_unscorable(m, answer)
        return JSONResponse(answer)

    @app.post("/v1/score-set")
    async def score_set(request: Request):
        return await handle(request, ScoreSet, service.score_set)

    @app.post("/v1/rewards")
    async def rewards(request: Request):
        return await handle(request, RewardMember, service.reward)

    @app.post("/get_reward")
    async def get_reward(request: Request):
        return await handle(request, OpenRLHFBatch, service.openrlhf)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if service.failed:
            return _error(503, "not_ready", f"the service failed to start: {service.failed}")
        if not service.ready.is_set():
            return _error(503, "not_ready", "the engines are still loading")
        return {
            "status": "ready",
            "run_id": settings.run_id,
            "generator": service.generator_name,
            "verifier": service.verifier_name,
        }

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(m.render(), media_type="text/plain; version=0.0.4")

    return app


def _count_unscorable(m: Metrics, answer: dict) -> None:
    if "reward" in answer:
        n = answer["reward"] is None
    elif "rewards" in answer:
        n = sum(answer["extra_logs"]["dr_unscorable"])
    else:
        n = sum(s is None for s in answer["scores"])
    if n:
        m.inc("dr_unscorable_total", n)
