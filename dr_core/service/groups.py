"""Stage "queue", first half: per-sample requests held until their group is complete (``/v1/rewards``;
``/get_reward`` groups by prompt). The intake joins members; ``submit_group`` puts a complete group on the queue
(``batcher``) as one set.

RL trainers send one sample per request; DynamicRubric scores a response *set*. (``/verify``, NeMo Gym's, groups by
the rollout's prompt and task, ``--group-size`` each.) A ``GroupCollector`` keeps each
open group's members (by request id) and, when the last one arrives, hands the whole set to ``on_complete`` once.
Every member waits on the group's future: all of them get the set's answers, or all get the same error.

- A member sent again with the same request id joins nothing new: it waits on the same future (answered once).
- A member whose group_size or prompt disagrees with its group's, or that reuses a request id with another
  response, or that names a group already scored, raises ``BadRequest`` (422) and changes nothing.
- A group still incomplete ``timeout_s`` after its first member fails with ``GroupIncomplete`` (504): never a
  silent 0. Its members are forgotten, so a retry opens the group afresh.

Runs on the event loop (asyncio, no locks): ``join`` must be called from the loop thread.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Callable

from dr_core.service.errors import BadRequest, GroupIncomplete, TooManyGroups, Unavailable
from dr_core.service.scoring import Member, SetJob

if TYPE_CHECKING:
    from dr_core.service.metrics import Metrics


@dataclass
class OpenGroup:
    group_id: str
    size: int
    prompt: str
    future: asyncio.Future
    members: dict[str, tuple[str, Member]] = field(default_factory=dict)  # request id -> (response, member)
    timer: asyncio.TimerHandle | None = None


class GroupCollector:
    """``on_complete(group)`` is called once per complete group and must resolve or fail ``group.future``.
    ``scored(group_id)`` says whether a group id was already scored (the ledger)."""

    def __init__(
        self,
        on_complete: Callable[[OpenGroup], None],
        *,
        timeout_s: float,
        max_open: int,
        scored: Callable[[str], bool] = lambda _g: False,
        on_timeout: Callable[[OpenGroup], None] = lambda _g: None,
    ):
        self.on_complete, self.timeout_s, self.max_open = on_complete, timeout_s, max_open
        self.scored, self.on_timeout = scored, on_timeout
        self.open: dict[str, OpenGroup] = {}
        self._closing: dict[str, OpenGroup] = {}  # complete, being scored: duplicates still find their future
        self._group_of: dict[str, str] = {}  # request id -> its group, open or being scored

    def join(self, group_id: str, size: int, prompt: str, response: str, member: Member) -> asyncio.Future:
        """Add ``member`` (its ``response``) to its group; the future gives the set's answers."""
        for pool in (self.open, self._closing):
            g = pool.get(group_id)
            if g is not None and member.request_id in g.members:
                if g.members[member.request_id][1].fingerprint != member.fingerprint:
                    raise BadRequest(
                        "request_id",
                        f"{member.request_id!r} was already sent in group {group_id!r} with a different body",
                    )
                return g.future
        if group_id in self._closing or self.scored(group_id):
            raise BadRequest(
                "group_id", f"group {group_id!r} is already complete and scored; a new group needs a new group_id"
            )
        g = self.open.get(group_id)
        if g is None:
            if len(self.open) >= self.max_open:
                raise TooManyGroups(f"{self.max_open} groups are already open (--max-open-groups)")
            loop = asyncio.get_running_loop()
            g = OpenGroup(group_id, size, prompt, loop.create_future())
            g.timer = loop.call_later(self.timeout_s, self._expire, group_id)
            self.open[group_id] = g
        else:
            if g.size != size:
                raise BadRequest("group_size", f"group {group_id!r} was opened with group_size {g.size}, not {size}")
            if g.prompt != prompt:
                raise BadRequest("prompt", f"group {group_id!r} was opened with a different prompt")
        g.members[member.request_id] = (response, member)
        self._group_of[member.request_id] = group_id
        if len(g.members) == g.size:
            g.timer.cancel()
            del self.open[group_id]
            self._closing[group_id] = g
            g.future.add_done_callback(lambda _f, gid=group_id: self._forget(self._closing.pop(gid, None)))
            self.on_complete(g)
        return g.future

    def group_of(self, request_id: str) -> str | None:
        """The group, open or being scored, that holds ``request_id`` (None: none does; a scored one is in the
        ledger)."""
        return self._group_of.get(request_id)

    def _forget(self, g: OpenGroup | None) -> None:
        for rid in g.members if g is not None else ():
            if self._group_of.get(rid) == g.group_id:
                del self._group_of[rid]

    def holds(self, group_id: str, request_id: str) -> bool:
        """Whether ``request_id`` is a member of ``group_id``, open or being scored (a retry waits on its future)."""
        return any(request_id in pool[group_id].members for pool in (self.open, self._closing) if group_id in pool)

    def _expire(self, group_id: str) -> None:
        g = self.open.pop(group_id, None)
        if g is None or g.future.done():
            return
        self._forget(g)
        g.future.set_exception(GroupIncomplete(group_id, len(g.members), g.size, self.timeout_s))
        g.future.exception()  # retrieved: no "exception never retrieved" warning when nobody waits any more
        self.on_timeout(g)

    def close(self) -> None:
        for g in list(self.open.values()):
            if g.timer:
                g.timer.cancel()
            if not g.future.done():
                g.future.set_exception(GroupIncomplete(g.group_id, len(g.members), g.size, 0))
                g.future.exception()
        self.open.clear()
        self._group_of.clear()


def submit_group(g: OpenGroup, *, submit: Callable[[SetJob], Future], rollouts: int) -> None:
    """A complete group on to the queue as one set (``submit``: ``Batcher.submit``); the set's answers, or its error,
    resolve ``g.future`` on the event loop. The collector's ``on_complete``, bound with ``functools.partial``."""
    responses, members = [], []
    for k, (resp, m) in enumerate(g.members.values()):
        responses.append(resp)
        members.append(replace(m, index=k))
    job = SetJob(f"group:{g.group_id}", g.prompt, tuple(responses), rollouts, 0, members)
    try:
        answered = submit(job)
    except Unavailable as exc:
        g.future.set_exception(exc)
        g.future.exception()
        return
    # resolved on the worker thread: the group's future is settled on the loop's
    answered.add_done_callback(partial(_settle_on, asyncio.get_running_loop(), g.future))


def _settle_on(loop: asyncio.AbstractEventLoop, target: asyncio.Future, done: Future) -> None:
    loop.call_soon_threadsafe(_settle, target, done)


def _settle(target: asyncio.Future, done: Future) -> None:
    if target.done():
        return
    if done.exception() is not None:
        target.set_exception(done.exception())
        target.exception()
    else:
        target.set_result(done.result())


def count_timeout(metrics: Metrics, _g: OpenGroup) -> None:
    """The collector's ``on_timeout`` in the service (bound with ``functools.partial``)."""
    metrics.inc("dr_group_timeouts_total")
