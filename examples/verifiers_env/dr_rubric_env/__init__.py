"""dr-rubric-env: a verifiers 0.4.0 environment whose reward is DynamicRubric's set-level rubric (``dr serve``).

What verifiers 0.4.0 loads from this package (``verifiers.v1.utils.loaders``: the id ``dr-rubric-env`` imports the
module ``dr_rubric_env`` and takes the one subclass of each kind named in ``__all__``):

- ``PromptsTaskset``: the bundled prompts (``prompts.json``), one task each;
- ``DynamicRubricEnv``: each episode is ``n`` attempts at the task (the group), and ``finalize`` scores them as ONE
  set with ``POST /v1/score-set`` (``dr_core.integrations.verifiers.finalize_episode``): every attempt's reward is
  ``trace.rewards["dynamicrubric"]``; an unscorable attempt fails like a failed reward function;
- ``ChatHarness``: one chat turn, in process, through verifiers' interception endpoint (no program to install).

    from dr_rubric_env import load_environment
    env = load_environment(n=4, dr_url="http://127.0.0.1:8321")      # a verifiers Env
    # or: vf-eval dr-rubric-env -m MODEL --client.base-url URL --env.n 4 --env.dr-url http://127.0.0.1:8321

``--env.id dr-rubric-env`` pairs the env with any other taskset (its tasks' ``prompt_text`` is the set's prompt).
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources

import httpx
import verifiers.v1 as vf
from pydantic import Field

from dr_core.integrations.verifiers import DynamicRubricGroupReward, finalize_episode

ENV_ID = "dr-rubric-env"

__all__ = [
    "ENV_ID",
    "ChatHarness",
    "ChatHarnessConfig",
    "DynamicRubricEnv",
    "DynamicRubricEnvConfig",
    "PromptsTaskset",
    "load_environment",
    "load_prompts",
]


def load_prompts() -> list[dict]:
    """The bundled prompts: ``[{"id", "prompt"}]``."""
    return json.loads(resources.files(__name__).joinpath("prompts.json").read_text(encoding="utf-8"))


class PromptsTaskset(vf.Taskset[vf.Task]):
    """One task per bundled prompt (its ``id`` is the task's id)."""

    def load(self):
        for row in load_prompts():
            yield vf.Task(vf.TaskData(id=row["id"], name=row["id"], prompt=row["prompt"]), self.config.task)


class ChatHarnessConfig(vf.HarnessConfig):
    id: str = ENV_ID


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """One chat completion, in process: the request goes to the rollout's interception endpoint (which calls the
    policy's client and records the turn on the trace), so no harness program is installed or launched."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_kwargs) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(m if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in prompt or [])
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30.0)) as client:
            resp = await client.post(
                f"{endpoint.rstrip('/')}/chat/completions",
                json={"model": ctx.model, "messages": messages},
                headers={"Authorization": f"Bearer {secret}"},
            )
        if resp.status_code != 200:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"HTTP {resp.status_code}: {resp.text[:500]}")
        return vf.ProgramResult(exit_code=0, stdout=resp.json()["choices"][0]["message"]["content"] or "", stderr="")


class DynamicRubricEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy's seat; a tool-less chat needs no sandbox (the subprocess runtime only holds a work dir)."""
    n: int = Field(4, ge=1)
    """Attempts per episode: the group scored as one set (the trainer's group size)."""
    dr_url: str | None = None
    """The reward service (``dr serve``); None: ``$DR_SERVE_URL``."""
    dr_token_env: str | None = None
    """The environment variable holding the service's bearer token; None: ``$DR_SERVE_TOKEN`` when set."""
    rubric_rollouts: int = Field(1, ge=1)
    """Rubrics sampled per set (the service averages each response's score over them)."""
    seed: int = 0
    """The service's rubric seed (the same set with the same seed scores the same)."""


class DynamicRubricEnv(vf.Env[DynamicRubricEnvConfig]):
    """n attempts at the task, then one set-level rubric over all of them (``finalize``)."""

    def __init__(self, config: DynamicRubricEnvConfig) -> None:
        super().__init__(config)
        self.reward = DynamicRubricGroupReward(
            config.dr_url,
            token_env=config.dr_token_env,
            rubric_rollouts=config.rubric_rollouts,
            seed=config.seed,
        )

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        async with asyncio.TaskGroup() as tg:
            for _ in range(self.config.n):
                tg.create_task(agents.agent.run(task))

    async def finalize(self, task: vf.Task, episode: vf.Episode) -> None:
        await finalize_episode(self.reward, task, episode)


def load_environment(**env: object) -> DynamicRubricEnv:
    """The environment with the bundled prompts; ``env`` sets ``DynamicRubricEnvConfig`` fields
    (``n``, ``dr_url``, ``dr_token_env``, ``rubric_rollouts``, ``seed``, ``agent``, ...)."""
    config = vf.resolve_env_config({**env, "taskset": {"id": ENV_ID}})
    return vf.load_environment(config)
