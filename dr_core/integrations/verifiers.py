"""DynamicRubric as the group-level reward of a verifiers 0.4.0 environment (Prime Intellect), over ``dr serve``.

verifiers 0.4.0 (the ``verifiers.v1`` stack) scores one trace at a time with a ``Task``'s ``@vf.reward`` methods;
the only judgement that sees several rollouts of one prompt together is an ``Env``'s ``finalize(task, episode)``
("cross-agent judgement", verifiers/v1/env.py). A set-conditioned rubric needs the whole set, so the group is one
episode of n attempts at the task (as in verifiers' own ``best-of-n`` env), and its ``finalize`` sends the n
replies as ONE ``POST /v1/score-set`` and records each attempt's Eq. 12 score as its reward
(``finalize_episode``). The example environment ``examples/verifiers_env`` (package ``dr-rubric-env``) is that env.

- ``DynamicRubricGroupReward``: the group-level reward function, ``await reward(prompts, completions)`` -> one
  reward per completion, ``None`` where the service answered null (unscorable). The URL and bearer token come
  from the arguments or from ``$DR_SERVE_URL`` / ``$DR_SERVE_TOKEN``.
- ``record_group_rewards``: puts the rewards on the traces. An unscorable trace is recorded the way verifiers
  records a reward function that failed (``Task.score`` seeds every reward to ``None``, a raising reward becomes a
  ``TaskError`` that ``Rollout.fail`` records with ``trace.record_error``): its reward stays ``None``, a
  ``TaskError`` naming why is on ``trace.errors``, ``trace.ok`` is False, so the episode is not ``ok`` either
  (retried by ``--env.retries``, redone by ``--resume``, left out by a trainer that drops failed rollouts). Never a
  0: ``trace.reward`` sums only recorded rewards, but the trace says it failed.
- A service that cannot answer (unreachable, 4xx, 503 after every retry) raises ``RewardServiceError`` out of
  ``finalize``: verifiers records it as the episode's ``EnvError`` and the episode fails whole, as its docstring
  asks ("a raise fails the episode (the retryable unit) - validate strictly, never record a guess").

httpx only at import time: verifiers is imported inside ``record_group_rewards`` (the ``verifiers`` extra), so
``dr_core`` imports without it.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Sequence

import httpx

from dr_core.service.clients import RewardServiceError, auth_headers, post_async, request_digest, resolve_token

#: the name of the reward on each trace (``trace.rewards[REWARD_NAME]``)
REWARD_NAME = "dynamicrubric"
URL_ENV, TOKEN_ENV = "DR_SERVE_URL", "DR_SERVE_TOKEN"

__all__ = [
    "REWARD_NAME",
    "DynamicRubricGroupReward",
    "RewardServiceError",
    "finalize_episode",
    "record_group_rewards",
    "rewards_of",
]


def service_url(url: str | None) -> str:
    """The service's base URL: ``url``, else ``$DR_SERVE_URL``."""
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise RewardServiceError(f"no reward service URL: pass url= or set ${URL_ENV} (e.g. http://127.0.0.1:8321)")
    return url.rstrip("/")


def rewards_of(answer: dict, n: int) -> list[float | None]:
    """Each response's reward from a ``/v1/score-set`` answer: its ``scores`` (the mean Eq. 12 score over the
    rubric rollouts), ``None`` where the service answered null. A non-finite number is unscorable too; an answer
    of the wrong length or type is the service's bug (``RewardServiceError``)."""
    scores = answer.get("scores") if isinstance(answer, dict) else None
    if not isinstance(scores, list) or len(scores) != n:
        raise RewardServiceError(f"/v1/score-set answered {n} responses with scores {scores!r}")
    out: list[float | None] = []
    for s in scores:
        if s is None:
            out.append(None)
        elif isinstance(s, (int, float)) and not isinstance(s, bool):
            out.append(float(s) if math.isfinite(s) else None)
        else:
            raise RewardServiceError(f"/v1/score-set answered a score {s!r} (a number or null expected)")
    return out


def why_unscorable(answer: dict) -> str:
    """The service's own reasons (its answer's ``unscorable``), in one line."""
    reasons = answer.get("unscorable") if isinstance(answer, dict) else None
    return "; ".join(str(r) for r in reasons) if reasons else "no rubric rollout could score it"


class DynamicRubricGroupReward:
    """A group-level reward function over a running ``dr serve``: ``await reward(prompts, completions)`` sends
    the group (one prompt, its completions) as ONE ``POST /v1/score-set`` and returns one reward per completion,
    ``None`` where unscorable. ``seed`` and ``rubric_rollouts`` are the service's (the same set with the same
    ones scores the same). Retries: a dropped connection and a 503 are retried (``attempts``, back-off 1, 2, 4 s),
    with the same request id; a 4xx raises ``RewardServiceError`` at once. ``last_answer``: the service's last
    answer (rubrics, verdicts, R_disc, request id)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        token_env: str | None = None,
        rubric_rollouts: int = 1,
        seed: int = 0,
        timeout_s: float = 600.0,
        attempts: int = 5,
        run_tag: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.url = service_url(url)
        self._transport = transport  # tests: an httpx.MockTransport
        if token is None and token_env is None and os.environ.get(TOKEN_ENV):
            token_env = TOKEN_ENV
        self._headers = auth_headers(resolve_token(token, token_env))
        self.rubric_rollouts, self.seed, self.timeout_s, self.attempts = rubric_rollouts, seed, timeout_s, attempts
        self.run_tag = run_tag or f"verifiers-{os.getpid()}-{int(time.time())}"
        self.__name__ = REWARD_NAME
        self.last_answer: dict | None = None

    def body(self, prompt: str, responses: Sequence[str], key: Any = None) -> dict:
        """The ``/v1/score-set`` body of one group; the request id is a digest of the run tag, ``key`` (the
        episode), the prompt and the responses, so a retry of the same group is answered once."""
        responses = list(responses)
        return {
            "prompt": prompt,
            "responses": responses,
            "rubric_rollouts": self.rubric_rollouts,
            "seed": self.seed,
            "request_id": f"{self.run_tag}-{request_digest(str(key), prompt, responses)}",
        }

    async def __call__(self, prompts: Sequence[str], completions: Sequence[str], key: Any = None):
        if len(prompts) != len(completions) or not completions:
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions (one group, not empty)")
        if len(set(prompts)) != 1:
            raise ValueError("a group is the completions of ONE prompt; these prompts differ")
        body = self.body(prompts[0], completions, key)
        timeout = httpx.Timeout(self.timeout_s, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, transport=self._transport) as client:
            answer = await post_async(client, f"{self.url}/v1/score-set", body, self._headers, self.attempts)
        self.last_answer = answer
        return rewards_of(answer, len(completions))


def record_group_rewards(
    traces: Sequence[Any], rewards: Sequence[float | None], why: str = "", name: str = REWARD_NAME
) -> None:
    """Each trace's reward (``trace.record_reward``), or, for ``None``, the failure of a reward function as
    verifiers records one: ``trace.rewards[name] = None`` and a ``TaskError`` on the trace (``ok`` False)."""
    from verifiers.v1.errors import TaskError

    for trace, reward in zip(traces, rewards, strict=True):
        if reward is not None:
            trace.record_reward(name, reward)
        else:
            trace.rewards[name] = None
            trace.record_error(TaskError(f"{name}: dr serve could not score this response ({why})"))


async def finalize_episode(reward: DynamicRubricGroupReward, task: Any, episode: Any) -> list[float | None]:
    """An ``Env.finalize`` body: the episode's finished attempts (``trace.ok``; a failed attempt keeps its own
    error and gets no reward) form the set of ``task``'s prompt; their rewards go on the traces. Returns the
    rewards in ``episode.traces`` order (``None`` for failed and unscorable attempts)."""
    done = [t for t in episode.traces if t.ok]
    out: list[float | None] = [None] * len(episode.traces)
    if not done:
        return out
    prompt = task.data.prompt_text
    rewards = await reward([prompt] * len(done), [t.last_reply for t in done], key=episode.id)
    record_group_rewards(done, rewards, why_unscorable(reward.last_answer))
    index = {id(t): i for i, t in enumerate(episode.traces)}
    for t, r in zip(done, rewards):
        out[index[id(t)]] = r
    return out
