"""The verifiers integration with the real library: the example environment (examples/verifiers_env,
``dr-rubric-env``) evaluated by verifiers 0.4.0's own eval runner (``run_eval``) in the verifiers environment
(.venv-verifiers, infra/verifiers/install.sh), its policy a scripted OpenAI-compatible server on 127.0.0.1, its
rewards from a real ``dr serve`` (a real process behind a bearer token, its engines another scripted server).

- every attempt's reward is what ``POST /v1/score-set`` answers for the same set (the episode's replies, in the
  order sent) with the same seed and rubric rollouts;
- an attempt the service cannot score (score null) fails as verifiers fails a reward function: no reward
  (``None``), a ``TaskError`` on the trace, ``ok`` False, the episode not ok; its siblings keep their rewards.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

import pytest

from dr_core.integrations.verifiers import REWARD_NAME
from tests.support.scripted_server import ScriptedServer, digest, policy_reply
from tests.support.serve_proc import ROOT, ServeProcess, engines_file

VF_VENV = ROOT / os.environ.get("DR_VERIFIERS_VENV", ".venv-verifiers")  # as infra/verifiers/install.sh
VF_PY = VF_VENV / "bin" / "python"
TOKEN = "verifiers-test-token-0123456789abcdef"
N = 3  # attempts per episode: the group
SEED, RUBRIC_ROLLOUTS = 7, 2
#: a reply carrying this cannot be verified by the engines server below (the verifier answers "maybe")
MARK = "[unverifiable]"
MARKED_PROMPT, MARKED_ATTEMPT = "Is 91 a prime number? Give your reasoning.", 1
PROMPTS = {
    "planet": "Which planet is closest to the sun, and how long is its year?",
    "tea": "Explain in three sentences how to brew a good cup of green tea.",
    "primes": MARKED_PROMPT,
    "bridge": "Why do suspension bridges sway in strong wind, and how do engineers stop it?",
}


def _last_user(messages: list[dict]) -> str:
    return next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")


class PolicyServer(ScriptedServer):
    """The policy: the k-th request with the same messages gets sample k (an episode's attempts run one at a
    time, so attempt k of a prompt gets sample k: replies differ within a group, deterministically), with the
    OpenAI fields verifiers' client requires (``created``). Attempt ``MARKED_ATTEMPT`` of ``MARKED_PROMPT``
    carries ``MARK``."""

    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()

    def completion(self, body: dict) -> dict:
        out = super().completion(body)
        messages = body.get("messages") or []
        h = digest(messages)
        with self._lock:
            k = self.seen[h]
            self.seen[h] += 1
        text = policy_reply(h, k)
        if (_last_user(messages), k) == (MARKED_PROMPT, MARKED_ATTEMPT):
            text = f"{text} {MARK}"
        out["choices"] = out["choices"][:1]
        out["choices"][0]["message"]["content"] = text
        out["created"] = 0
        return out


class EngineServer(ScriptedServer):
    """The service's generator and verifier: the scripted answers, except that a verifier check on a response
    carrying ``MARK`` is answered "maybe" without log-probabilities (an unscorable verdict, so a null score)."""

    def completion(self, body: dict) -> dict:
        out = super().completion(body)
        so = body.get("structured_outputs") or {}
        verdict = "choice" in so or (body.get("max_tokens") == 1 and "json" not in so)
        if verdict and MARK in json.dumps(body.get("messages")):
            for c in out["choices"]:
                c["message"]["content"] = "maybe"
                c.pop("logprobs", None)
        return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """(dr serve, the episodes printed by tests/support/verifiers_eval.py) after one eval of every prompt."""
    if not VF_PY.exists():
        pytest.skip(f"no verifiers environment at {VF_VENV}: run `bash infra/verifiers/install.sh` (install.sh does)")
    work = tmp_path_factory.mktemp("verifiers")
    (work / "token").write_text(TOKEN + "\n")
    with PolicyServer() as policy, EngineServer() as engines:
        srv = ServeProcess(
            work,
            store=work / "store",
            engines=engines_file(work / "engines.yaml", engines.base_url),
            args=("--token-file", str(work / "token")),
        )
        with srv:
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(work),  # verifiers' cache (subprocess runtimes' work dirs) goes under it
                "DR_SERVE_TOKEN": TOKEN,
                "PRIME_RUNS_MODE": "disabled",
            }
            cmd = [str(VF_PY), "-m", "tests.support.verifiers_eval", "--policy-url", policy.base_url]
            cmd += ["--dr-url", srv.url, "--n", str(N), "--seed", str(SEED)]
            cmd += ["--rubric-rollouts", str(RUBRIC_ROLLOUTS), "--out", str(work / "out")]
            run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
            episodes = json.loads(run.stdout.strip().splitlines()[-1])
            yield srv, episodes


def _score_set(srv, prompt: str, responses: list[str]) -> dict:
    with srv.client(TOKEN) as c:
        r = c.post(
            "/v1/score-set",
            json={"prompt": prompt, "responses": responses, "seed": SEED, "rubric_rollouts": RUBRIC_ROLLOUTS},
        )
    assert r.status_code == 200, r.text
    return r.json()


def test_every_prompt_is_one_episode_of_n_distinct_attempts(stack):
    _, episodes = stack
    assert sorted(e["task_id"] for e in episodes) == sorted(PROMPTS)
    for e in episodes:
        assert e["prompt"] == PROMPTS[e["task_id"]] and len(e["traces"]) == N
        replies = [t["reply"] for t in e["traces"]]
        assert len(set(replies)) == N and all(r.startswith("Answer ") for r in replies), replies


def test_rewards_are_the_services_scores_for_the_same_set(stack):
    srv, episodes = stack
    rewards = []
    for e in episodes:
        replies = [t["reply"] for t in e["traces"]]
        answer = _score_set(srv, e["prompt"], replies)
        assert len(answer["rubrics"]) == RUBRIC_ROLLOUTS
        assert [t["reward"] for t in e["traces"]] == answer["scores"], e["task_id"]
        rewards += [t["reward"] for t in e["traces"] if t["reward"] is not None]
    assert len(rewards) == len(PROMPTS) * N - 1 and all(0.0 <= r <= 1.0 for r in rewards)
    assert len(set(rewards)) > 1  # the scores discriminate: not one constant


def test_an_unscorable_attempt_fails_like_a_failed_reward_function(stack):
    srv, episodes = stack
    by_task = {e["task_id"]: e for e in episodes}
    marked = by_task["primes"]
    bad = marked["traces"][MARKED_ATTEMPT]
    assert MARK in bad["reply"]
    assert bad["reward"] is None and bad["ok"] is False and bad["stop"] is not None
    assert len(bad["errors"]) == 1 and bad["errors"][0].startswith(f"TaskError: {REWARD_NAME}: dr serve could not")
    assert "unscorable" in bad["errors"][0]  # the service's reason is carried
    assert marked["ok"] is False  # the episode is not complete: --env.retries retries it, --resume redoes it
    siblings = [t for i, t in enumerate(marked["traces"]) if i != MARKED_ATTEMPT]
    assert all(t["ok"] and isinstance(t["reward"], float) and not t["errors"] for t in siblings)
    answer = _score_set(srv, marked["prompt"], [t["reply"] for t in marked["traces"]])
    assert answer["scores"][MARKED_ATTEMPT] is None and answer["unscorable"]
    for task_id in set(PROMPTS) - {"primes"}:
        e = by_task[task_id]
        assert e["ok"] and not e["errors"] and all(t["ok"] and t["reward"] is not None for t in e["traces"])
