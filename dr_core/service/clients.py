"""Reward functions that call a running ``dr serve``: one for TRL's GRPOTrainer, two for verl.

TRL (``DynamicRubricReward``): an async reward function (TRL awaits it on its event loop). It groups the batch's
completions by a group column of the dataset (``group_column``, default ``group_id``; the prompt text when the
column is absent), sends each whole group as ONE ``POST /v1/score-set`` (all groups concurrently), and returns
each completion's Eq. 12 score, ``None`` where unscorable (TRL then gives that completion no advantage).

    from trl import GRPOConfig, GRPOTrainer
    from dr_core.service.clients import DynamicRubricReward
    reward = DynamicRubricReward("http://gpu-box:8321", token_env="DR_SERVE_TOKEN")
    GRPOTrainer(model=..., reward_funcs=[reward], args=GRPOConfig(num_generations=4, ...), train_dataset=ds)

When TRL spreads the copies of one prompt over several processes (multi-GPU), no process holds a whole group: use
``mode="members"``, which sends each completion to ``POST /v1/rewards`` with ``group_size=num_generations`` and a
group id made of the step and the group column, and the service collects the group across processes.

verl: ``compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos)`` (verl's batch reward manager)
groups by ``extra_info["uid"]`` (or ``group_id``, else the prompt) and scores each group as a set;
``compute_score(data_source, solution_str, ground_truth, extra_info)`` is the per-sample form over
``/v1/rewards``, which blocks until the sample's group is complete, so verl must call it concurrently for a
group's members (a sequential reward manager would wait for the group timeout). The prompt comes from
``extra_info["prompt"]`` (or ``"question"``). The service URL and token come from ``DR_SERVE_URL`` and
``DR_SERVE_TOKEN``. An unscorable response gets its set's mean reward (no advantage; 0.0 when none is scorable)
with ``dr_unscorable`` set in the returned dict, never a hidden 0.

Retries: a refused or dropped connection and a 503 (engines loading or failing, service busy) are retried with
back-off (``attempts``, default 5: 1, 2, 4, 8 s); the same request id is sent each time, so a retry after a
service restart is answered once. A 4xx is a bug in the caller's data: ``RewardServiceError`` at once.

httpx only: no torch, no TRL import. ``fill_unscorable`` is the service's own (``dr_core.service.answers``, which
imports nothing but the standard library), and ``RewardServiceError`` derives from the project's ``DRError``
(``dr_core.errors``, likewise). A trainer that loads this file by path without the package installed
(verl's ``custom_reward_function.path``) gets the same rule from the copy below, which
tests/unit/test_service_logic.py checks against the service's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from typing import Any, Sequence

import httpx

try:
    from dr_core.errors import DRError
    from dr_core.service.answers import fill_unscorable
except ImportError:  # this file alone on a trainer machine: the service's rule, kept equal by a test

    class DRError(Exception):  # type: ignore[no-redef]  # the project's error base is not there either
        """Stands in for ``dr_core.errors.DRError`` when this file is used alone."""

    def fill_unscorable(rewards: Sequence[float | None]) -> tuple[list[float], list[float]]:
        """An unscorable reward becomes its set's mean scorable reward (0.0 when none is); 1.0/0.0 flags."""
        mates = [r for r in rewards if r is not None]
        fill = sum(mates) / len(mates) if mates else 0.0
        return [fill if r is None else r for r in rewards], [float(r is None) for r in rewards]


RETRY_STATUS = (502, 503)


class RewardServiceError(DRError, RuntimeError):
    """The service refused a request (4xx) or stayed unreachable/unavailable after every attempt."""


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve_token(token: str | None, token_env: str | None) -> str | None:
    if token:
        return token
    if token_env:
        value = os.environ.get(token_env)
        if not value:
            raise RewardServiceError(f"${token_env} is not set (the reward service's bearer token)")
        return value
    return None


def _check(resp: httpx.Response, url: str) -> dict:
    if resp.status_code >= 400:
        try:
            body = resp.json()
            why = f"{body.get('error')}: {body.get('field') + ': ' if body.get('field') else ''}{body.get('detail')}"
        except (ValueError, AttributeError):
            why = resp.text[:300]
        raise RewardServiceError(f"{url} answered {resp.status_code} ({why})")
    return resp.json()


def _text(x: Any) -> str:
    """A prompt or completion as text: a string, or a conversation (list of messages): the last user turn of a
    prompt, the joined contents of a completion."""
    if isinstance(x, str):
        return x
    if isinstance(x, list) and x and isinstance(x[0], dict):
        if x[-1].get("role") == "user":  # a conversational prompt: its last user turn
            return x[-1].get("content") or ""
        return "".join(m.get("content") or "" for m in x)  # a completion: its messages' contents
    return str(x)


def request_digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:24]


async def post_async(client: httpx.AsyncClient, url: str, body: dict, headers: dict, attempts: int) -> dict:
    delay = 1.0
    for attempt in range(1, attempts + 1):
        try:
            resp = await client.post(url, json=body, headers=headers)
            if resp.status_code not in RETRY_STATUS or attempt == attempts:
                return _check(resp, url)
        except httpx.TransportError as exc:
            if attempt == attempts:
                raise RewardServiceError(f"{url}: {type(exc).__name__} after {attempts} attempts") from None
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def _post(client: httpx.Client, url: str, body: dict, headers: dict, attempts: int) -> dict:
    delay = 1.0
    for attempt in range(1, attempts + 1):
        try:
            resp = client.post(url, json=body, headers=headers)
            if resp.status_code not in RETRY_STATUS or attempt == attempts:
                return _check(resp, url)
        except httpx.TransportError as exc:
            if attempt == attempts:
                raise RewardServiceError(f"{url}: {type(exc).__name__} after {attempts} attempts") from None
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def group_blocks(keys: Sequence[Any]) -> dict[Any, list[int]]:
    """{group key: indices}, in first-seen order."""
    out: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return out


class DynamicRubricReward:
    """TRL reward function (async) backed by a running ``dr serve`` (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_env: str | None = None,
        group_column: str = "group_id",
        mode: str = "set",
        group_size: int | None = None,
        rubric_rollouts: int = 1,
        seed: int = 0,
        timeout_s: float = 600.0,
        attempts: int = 5,
        run_tag: str | None = None,
    ):
        if mode not in ("set", "members"):
            raise ValueError(f"mode must be 'set' or 'members', got {mode!r}")
        if mode == "members" and not group_size:
            raise ValueError("mode='members' needs group_size (GRPOConfig.num_generations)")
        self.url, self.group_column, self.mode, self.group_size = url.rstrip("/"), group_column, mode, group_size
        self.rubric_rollouts, self.seed, self.timeout_s, self.attempts = rubric_rollouts, seed, timeout_s, attempts
        self._headers = auth_headers(resolve_token(token, token_env))
        self.run_tag = run_tag or f"trl-{os.getpid()}-{int(time.time())}"
        self.__name__ = "dynamicrubric_service"
        self.history: list[dict] = []

    async def __call__(self, prompts, completions, trainer_state=None, **kwargs) -> list[float | None]:
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        texts = [_text(c) for c in completions]
        prompt_texts = [_text(p) for p in prompts]
        keys = kwargs.get(self.group_column) or prompt_texts
        blocks = group_blocks(keys)
        rewards: list[float | None] = [None] * len(texts)
        timeout = httpx.Timeout(self.timeout_s, connect=10.0)
        started = time.perf_counter()
        async with httpx.AsyncClient(timeout=timeout) as client:
            if self.mode == "set":
                if self.group_size:
                    split = {k: len(v) for k, v in blocks.items() if len(v) != self.group_size}
                    if split:
                        raise RewardServiceError(
                            f"groups {split} are not whole ({self.group_size} completions); "
                            "use mode='members' when TRL spreads a group over processes"
                        )
                calls = []
                for key, idx in blocks.items():
                    responses = [texts[i] for i in idx]
                    rid = f"{self.run_tag}-s{step}-{request_digest(str(key), prompt_texts[idx[0]], responses)}"
                    body = {
                        "prompt": prompt_texts[idx[0]],
                        "responses": responses,
                        "request_id": rid,
                        "rubric_rollouts": self.rubric_rollouts,
                        "seed": self.seed + step,
                    }
                    calls.append(post_async(client, f"{self.url}/v1/score-set", body, self._headers, self.attempts))
                answers = await asyncio.gather(*calls)
                for idx, ans in zip(blocks.values(), answers):
                    for i, score in zip(idx, ans["scores"]):
                        rewards[i] = score
            else:
                rank = os.environ.get("RANK", "0")
                calls = []
                for i, (key, text) in enumerate(zip(keys, texts)):
                    gid = f"{self.run_tag}-s{step}-{request_digest(str(key))}"
                    body = {
                        "group_id": gid,
                        "group_size": self.group_size,
                        "prompt": prompt_texts[i],
                        "response": text,
                        "request_id": f"{gid}-r{rank}-{i}",
                    }
                    calls.append(post_async(client, f"{self.url}/v1/rewards", body, self._headers, self.attempts))
                for i, ans in enumerate(await asyncio.gather(*calls)):
                    rewards[i] = ans["reward"]
        self.history.append(
            {
                "step": step,
                "completions": len(texts),
                "groups": len(blocks),
                "unscorable": sum(r is None for r in rewards),
                "seconds": round(time.perf_counter() - started, 3),
            }
        )
        return rewards


# -- verl ------------------------------------------------------------------------------------------------------------


def _verl_env() -> tuple[str, dict]:
    url = os.environ.get("DR_SERVE_URL")
    if not url:
        raise RewardServiceError("$DR_SERVE_URL is not set (the reward service, e.g. http://127.0.0.1:8321)")
    return url.rstrip("/"), auth_headers(os.environ.get("DR_SERVE_TOKEN") or None)


def _verl_prompt(extra_info: dict | None, solution_str: str) -> str:
    info = extra_info or {}
    prompt = info.get("prompt") or info.get("question")
    if not isinstance(prompt, str) or not prompt:
        raise RewardServiceError(
            "extra_info has no 'prompt' (or 'question'): put the prompt text into the "
            "dataset's extra_info when preparing it for verl"
        )
    return prompt


def _fill(rewards: list[float | None]) -> list[dict]:
    """verl's reward dicts: an unscorable response gets its set's mean (``fill_unscorable``), flagged."""
    filled, flags = fill_unscorable(rewards)
    return [{"score": f, "dr_unscorable": u} for f, u in zip(filled, flags)]


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **_kwargs) -> list[dict]:
    """verl batch reward manager: one ``/v1/score-set`` per group (``extra_info["uid"]``, ``"group_id"`` or the
    prompt), returns ``[{"score": ..., "dr_unscorable": 0.0|1.0}]`` in input order."""
    url, headers = _verl_env()
    prompts = [_verl_prompt(e, s) for e, s in zip(extra_infos, solution_strs)]
    keys = [(e or {}).get("uid") or (e or {}).get("group_id") or p for e, p in zip(extra_infos, prompts)]
    blocks = group_blocks(keys)
    out: list[dict] = [{}] * len(solution_strs)
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        for key, idx in blocks.items():
            responses = [solution_strs[i] for i in idx]
            body = {
                "prompt": prompts[idx[0]],
                "responses": responses,
                "request_id": f"verl-{request_digest(str(key), prompts[idx[0]], responses)}",
            }
            ans = _post(client, f"{url}/v1/score-set", body, headers, 5)
            for i, filled in zip(idx, _fill(ans["scores"])):
                out[i] = filled
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_kwargs) -> dict:
    """verl per-sample form over ``/v1/rewards``: ``extra_info`` needs the prompt, a group id (``uid`` or
    ``group_id``) and ``group_size`` (or ``$DR_GROUP_SIZE``); blocks until the group is scored."""
    url, headers = _verl_env()
    info = extra_info or {}
    prompt = _verl_prompt(info, solution_str)
    gid = info.get("uid") or info.get("group_id")
    size = info.get("group_size") or os.environ.get("DR_GROUP_SIZE")
    if not gid or not size:
        raise RewardServiceError(
            "compute_score needs extra_info['uid'] (or 'group_id') and extra_info['group_size'] "
            "(or $DR_GROUP_SIZE); or use compute_score_batch"
        )
    gid = f"verl-{request_digest(str(gid))}"
    body = {
        "group_id": gid,
        "group_size": int(size),
        "prompt": prompt,
        "response": solution_str,
        "request_id": f"{gid}-{request_digest(solution_str, info.get('index'), info.get('sample_index'))}",
    }
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        ans = _post(client, f"{url}/v1/rewards", body, headers, 5)
    r = ans["reward"]
    return {"score": 0.0 if r is None else r, "dr_unscorable": float(r is None)}
