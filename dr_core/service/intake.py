"""Stage "intake", between parse and queue: the ``Service`` behind the routes. Per route, a parsed body becomes an
answer replayed from the ledger (a request id answered before), or a set on the queue (``batcher``), or a member of
a group (``groups``); the handler then waits for the answers the worker hands back.

``Service`` also owns the stages' life cycle: ``start()`` (a background thread: the process answers /health
meanwhile) opens the ledger, then the engines, then the worker (``Batcher``: ``Scorer.score`` ->
``answer_batch`` -> ``Ledger.commit``) and the group collector; ``stop()`` closes the worker, then the engines.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import uuid
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Callable

from dr_core.config.service import ServiceSettings
from dr_core.engines.base import Engine
from dr_core.evaluator.verdict_cache import VerdictCache
from dr_core.service.answers import answer_batch, openrlhf_answer, verify_answer
from dr_core.service.batcher import Batcher, count_batch
from dr_core.service.errors import BadRequest, BatchIncomplete, GroupIncomplete, TooManyGroups, Unavailable
from dr_core.service.groups import GroupCollector, count_timeout, submit_group
from dr_core.service.ledger import Ledger, prompt_id
from dr_core.service.memory import Trimmer, resident_bytes
from dr_core.service.metrics import Metrics
from dr_core.service.scoring import Member, Scorer, SetJob
from dr_core.store.artifacts import Store

if TYPE_CHECKING:
    from dr_core.service.requests import (
        NeMoGymSeedSessionRequest,
        NeMoGymVerifyRequest,
        OpenRLHFBatch,
        RewardMember,
        ScoreSet,
    )

Log = Callable[[str], None]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def fingerprint(*parts) -> str:
    """A short SHA-256 over a request's content: the same request id sent again must carry the same content."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:32]


class Service:
    """Everything behind the routes; ``open_engines`` returns (generator, verifier)."""

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
        self.ledger = Ledger(
            store, settings.run_id, log, metrics=self.metrics, recent_answers=settings.answers_in_memory
        )
        self.batcher: Batcher | None = None
        self.collector: GroupCollector | None = None
        self.generator_name: str | None = None
        self.verifier_name: str | None = None
        self.failed: str | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.on_failure: Callable[[], None] | None = None  # the server stops itself (exit 2)
        self._inflight: dict[str, tuple[str, asyncio.Future]] = {}
        self._prompt_groups: dict[str, str] = {}
        self._verify_groups: dict[str, str] = {}  # /verify: group key -> the group id collecting it now
        self.metrics.gauge("dr_queue_depth", self.queue_depth)
        self.metrics.gauge("dr_open_groups", self.open_groups)
        self.metrics.gauge("dr_resident_bytes", resident_bytes)
        self.trimmer = Trimmer(settings.memory_trim_interval_s, log) if settings.memory_trim_interval_s else None
        if self.trimmer is not None and self.trimmer.available:
            t = self.trimmer
            self.metrics.gauge("dr_memory_trims_total", lambda: t.trims)
            self.metrics.gauge("dr_memory_trimmed_bytes_total", lambda: t.released_bytes)
            self.metrics.gauge("dr_resident_after_trim_bytes", lambda: t.last.get("rss_after", 0))

    # -- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.ledger.open()
            generator, verifier = self._open_engines()
            if self.settings.batching == "continuous":
                generator, verifier = self._concurrent(generator, verifier)
            self.batcher = self._worker(generator, verifier).start()
            if self.trimmer is not None:
                self.trimmer.start()
            self.collector = self._collector(self.batcher)
            self.generator_name, self.verifier_name = generator.model_name, verifier.model_name
            self.ready.set()
            self.log(
                f"ready: generator {generator.model_name}, verifier {verifier.model_name}; "
                f"{len(self.ledger)} earlier answers in run {self.settings.run_id!r}"
            )
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            self.log(f"error: the service could not start: {self.failed}")
            if self.on_failure is not None:
                self.on_failure()

    def _concurrent(self, generator: Engine, verifier: Engine) -> tuple[Engine, Engine]:
        """The engines made safe to call from every worker at once (``dr_core.engines.continuous``); closed (detached
        from the continuous driver) before the pool closes the engines themselves."""
        from dr_core.engines.continuous import Driver, make_concurrent

        # one wrapper for a shared engine, one driver for both; the verifier first: a set being verified finishes
        # before more rubrics start
        driver = Driver()
        wrapped = {id(e): make_concurrent(e, priority, driver) for e, priority in ((verifier, 1), (generator, 0))}
        inner_close = self._close_engines

        def close() -> None:
            for e in {id(generator): generator, id(verifier): verifier}.values():
                if wrapped[id(e)] is not e:
                    wrapped[id(e)].close()
            inner_close()

        self._close_engines = close
        return wrapped[id(generator)], wrapped[id(verifier)]

    def _worker(self, generator: Engine, verifier: Engine) -> Batcher:
        """The queue and its worker, over the later stages: score, answer, commit."""
        s = self.settings
        cache = VerdictCache(s.verdict_cache_entries) if s.verdict_cache_entries else None
        if cache is not None:
            self.metrics.gauge("dr_verdict_cache_hits_total", lambda: cache.hits)
            self.metrics.gauge("dr_verdict_cache_misses_total", lambda: cache.misses)
            self.metrics.gauge("dr_verdict_cache_entries", cache.__len__)
        scorer = Scorer(
            generator,
            verifier,
            temperature=s.rubric_temperature,
            max_tokens=s.rubric_max_tokens,
            metrics=self.metrics,
            cache=cache,
        )
        return Batcher(
            scorer.score,
            partial(answer_batch, s.run_id),
            partial(self.ledger.commit, generator=generator.model_name, verifier=verifier.model_name),
            mode=s.batching,
            max_batch_sets=s.max_batch_sets,
            batch_wait_s=s.batch_wait_s,
            max_queue_sets=s.max_queue_sets,
            on_batch=partial(count_batch, self.metrics, self.log),
        )

    def _collector(self, batcher: Batcher) -> GroupCollector:
        """The group collector: a complete group goes on ``batcher``'s queue as one set."""
        return GroupCollector(
            partial(submit_group, submit=batcher.submit, rollouts=self.settings.rubric_rollouts),
            timeout_s=self.settings.group_timeout_s,
            max_open=self.settings.max_open_groups,
            scored=self.ledger.group_scored,
            on_timeout=partial(count_timeout, self.metrics),
        )

    def stop(self) -> None:
        if self.trimmer is not None:
            self.trimmer.close()
        if self.batcher is not None:
            self.batcher.close()
        self._close_engines()
        self.stopped.set()

    def close_groups(self) -> None:
        """On the event loop, at shutdown: members still waiting get ``group_incomplete``."""
        if self.collector is not None:
            self.collector.close()

    def queue_depth(self) -> int:
        return self.batcher.depth() if self.batcher else 0

    def open_groups(self) -> int:
        return len(self.collector.open) if self.collector else 0

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), self._token)

    def _require_ready(self) -> None:
        if self.failed:
            raise Unavailable("not_ready", f"the service failed to start: {self.failed}")
        if not self.ready.is_set():
            raise Unavailable("not_ready", "the engines are still loading; retry when GET /ready answers 200")

    # -- the routes' handlers ---------------------------------------------------------------------------------
    def _replay(self, request_id: str, fp: str) -> dict | None:
        done = self.ledger.get(request_id)
        if done is None:
            return None
        if done.fingerprint != fp:
            raise BadRequest("request_id", f"{request_id!r} was answered before for a different body")
        return done.answer

    async def _submit(self, job: SetJob) -> dict:
        return await asyncio.wrap_future(self.batcher.submit(job))

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
        fut = self.collector.join(body.group_id, body.group_size, body.prompt, body.response, member)
        answers = await asyncio.shield(fut)
        return answers[body.request_id]

    async def openrlhf(self, body: OpenRLHFBatch) -> dict:
        """OpenRLHF's ``/get_reward``: each query joins the open group of its prompt (``--group-size`` each). Retry
        rule: a query's request id is the batch body's hash and the query's position, so the same body sent again
        (after a 504, a client timeout or a restart) replays every query whose group was scored, from the ledger,
        waits on the groups still open or being scored, and joins only the rest: nothing is scored twice."""
        self._require_ready()
        collector = self.collector
        if len(self._prompt_groups) > 4 * self.settings.max_open_groups:  # forget prompts whose group has closed
            self._prompt_groups = {p: g for p, g in self._prompt_groups.items() if g in collector.open}
        pairs = body.pairs()
        batch = fingerprint("get_reward-batch", pairs)[:24]
        members = [
            Member(f"openrlhf-{batch}-{i}", "get_reward", fingerprint("get_reward", p, r), _now())
            for i, (p, r) in enumerate(pairs)
        ]
        answers = {i: a for i, m in enumerate(members) if (a := self._replay(m.request_id, m.fingerprint)) is not None}
        todo = [i for i in range(len(pairs)) if i not in answers]
        new_groups = {prompt_id(pairs[i][0]) for i in todo if collector.group_of(members[i].request_id) is None} - {
            pid for pid, g in self._prompt_groups.items() if g in collector.open
        }
        if len(collector.open) + len(new_groups) > self.settings.max_open_groups:  # refuse whole, join nothing
            raise TooManyGroups(
                f"{len(new_groups)} new groups would pass --max-open-groups "
                f"({self.settings.max_open_groups}); {len(collector.open)} are open"
            )
        waits = [self._join_prompt_group(pairs[i], members[i]) for i in todo]
        results = await asyncio.gather(*(asyncio.shield(f) for f in waits), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for i, res in zip(todo, results):
            if not isinstance(res, BaseException):
                answers[i] = res[members[i].request_id]
        if failed:
            first = next((e for e in failed if not isinstance(e, GroupIncomplete)), failed[0])
            raise BatchIncomplete(first, len(answers), len(pairs)) if isinstance(first, GroupIncomplete) else first
        return openrlhf_answer([answers[i] for i in range(len(pairs))])

    def _join_prompt_group(self, pair: tuple[str, str], member: Member) -> asyncio.Future:
        """``member`` in the group that holds it already, else in its prompt's open group, else in a new one."""
        prompt, response = pair
        gid = self.collector.group_of(member.request_id)
        if gid is None:
            pid = prompt_id(prompt)
            gid = self._prompt_groups.get(pid)
            if gid is None or gid not in self.collector.open:
                gid = self._prompt_groups[pid] = f"openrlhf-{pid}-{uuid.uuid4().hex[:12]}"
        member = replace(member, group_id=gid)
        return self.collector.join(gid, self.settings.group_size, prompt, response, member)

    async def nemo_gym_verify(self, body: NeMoGymVerifyRequest) -> dict:
        """NeMo Gym's ``/verify``: one rollout, held until ``--group-size`` rollouts of its group key have arrived
        (``NeMoGymVerifyRequest.group_key``), then scored with them as one set. A group key names one group at a
        time (``nemo-gym-<key>-<random>``): once that group is complete the next rollout of the key opens a new one,
        as NeMo Gym sends the same prompt again every epoch. A request sent again with the same body while its
        group is open or being scored waits on the same answer (its request id is a hash of group id and body)."""
        self._require_ready()
        collector = self.collector
        if len(self._verify_groups) > 4 * self.settings.max_open_groups:  # forget keys whose group has closed
            self._verify_groups = {k: g for k, g in self._verify_groups.items() if g in collector.open}
        key, fp = body.group_key(prompt_id(body.prompt_text())), fingerprint("verify", body.echo())
        gid = self._verify_groups.get(key)
        if gid is None or not (gid in collector.open or collector.holds(gid, f"{gid}-{fp[:16]}")):
            gid = self._verify_groups[key] = f"nemo-gym-{key}-{uuid.uuid4().hex[:12]}"
        rid = f"{gid}-{fp[:16]}"
        member = Member(rid, "verify", fp, _now(), group_id=gid)
        fut = collector.join(gid, self.settings.group_size, body.prompt_text(), body.response_text(), member)
        answers = await asyncio.shield(fut)
        return verify_answer(body.echo(), answers, rid)

    async def nemo_gym_seed_session(self, _body: NeMoGymSeedSessionRequest) -> dict:
        """NeMo Gym's ``/seed_session``: nothing to seed (``BaseSeedSessionResponse`` is empty) once the engines
        are ready."""
        self._require_ready()
        return {}
