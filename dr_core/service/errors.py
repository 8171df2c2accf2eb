"""What a request can run into on its way through the service: one exception each, raised by any stage; the routes
(``app._handle``) turn them into the JSON error answers, in one place.

- ``BadRequest``: the body or one of its fields is refused: 422 ``invalid_request`` naming the field (413
  ``body_too_large`` for the body's size); nothing is written.
- ``TooManyGroups``: ``--max-open-groups`` groups are open already: 503 ``busy``.
- ``GroupIncomplete``: a group's last member did not arrive in time: 504 ``group_incomplete`` (``BatchIncomplete``
  for a ``/get_reward`` batch, naming how many of its queries were scored and kept).
- ``Unavailable``: not ready, shutting down, the queue full, or the engines or the store failed on a batch: 503, its
  ``reason`` the error code.

Shared by every stage, like ``settings`` and ``metrics``: the standard library and ``dr_core.errors`` only.
"""

from __future__ import annotations

from dr_core.errors import DRError


class BadRequest(DRError, ValueError):
    """A request the service refuses (422): ``field`` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status = field, message, status


class TooManyGroups(DRError, RuntimeError):
    pass


class GroupIncomplete(DRError, RuntimeError):
    """A group whose last member did not arrive in time (504)."""

    def __init__(self, group_id: str, have: int, size: int, timeout_s: float):
        super().__init__(
            f"group {group_id!r} has {have} of {size} members after {timeout_s:g} s "
            "(--group-timeout); no reward was computed for any of them"
        )
        self.group_id, self.have, self.size = group_id, have, size


class BatchIncomplete(GroupIncomplete):
    """A ``/get_reward`` batch of which some groups timed out (504): the groups that were scored are kept, and a retry
    of the same body replays them (``intake.Service.openrlhf``)."""

    def __init__(self, first: GroupIncomplete, scored: int, total: int):
        RuntimeError.__init__(
            self,
            f"{total - scored} of {total} queries are in groups that did not complete ({first}); the other {scored} "
            "were scored and kept: send the same body again and they are replayed, not scored again",
        )
        self.group_id, self.have, self.size = first.group_id, first.have, first.size


class Unavailable(DRError, RuntimeError):
    """The engines or the store failed on a batch, or the service is not ready or too busy (503)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
