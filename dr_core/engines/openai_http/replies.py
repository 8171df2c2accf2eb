"""Reading the replies of an OpenAI-compatible server (``OpenAIHTTPEngine``): a chat completion, a model listing.

A 200 reply that is not what was asked for (not JSON, not an object, no ``choices``, a choice without ``index`` or
``message``, a ``GET /models`` without ``data``, ...) is an ``EngineError`` with the URL, what was wrong and the first
200 characters of the body; so is any status other than 200 that reaches here (429 and 5xx were retried before:
dr_core/engines/openai_http/transport.py). A 400 that says the prompt is too long is not an error: the engine gives a
``prompt_too_long`` completion. ``chat(logprobs=N)`` reads ``choices[i].logprobs.content[k].top_logprobs`` plus the
sampled token (a sample the server returned no logprobs for gets an empty tuple of positions); per-sample completion
token counts come from the ``token_ids`` that ``"return_token_ids": true`` asks for.

Each function takes ``error``: what turns a message into the ``EngineError`` raised (the engine's, which removes
its secrets from the message).
"""

from __future__ import annotations

from typing import Callable

import httpx

from dr_core.engines.base import Completion, EngineError, merge_logprobs

_TOO_LONG_HINTS = ("maximum context length", "max_model_len", "too long", "context length")
#: Characters of a reply body quoted in an error.
_EXCERPT = 200

ErrorOf = Callable[[str], EngineError]


def excerpt(text: str) -> str:
    """The start of a reply body, on one line."""
    cut = text[:_EXCERPT].replace("\r", "\\r").replace("\n", "\\n")
    return (cut + "...") if len(text) > _EXCERPT else cut or "(empty body)"


def says_prompt_too_long(resp: httpx.Response) -> bool:
    """A 400 whose body says the prompt does not fit the server's context."""
    return resp.status_code == 400 and any(h in resp.text.lower() for h in _TOO_LONG_HINTS)


def top_logprobs(choice: dict) -> tuple[dict[str, float], ...]:
    """{token text: logprob} per generated position of one OpenAI chat choice (empty when absent)."""
    content = (choice.get("logprobs") or {}).get("content") or []
    positions = []
    for pos in content:
        pairs = [(t["token"], t["logprob"]) for t in pos.get("top_logprobs") or []]
        if not any(t == pos["token"] for t, _ in pairs):  # the sampled token, as vLLM's own output includes it,
            pairs.append((pos["token"], pos["logprob"]))  # once: it is usually among the top ones already
        positions.append(merge_logprobs(pairs) if pairs else {})
    return tuple(positions)


def reply_object(resp: httpx.Response, url: str, error: ErrorOf) -> dict:
    """The reply's JSON object; EngineError (URL, what is wrong, the body's start) for anything else."""
    if resp.status_code != 200:
        raise error(f"{url}: HTTP {resp.status_code}: {excerpt(resp.text)} (not retried)")
    try:
        data = resp.json()
    except ValueError:  # JSONDecodeError, or a body that is not text
        raise error(f"{url}: reply is not JSON: {excerpt(resp.text)}") from None
    if not isinstance(data, dict):
        raise error(f"{url}: reply is a JSON {type(data).__name__}, not an object: {excerpt(resp.text)}")
    return data


def model_names(resp: httpx.Response, base: str, error: ErrorOf) -> list[str]:
    """The model names one endpoint's ``GET /models`` lists (``base``: the endpoint's URL)."""
    data = reply_object(resp, f"{base}/models", error)
    listed = data.get("data")
    if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in listed):
        raise error(
            f"{base}/models: cannot list served models: expected "
            "{'data': [{'id': ...}, ...]}, got " + excerpt(resp.text)
        )
    return [m["id"] for m in listed]


def completion(data: dict, text: str, url: str, n: int, logprobs: int | None, error: ErrorOf) -> Completion:
    """A Completion from one chat reply; EngineError naming what is missing for a reply of another shape."""

    def bad(what: str) -> EngineError:
        return error(f"{url}: malformed reply: {what}: {excerpt(text)}")

    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise bad("no 'choices' list" if not isinstance(choices, list) else "empty 'choices'")
    for i, c in enumerate(choices):
        if not isinstance(c, dict):
            raise bad(f"choices[{i}] is not an object")
        if isinstance(c.get("index"), bool) or not isinstance(c.get("index"), int):
            raise bad(f"choices[{i}] has no integer 'index'")
        if not isinstance(c.get("message"), dict):
            raise bad(f"choices[{i}] has no 'message' object")
        if not isinstance(c["message"].get("content"), (str, type(None))):
            raise bad(f"choices[{i}].message.content is not a string")
    samples = sorted(choices, key=lambda c: c["index"])
    if [c["index"] for c in samples] != list(range(n)):
        raise bad(f"asked for n={n} samples, got choices with index {[c['index'] for c in samples]}")
    try:
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return Completion(
            texts=tuple(c["message"].get("content") or "" for c in samples),
            finish_reasons=tuple(str(c.get("finish_reason")) for c in samples),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=tuple(len(c.get("token_ids") or []) for c in samples),
            cached_tokens=details.get("cached_tokens"),
            top_logprobs=tuple(top_logprobs(c) for c in samples) if logprobs is not None else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise bad(f"{type(exc).__name__} {exc}") from None
