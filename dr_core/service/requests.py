"""The reward service's request bodies, checked whole before any work: a bad body raises ``BadRequest`` naming the
field (the app answers 422 and writes nothing). Sizes are bounded by the service's settings, checked before anything
is queued: responses per set (``--max-responses``, also the largest ``group_size``), queries per ``/get_reward``
request (``--max-queries``), characters per prompt or response (``--max-text-chars``), bytes per body
(``--max-body-bytes``, 413); the schema declares the defaults.

- ``ScoreSet`` (``POST /v1/score-set``): ``{prompt, responses[], rubric_rollouts?, seed?, request_id?}``.
- ``RewardMember`` (``POST /v1/rewards``): ``{group_id, group_size, prompt, response, request_id}``, one sample of a
  group the service collects.
- ``OpenRLHFBatch`` (``POST /get_reward``): OpenRLHF's ``--remote_rm_url`` body, ``{"query": [...], "prompts":
  [...], "labels": [...]}``; a query is the prompt followed by the response (``pairs()`` splits them).
- ``NeMoGymVerifyRequest`` (``POST /verify``): NeMo Gym's ``BaseVerifyRequest``, ``{responses_create_params,
  response, ...}``, one rollout of a group the service collects (``prompt_text``, ``response_text``, ``group_key``);
  ``NeMoGymSeedSessionRequest`` (``POST /seed_session``): ``BaseSeedSessionRequest``, any object.
- ``ErrorBody``: the one shape of every error answer, ``{"error": <code>, "detail": <text>, "field": <path>|null}``.

Stage "parse", after the routes (``app``); a parsed body goes on to the ``Service`` (``intake``). Pure: pydantic and
the standard library.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from dr_core.config.service import ServiceSettings
from dr_core.service.errors import BadRequest

#: request ids and group ids: printable, no spaces, at most 200 characters (they are stored and logged)
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@#+=-]{0,199}$"

# The size limits are the service's settings (``dr serve --max-responses``, ``--max-queries``, ``--max-text-chars``),
# checked by ``parse`` against the running service's values (``_limits``: 422 naming the field). The schema declares
# ``dr serve``'s defaults (maxItems, maxLength, maximum), so that a client and the committed contract see them.
_DEFAULTS = {name: f.default for name, f in ServiceSettings.model_fields.items()}
MAX_RESPONSES, MAX_QUERIES, MAX_TEXT = _DEFAULTS["max_responses"], _DEFAULTS["max_queries"], _DEFAULTS["max_text_chars"]

#: a prompt or a response: at most ``--max-text-chars`` characters
Text = Annotated[StrictStr, Field(json_schema_extra={"maxLength": MAX_TEXT})]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class ScoreSet(_Body):
    prompt: Text = Field(min_length=1)
    responses: list[Text] = Field(
        min_length=1,
        json_schema_extra={"maxItems": MAX_RESPONSES},
        description=f"the set: at most --max-responses ({MAX_RESPONSES} by default) responses",
    )
    rubric_rollouts: StrictInt = Field(1, ge=1, le=8)
    seed: StrictInt = Field(0, ge=0, le=2**31 - 1)
    request_id: StrictStr | None = Field(None, pattern=ID_PATTERN)


class RewardMember(_Body):
    group_id: StrictStr = Field(pattern=ID_PATTERN)
    group_size: StrictInt = Field(
        ge=2,
        json_schema_extra={"maximum": MAX_RESPONSES},
        description=f"members of the group: at most --max-responses ({MAX_RESPONSES} by default)",
    )
    prompt: Text = Field(min_length=1)
    response: Text
    request_id: StrictStr = Field(pattern=ID_PATTERN)


class OpenRLHFBatch(BaseModel):
    # OpenRLHF versions add fields (datasources, metadata, token ids): accepted and ignored
    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    query: list[Text] = Field(
        min_length=1,
        json_schema_extra={"maxItems": MAX_QUERIES},
        description=f"prompt + response of each sample: at most --max-queries ({MAX_QUERIES} by default)",
    )
    prompts: list[Text] = Field(
        min_length=1, json_schema_extra={"maxItems": MAX_QUERIES}, description="the prompt of each query"
    )
    labels: list[Any] | None = Field(
        None, json_schema_extra={"maxItems": MAX_QUERIES}, description="ignored; none, or one per query"
    )

    def pairs(self) -> list[tuple[str, str]]:
        """(prompt, response) of every query: the query with its prompt prefix removed (OpenRLHF sends the whole
        templated text; a query that does not start with its prompt is taken whole as the response)."""
        return [(p, q[len(p) :] if q.startswith(p) else q) for q, p in zip(self.query, self.prompts)]


# -- NeMo Gym (nemo-gym 0.4.0, nemo_gym.base_resources_server / nemo_gym.openai_utils) ------------------------------
# The service runs on Python 3.11 and cannot import nemo-gym (3.12+): these mirror the fields of its models that the
# service reads, and accept every other field NeMo Gym sends (extra="allow": the answer echoes them back).

_NG_EXTRA = ConfigDict(extra="allow", frozen=True, hide_input_in_errors=True, populate_by_name=True)
#: the text-bearing content parts of Responses API messages (input and output)
_TEXT_PARTS = ("input_text", "output_text", "text")


class NeMoGymResponsesCreateParams(BaseModel):
    """``NeMoGymResponseCreateParamsNonStreaming``: the policy's request. The service reads ``input`` (a string, or
    a list of Responses API input items) and ``instructions``; ``model``, ``temperature``, ``tools``, ... are kept."""

    model_config = _NG_EXTRA

    input: StrictStr | list[dict[str, Any]]
    instructions: StrictStr | None = None

    @field_validator("input", mode="wrap")
    @classmethod
    def _input(cls, value, handler):
        return _one_of(value, handler, "a string or a list of input items (objects)")


class NeMoGymResponse(BaseModel):
    """``NeMoGymResponse`` (an OpenAI Responses API ``Response``): the rollout. The service reads ``output``, a list
    of output items; ``id``, ``model``, ``usage``, token ids, ... are kept."""

    model_config = _NG_EXTRA

    output: list[dict[str, Any]]


class NeMoGymVerifyRequest(BaseModel):
    """NeMo Gym's ``BaseVerifyRequest`` (``POST /verify``): ``responses_create_params`` and ``response`` required,
    any other field (the dataset row's own, ``_ng_task_index``, ``_ng_rollout_index``, ``prompt_id``, ...) accepted
    and echoed in the answer. Rollouts are grouped by ``group_key`` into sets of ``--group-size``."""

    model_config = _NG_EXTRA

    responses_create_params: NeMoGymResponsesCreateParams
    response: NeMoGymResponse
    task_index: StrictInt | None = Field(None, alias="_ng_task_index")
    rollout_index: StrictInt | None = Field(None, alias="_ng_rollout_index")
    prompt_id: StrictStr | StrictInt | None = None

    @field_validator("prompt_id", mode="wrap")
    @classmethod
    def _prompt_id(cls, value, handler):
        return _one_of(value, handler, "a string, an integer or null")

    def prompt_text(self) -> str:
        """The prompt the evaluator sees: ``instructions`` and the text of every input message. One user message
        alone is its text; otherwise ``role: text`` blocks separated by a blank line. Non-message input items
        (function calls and their outputs, reasoning) and non-text parts (images, files) are left out."""
        p = self.responses_create_params
        if isinstance(p.input, str):
            turns = [("user", p.input)]
        else:
            turns = [
                (str(item.get("role", "user")), _content_text(item.get("content")))
                for item in p.input
                if _is_message(item)
            ]
        turns = [(role, text) for role, text in turns if text.strip()]
        if p.instructions and p.instructions.strip():
            turns.insert(0, ("system", p.instructions))
        if len(turns) == 1 and turns[0][0] == "user":
            return turns[0][1]
        return "\n\n".join(f"{role}: {text}" for role, text in turns)

    def response_text(self) -> str:
        """The rollout's answer: the ``output_text`` parts of the assistant messages in ``response.output``, in
        order (reasoning, function calls and refusals left out, as NeMo Gym's genrm_compare does). An output
        without any is the empty answer, and is scored as such."""
        return "".join(
            _content_text(item.get("content"), parts=("output_text",))
            for item in self.response.output
            if _is_message(item) and item.get("role", "assistant") == "assistant"
        )

    def group_key(self, pid: str) -> str:
        """Which rollouts form one set (NeMo Gym's genrm_compare keys its cohorts the same way): ``pid``, the prompt's
        stored id (``ledger.prompt_id`` of ``prompt_text()``), scoped by ``_ng_task_index`` when NeMo Gym sent it
        (rollout collection numbers its tasks), else by the row's ``prompt_id`` when it has one."""
        if self.task_index is not None:
            return f"t{self.task_index}-{pid}"
        if self.prompt_id is not None:
            return f"i{hashlib.sha256(str(self.prompt_id).encode()).hexdigest()[:12]}-{pid}"
        return pid

    def echo(self) -> dict:
        """The request as NeMo Gym sent it (extra fields included, aliases as sent), for the answer."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class NeMoGymSeedSessionRequest(BaseModel):
    """NeMo Gym's ``BaseSeedSessionRequest`` (``POST /seed_session``): no field of its own; NeMo Gym's agents send
    the whole run request (accepted and ignored)."""

    model_config = ConfigDict(extra="allow", frozen=True, hide_input_in_errors=True)


def _one_of(value, handler, expected: str):
    """A union field's error at the field itself (pydantic names each member: ``input.str``, ...)."""
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(f"must be {expected}") from None


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type", "message") == "message" and "content" in item


def _content_text(content: Any, parts: tuple[str, ...] = _TEXT_PARTS) -> str:
    """A message's text: a string, or the concatenated text of its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        c["text"] for c in content if isinstance(c, dict) and c.get("type") in parts and isinstance(c.get("text"), str)
    )


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


#: The longest integer literal a body may hold (digits): every integer field is a count or a seed.
MAX_INT_DIGITS = 100


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadRequest("body", f"the number {text[:40]} is beyond a float")
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BadRequest("body", f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _constant(name: str):
    raise BadRequest("body", f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def loads(raw: bytes) -> Any:
    """A body's JSON, or ``BadRequest`` (body) naming why not: not UTF-8, not JSON, nested deeper than the parser
    takes, a number beyond a float, NaN or Infinity, an integer of more than ``MAX_INT_DIGITS`` digits, or a string
    with a lone surrogate (not encodable as UTF-8: nothing could store it)."""
    try:
        text = raw.decode("utf-8-sig")  # RFC 8259: UTF-8 between systems (json.loads would guess UTF-16 and -32)
    except UnicodeDecodeError as exc:
        raise BadRequest("body", f"not UTF-8 (byte {exc.start}): JSON bodies are UTF-8 (RFC 8259)") from None
    try:
        data = json.loads(text, parse_float=_finite, parse_int=_short_int, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest("body", f"not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise BadRequest("body", "nested deeper than the JSON parser takes") from None
    _check_strings(data)
    return data


def _check_strings(data: Any) -> None:
    """Every key and string value encodable as UTF-8 (``BadRequest`` naming the first that is not), walked without
    recursion: the parser has already taken the body's depth."""
    stack: list[tuple[str, Any]] = [("body", data)]
    while stack:
        where, value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            path = f"{where}.{key}" if where != "body" else str(key)
            for text in (key, item):
                if isinstance(text, str):
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        raise BadRequest(path, "holds a lone surrogate (an unpaired \\ud800-\\udfff escape)") from None
            stack.append((path, item))


def parse(model: type[BaseModel], raw: bytes, settings: ServiceSettings):
    """The body as ``model``, with the service's limits applied; ``BadRequest`` for anything else."""
    if len(raw) > settings.max_body_bytes:
        raise BadRequest("body", f"{len(raw)} bytes; the limit is {settings.max_body_bytes} (--max-body-bytes)", 413)
    data = loads(raw)
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
            raise BadRequest(
                "responses", f"{len(body.responses)} responses; the limit is {settings.max_responses} (--max-responses)"
            )
        _text("prompt", body.prompt, settings)
        for i, r in enumerate(body.responses):
            _text(f"responses.{i}", r, settings)
    elif isinstance(body, RewardMember):
        if body.group_size > settings.max_responses:
            raise BadRequest(
                "group_size", f"{body.group_size}; the limit is {settings.max_responses} (--max-responses)"
            )
        _text("prompt", body.prompt, settings)
        _text("response", body.response, settings)
    elif isinstance(body, NeMoGymVerifyRequest):
        prompt = body.prompt_text()
        if not prompt.strip():
            raise BadRequest("responses_create_params.input", "no text in the input messages: nothing to score against")
        _text("responses_create_params.input", prompt, settings)
        _text("response.output", body.response_text(), settings)
    elif isinstance(body, OpenRLHFBatch):
        if len(body.query) > settings.max_queries:
            raise BadRequest("query", f"{len(body.query)} queries; the limit is {settings.max_queries} (--max-queries)")
        if len(body.prompts) != len(body.query):
            raise BadRequest("prompts", f"{len(body.prompts)} prompts for {len(body.query)} queries; one per query")
        if body.labels is not None and len(body.labels) not in (0, len(body.query)):
            raise BadRequest("labels", f"{len(body.labels)} labels for {len(body.query)} queries")
        for i, (p, q) in enumerate(zip(body.prompts, body.query)):
            if not p:
                raise BadRequest(f"prompts.{i}", "empty prompt")
            _text(f"prompts.{i}", p, settings)
            _text(f"query.{i}", q, settings)
