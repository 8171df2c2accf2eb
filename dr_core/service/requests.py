"""The reward service's request bodies, checked whole before any work: a bad body raises ``BadRequest`` naming the
field (the app answers 422 and writes nothing).

- ``ScoreSet`` (``POST /v1/score-set``): ``{prompt, responses[], rubric_rollouts?, seed?, request_id?}``.
- ``RewardMember`` (``POST /v1/rewards``): ``{group_id, group_size, prompt, response, request_id}``, one sample of a
  group the service collects.
- ``OpenRLHFBatch`` (``POST /get_reward``): OpenRLHF's ``--remote_rm_url`` body, ``{"query": [...], "prompts":
  [...], "labels": [...]}``; a query is the prompt followed by the response (``pairs()`` splits them).
- ``ErrorBody``: the one shape of every error answer, ``{"error": <code>, "detail": <text>, "field": <path>|null}``.

Stage "parse", after the routes (``app``); a parsed body goes on to the ``Service`` (``intake``). Pure: pydantic and
the standard library.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from dr_core.config.service import ServiceSettings
from dr_core.service.errors import BadRequest

#: request ids and group ids: printable, no spaces, at most 200 characters (they are stored and logged)
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@#+=-]{0,199}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class ScoreSet(_Body):
    prompt: StrictStr = Field(min_length=1)
    responses: list[StrictStr] = Field(min_length=1)
    rubric_rollouts: StrictInt = Field(1, ge=1, le=8)
    seed: StrictInt = Field(0, ge=0, le=2**31 - 1)
    request_id: StrictStr | None = Field(None, pattern=ID_PATTERN)


class RewardMember(_Body):
    group_id: StrictStr = Field(pattern=ID_PATTERN)
    group_size: StrictInt = Field(ge=2)
    prompt: StrictStr = Field(min_length=1)
    response: StrictStr
    request_id: StrictStr = Field(pattern=ID_PATTERN)


class OpenRLHFBatch(BaseModel):
    # OpenRLHF versions add fields (datasources, metadata, token ids): accepted and ignored
    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    query: list[StrictStr] = Field(min_length=1)
    prompts: list[StrictStr] = Field(min_length=1)
    labels: list[Any] | None = None

    def pairs(self) -> list[tuple[str, str]]:
        """(prompt, response) of every query: the query with its prompt prefix removed (OpenRLHF sends the whole
        templated text; a query that does not start with its prompt is taken whole as the response)."""
        return [(p, q[len(p) :] if q.startswith(p) else q) for q, p in zip(self.query, self.prompts)]


class ErrorBody(BaseModel):
    """Every error answer of the service, whatever its status (401, 404, 405, 413, 422, 500, 503, 504)."""

    error: str = Field(description="the error code: unauthorized, not_found, invalid_request, busy, ...")
    detail: str = Field(description="what went wrong, for a person")
    field: str | None = Field(description="the dotted path of the offending field (body: the body as a whole), or null")


def _field_error(exc: ValidationError) -> BadRequest:
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    msg = err["msg"]
    if err["type"] == "string_pattern_mismatch":
        msg = "must be 1-200 printable characters (letters, digits, ._:/@#+=-), starting with a letter or digit"
    return BadRequest(where, msg)


def parse(model: type[BaseModel], raw: bytes, settings: ServiceSettings):
    """The body as ``model``, with the service's limits applied; ``BadRequest`` for anything else."""
    if len(raw) > settings.max_body_bytes:
        raise BadRequest("body", f"{len(raw)} bytes; the limit is {settings.max_body_bytes} (--max-body-bytes)", 413)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise BadRequest("body", f"not valid JSON{where}") from None
    if not isinstance(data, dict):
        raise BadRequest("body", f"expected a JSON object, got {type(data).__name__}")
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc) from None
    _limits(body, settings)
    return body


def _text(field: str, value: str, settings: ServiceSettings) -> None:
    if len(value) > settings.max_text_chars:
        raise BadRequest(field, f"{len(value)} characters; the limit is {settings.max_text_chars} (--max-text-chars)")


def _limits(body, settings: ServiceSettings) -> None:
    if isinstance(body, ScoreSet):
        if len(body.responses) > settings.max_responses:
            raise BadRequest("responses", f"{len(body.responses)} responses; the limit is {settings.max_responses}")
        _text("prompt", body.prompt, settings)
        for i, r in enumerate(body.responses):
            _text(f"responses.{i}", r, settings)
    elif isinstance(body, RewardMember):
        if body.group_size > settings.max_responses:
            raise BadRequest("group_size", f"{body.group_size}; the limit is {settings.max_responses}")
        _text("prompt", body.prompt, settings)
        _text("response", body.response, settings)
    elif isinstance(body, OpenRLHFBatch):
        if len(body.prompts) != len(body.query):
            raise BadRequest("prompts", f"{len(body.prompts)} prompts for {len(body.query)} queries; one per query")
        if body.labels is not None and len(body.labels) not in (0, len(body.query)):
            raise BadRequest("labels", f"{len(body.labels)} labels for {len(body.query)} queries")
        for i, (p, q) in enumerate(zip(body.prompts, body.query)):
            if not p:
                raise BadRequest(f"prompts.{i}", "empty prompt")
            _text(f"prompts.{i}", p, settings)
            _text(f"query.{i}", q, settings)
