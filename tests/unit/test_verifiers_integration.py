"""The verifiers integration's own logic (dr_core/integrations/verifiers.py), without verifiers and without a
service: rewards read from a /v1/score-set answer (null and non-finite are unscorable, a malformed answer is an
error), one group sent as one request with a stable id and the bearer token, and the rewards put on traces the way
verifiers records a failed reward function. The real library and a real dr serve: tests/integration/
test_verifiers_env.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import types

import httpx
import pytest

from dr_core.integrations import verifiers as integ
from dr_core.integrations.verifiers import (
    REWARD_NAME,
    DynamicRubricGroupReward,
    RewardServiceError,
    finalize_episode,
    record_group_rewards,
    rewards_of,
)

URL = "http://127.0.0.1:9"


def test_rewards_of_reads_scores_and_keeps_null_as_unscorable():
    assert rewards_of({"scores": [0.5, None, 1, float("nan")]}, 4) == [0.5, None, 1.0, None]
    for bad in ({"scores": [0.5]}, {"scores": None}, {}, {"scores": ["0.5", 1.0]}, {"scores": [True, 1.0]}):
        with pytest.raises(RewardServiceError):
            rewards_of(bad, 2)


def test_the_url_and_token_come_from_the_arguments_or_the_environment(monkeypatch):
    monkeypatch.delenv(integ.URL_ENV, raising=False)
    monkeypatch.delenv(integ.TOKEN_ENV, raising=False)
    with pytest.raises(RewardServiceError, match="DR_SERVE_URL"):
        DynamicRubricGroupReward()
    monkeypatch.setenv(integ.URL_ENV, "http://svc:8321/")
    monkeypatch.setenv(integ.TOKEN_ENV, "tok-from-env")
    reward = DynamicRubricGroupReward()
    assert reward.url == "http://svc:8321" and reward._headers == {"Authorization": "Bearer tok-from-env"}
    assert DynamicRubricGroupReward(URL, token="t")._headers == {"Authorization": "Bearer t"}
    monkeypatch.delenv(integ.TOKEN_ENV)
    assert DynamicRubricGroupReward(URL)._headers == {}
    with pytest.raises(RewardServiceError, match="MY_TOKEN"):
        DynamicRubricGroupReward(URL, token_env="MY_TOKEN")


def _service(answers: list[dict], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status, body = answers.pop(0)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


def test_a_group_is_one_score_set_request_and_its_rewards_come_back_in_order():
    seen: list[httpx.Request] = []
    answer = {"scores": [0.25, None, 0.75], "unscorable": ["rollout 0: verdicts: 2 of 6 unscorable"]}
    transport = _service([(200, answer), (200, answer)], seen)
    reward = DynamicRubricGroupReward(URL, token="t", seed=3, rubric_rollouts=2, run_tag="run", transport=transport)
    out = asyncio.run(reward(["p"] * 3, ["a", "b", "c"], key="episode-1"))
    assert out == [0.25, None, 0.75] and reward.last_answer == answer
    body = json.loads(seen[0].content)
    assert seen[0].url == f"{URL}/v1/score-set" and seen[0].headers["authorization"] == "Bearer t"
    assert body["prompt"] == "p" and body["responses"] == ["a", "b", "c"]
    assert (body["seed"], body["rubric_rollouts"]) == (3, 2) and body["request_id"].startswith("run-")
    asyncio.run(reward(["p"] * 3, ["a", "b", "c"], key="episode-1"))  # the same group again: the same request id
    assert json.loads(seen[1].content)["request_id"] == body["request_id"]
    assert reward.body("p", ["a", "b", "c"], key="episode-2")["request_id"] != body["request_id"]


def test_a_refused_group_raises_and_a_mixed_group_is_refused_before_sending():
    seen: list[httpx.Request] = []
    transport = _service([(422, {"error": "invalid_request", "detail": "empty", "field": "responses"})], seen)
    reward = DynamicRubricGroupReward(URL, transport=transport, attempts=1)
    with pytest.raises(RewardServiceError, match="422"):
        asyncio.run(reward(["p"], ["a"]))
    with pytest.raises(ValueError, match="ONE prompt"):
        asyncio.run(reward(["p", "q"], ["a", "b"]))
    with pytest.raises(ValueError):
        asyncio.run(reward([], []))
    assert len(seen) == 1


class FakeTrace:
    """What the integration touches of a ``verifiers.v1.Trace``."""

    def __init__(self, reply: str, ok: bool = True):
        self.last_reply, self.ok, self.rewards, self.errors = reply, ok, {}, []

    def record_reward(self, name, value, weight=1.0):
        self.rewards[name] = (float(value), weight)

    def record_error(self, error):
        self.errors.append(error)
        self.ok = False


@pytest.fixture
def fake_verifiers(monkeypatch):
    """``verifiers.v1.errors.TaskError`` without verifiers (this environment does not have it)."""

    class TaskError(Exception):
        pass

    errors = types.ModuleType("verifiers.v1.errors")
    errors.TaskError = TaskError
    for name, mod in {
        "verifiers": types.ModuleType("verifiers"),
        "verifiers.v1": types.ModuleType("verifiers.v1"),
        "verifiers.v1.errors": errors,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return TaskError


def test_an_unscorable_reward_is_recorded_as_a_failed_reward_never_a_zero(fake_verifiers):
    traces = [FakeTrace("a"), FakeTrace("b")]
    record_group_rewards(traces, [0.5, None], why="rollout 0: verdicts unscorable")
    assert traces[0].rewards == {REWARD_NAME: (0.5, 1.0)} and traces[0].ok and not traces[0].errors
    assert traces[1].rewards == {REWARD_NAME: None} and traces[1].ok is False
    (err,) = traces[1].errors
    assert isinstance(err, fake_verifiers) and "verdicts unscorable" in str(err)
    with pytest.raises(ValueError):
        record_group_rewards(traces, [0.5])


def test_finalize_scores_the_finished_attempts_as_one_set(fake_verifiers):
    calls = []

    class Reward:
        last_answer = {"unscorable": []}

        async def __call__(self, prompts, completions, key=None):
            calls.append((prompts, completions, key))
            return [0.1 * (i + 1) for i in range(len(completions))]

    failed = FakeTrace("", ok=False)
    episode = types.SimpleNamespace(id="ep", traces=[FakeTrace("a"), failed, FakeTrace("c")])
    task = types.SimpleNamespace(data=types.SimpleNamespace(prompt_text="the prompt"))
    out = asyncio.run(finalize_episode(Reward(), task, episode))
    assert calls == [(["the prompt"] * 2, ["a", "c"], "ep")]
    assert out == [0.1, None, 0.2] and failed.rewards == {} and not failed.errors
    nobody = types.SimpleNamespace(id="ep2", traces=[FakeTrace("", ok=False)])
    assert asyncio.run(finalize_episode(Reward(), task, nobody)) == [None] and len(calls) == 1


def test_the_integration_imports_without_verifiers():
    code = "import sys, dr_core.integrations.verifiers; print('verifiers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
