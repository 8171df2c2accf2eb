"""The tests' one fake engine (``FakeEngine``: scripted replies by conversation content, no model) and reading a
verifier request back (dr_core.rubric.prompts.verifier_messages)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

from dr_core.engines.base import Completion, Engine, SamplingParams, merge_logprobs


def verifier_check(user: str) -> tuple[str, str]:
    """(criterion, response) of a verifier request's user message, in either prompt style ("system":
    VERIFIER_PREFIX_TEMPLATE then VERIFIER_CRITERION_TEMPLATE; "plain": the VERIFIER_PLAIN_* templates)."""
    if "[Criterion]\n" in user:
        criterion = user.split("[Criterion]\n")[1].split("\n")[0]
        response = user.split("[Response]\n")[1].split("\n\n[Criterion]")[0]
        return criterion, response
    criterion = user.split("Criterion: ")[1].split("\n")[0]
    response = user.split("[RESPONSE]\n")[1].split("\n[END RESPONSE]")[0]
    return criterion, response


# -- the tests' one fake engine ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """What one ``chat`` call asked (``FakeEngine.calls``)."""

    conversations: list[list[dict]]
    n: int
    max_tokens: int
    json_schema: dict | None
    choices: list[str] | None
    logprobs: int | None

    @property
    def users(self) -> list[str]:
        return [c[-1]["content"] for c in self.conversations]


@dataclass(frozen=True)
class Request:
    """One conversation of a ``FakeEngine.chat`` call, as its reply functions see it; the call's arguments
    (``n``, ``max_tokens``, ``json_schema``, ``choices``, ``logprobs``) read through to ``call``."""

    conversation: list[dict]
    call: Call

    def __getattr__(self, name: str):
        return getattr(self.call, name)

    @property
    def user(self) -> str:
        """The last message's content (the user turn)."""
        return self.conversation[-1]["content"]

    def check(self) -> tuple[str, str]:
        """(criterion, response) of a verifier request."""
        return verifier_check(self.user)


Reply = Union[str, Sequence[str], Completion]


def verdict_bit(criterion: str, response: str) -> int:
    """A deterministic pseudo-random 1/0 per (criterion, response): what ``hashed_verdict`` answers."""
    return hashlib.md5(f"{criterion}\x00{response}".encode()).digest()[0] & 1


def hashed_verdict(request: Request) -> str:
    """A verifier's "yes"/"no" that looks random but is a function of (criterion, response) (``verdict_bit``)."""
    return "yes" if verdict_bit(*request.check()) else "no"


class FakeEngine(Engine):
    """A scripted engine for unit tests: every reply is a function of the request (its conversation content), so
    no model runs. Each argument is a constant or a function of the ``Request`` giving one:

    - ``text``: the reply to a generation (a ``json_schema`` request or an unconstrained one): a string (the same
      for all ``n`` samples), ``n`` strings, or a whole ``Completion``; ``finish`` is its finish reason;
    - ``verdict``: the reply to a ``choices`` request (default: the first choice), finish reason "stop";
    - ``logprobs``: the first generated token's {token: log-probability} for a ``logprobs=N`` request (None: no
      log-probabilities come back); giving it makes ``supports_logprobs`` True. Such a request generates the most
      likely token and stops for its length (``max_tokens=1``).

    A ``supports_logprobs=False`` engine refuses a ``logprobs`` request altogether (an engine written before it
    existed). Every call is recorded in ``calls`` (``Call``); every request is checked as every engine's is
    (``SamplingParams``).
    Token counts: the user message's length in characters, and ``completion_tokens`` per sample.
    """

    def __init__(
        self,
        text: Reply | Callable[[Request], Reply] = "",
        *,
        finish: str = "stop",
        verdict: Reply | Callable[[Request], Reply] | None = None,
        logprobs: Callable[[Request], dict[str, float] | None] | None = None,
        supports_logprobs: bool | None = None,
        model_name: str = "fake",
        config=None,
        completion_tokens: int = 3,
    ):
        self.text, self.finish, self.verdict, self.logprob_fn = text, finish, verdict, logprobs
        self.supports_logprobs = logprobs is not None if supports_logprobs is None else supports_logprobs
        self.model_name, self.config, self.completion_tokens = model_name, config, completion_tokens
        self.calls: list[Call] = []

    def generate(self, conversations, params: SamplingParams):
        if params.logprobs is not None and not self.supports_logprobs:  # an engine that may not accept logprobs
            raise TypeError("chat() got an unexpected keyword argument 'logprobs'")
        call = Call(
            list(conversations), params.n, params.max_tokens, params.json_schema, params.choices, params.logprobs
        )
        self.calls.append(call)
        return [self._complete(Request(conv, call)) for conv in conversations]

    def _complete(self, req: Request) -> Completion:
        if req.logprobs is not None and req.choices is None and req.json_schema is None:
            dist = self.logprob_fn(req) if self.logprob_fn is not None else None
            if isinstance(dist, Completion):
                return dist
            top = ((merge_logprobs(dist.items()),),) * req.n if dist else None
            first = max(dist, key=dist.get) if dist else ""
            return self._completion(req, first, "length", top)
        if req.choices is not None:
            return self._completion(req, self._answer(self.verdict, req, req.choices[0]), "stop")
        return self._completion(req, self._answer(self.text, req, ""), self.finish)

    @staticmethod
    def _answer(rule, req: Request, default: str) -> Reply:
        if rule is None:
            return default
        return rule(req) if callable(rule) else rule

    def _completion(self, req: Request, reply: Reply, finish: str, top=None) -> Completion:
        if isinstance(reply, Completion):
            return reply
        texts = (reply,) * req.n if isinstance(reply, str) else tuple(reply)
        assert len(texts) == req.n, f"a reply of {len(texts)} texts to a request for n={req.n}"
        return Completion(texts, (finish,) * req.n, len(req.user), (self.completion_tokens,) * req.n, 0, top)


def round_engine(rubric: list[dict]) -> FakeEngine:
    """Every role of a round by rule: the generator writes ``rubric`` (a list of {"criterion", "weight"}); the
    policy's sample j is "answer j", with " with detail" when j is odd; the verifier says yes when the response
    contains the criterion's last word (any case)."""

    def text(req: Request) -> Reply:
        if req.json_schema is not None:
            return json.dumps({"rubrics": rubric})
        return [f"answer {j} with detail" if j % 2 else f"answer {j}" for j in range(req.n)]

    def verdict(req: Request) -> str:
        criterion, response = req.check()
        return "yes" if criterion.split()[-1].lower() in response.lower() else "no"

    return FakeEngine(text, verdict=verdict, model_name="scripted")
