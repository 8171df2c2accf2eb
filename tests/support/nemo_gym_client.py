"""NeMo Gym's side of tests/integration/test_nemo_gym_verify.py, run by the nemo-gym 0.4.0 environment's Python 3.12
(.venv-nemo-gym, infra/nemo-gym/install.sh), never by the project's: it imports nemo-gym and nothing of the project.

It builds every request with nemo-gym's own models, as its simple agent does (``SimpleAgentRunRequest`` for
``/seed_session``; ``SimpleAgentVerifyRequest`` = ``BaseVerifyRequest`` with the row's extra fields, ``model_dump()``
for ``/verify``), posts them over real HTTP to a running ``dr serve``, parses every 200 answer with nemo-gym's own
``BaseVerifyResponse`` (and the agent's ``SimpleAgentVerifyResponse``, which keeps extra fields), and prints one
JSON object with what came back.

    .venv-nemo-gym/bin/python tests/support/nemo_gym_client.py PLAN.json

The plan: ``{"url", "groups": [[{"name", "prompt", "task_index", "answers": [...], "duplicate_first": bool}, ...],
...], "incomplete": {"prompt", "answer"}, "bad": true}``: ``groups`` is a list of batches, each batch's groups posted
together, the batches one after the other. The members of a group are posted concurrently (each /verify waits for
its whole group); a group's first member is posted first, then (``duplicate_first``) the same body again, then the
others after a short pause, so the duplicate joins the open group. ``incomplete``: one rollout of a group that never
fills, posted alongside. ``forwarded``: one more group, through the NeMo Gym resources server the docs ship
(``run_forwarded``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import requests
from nemo_gym.base_resources_server import BaseSeedSessionResponse, BaseVerifyResponse
from nemo_gym.openai_utils import (
    NeMoGymEasyInputMessage,
    NeMoGymResponse,
    NeMoGymResponseCreateParamsNonStreaming,
    NeMoGymResponseOutputMessage,
    NeMoGymResponseOutputText,
    NeMoGymResponseReasoningItem,
    NeMoGymSummary,
)
from pydantic import ValidationError
from responses_api_agents.simple_agent.app import (
    SimpleAgentRunRequest,
    SimpleAgentVerifyRequest,
    SimpleAgentVerifyResponse,
)


def create_params(prompt: str) -> NeMoGymResponseCreateParamsNonStreaming:
    return NeMoGymResponseCreateParamsNonStreaming(
        input=[NeMoGymEasyInputMessage(role="user", content=prompt)], temperature=1.0, max_output_tokens=64
    )


def rollout(answer: str, k: int) -> NeMoGymResponse:
    """A policy's Responses API answer: a reasoning item (left out of the answer text) and the message."""
    return NeMoGymResponse(
        id=f"resp_{k}",
        created_at=1_700_000_000,
        model="policy",
        object="response",
        output=[
            NeMoGymResponseReasoningItem(id=f"rs_{k}", summary=[NeMoGymSummary(text="thinking", type="summary_text")]),
            NeMoGymResponseOutputMessage(
                id=f"msg_{k}", content=[NeMoGymResponseOutputText(annotations=[], text=answer)]
            ),
        ],
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
    )


def verify_body(prompt: str, answer: str, task_index: int | None, k: int) -> dict:
    row = {"expected_answer": "n/a", "dataset_row": {"source": "test", "k": k}}
    if task_index is not None:
        row |= {"_ng_task_index": task_index, "_ng_rollout_index": k}
    request = SimpleAgentVerifyRequest.model_validate(
        {"responses_create_params": create_params(prompt), "response": rollout(answer, k), **row}
    )
    return request.model_dump()  # what the simple agent posts


def post(url: str, body) -> dict:
    r = requests.post(url, json=body, timeout=120)
    out = {"status": r.status_code, "json": r.json()}
    if r.status_code == 200 and url.endswith("/verify"):
        try:
            base = BaseVerifyResponse.model_validate(r.json())
            agent = SimpleAgentVerifyResponse.model_validate(r.json())
        except ValidationError as exc:
            out["model_error"] = str(exc)
        else:
            out["reward"] = base.reward
            out["response_text"] = base.response.output[-1].content[0].text
            out["prompt"] = base.responses_create_params.input[0].content
            out["extra"] = {k: v for k, v in agent.model_dump().items() if k not in BaseVerifyResponse.model_fields}
            sent = NeMoGymResponseCreateParamsNonStreaming.model_validate(body["responses_create_params"])
            out["echo_equal"] = (
                base.responses_create_params == sent
                and base.response == NeMoGymResponse.model_validate(body["response"])
            )
    return out


def run_group(url: str, group: dict, results: dict) -> list[threading.Thread]:
    bodies = [verify_body(group["prompt"], a, group.get("task_index"), k) for k, a in enumerate(group["answers"])]
    order = [0, 0] if group.get("duplicate_first") else [0]
    order += list(range(1, len(bodies)))
    slots: list = [None] * len(order)
    results[group["name"]] = slots

    def one(i: int, k: int) -> None:
        slots[i] = {"member": k, **post(f"{url}/verify", bodies[k])}

    threads = []
    for i, k in enumerate(order):
        t = threading.Thread(target=one, args=(i, k))
        t.start()
        threads.append(t)
        time.sleep(0.3 if i + 1 < len(order) and order[i + 1] != 0 else 0.05)
    return threads


FORWARDER = Path(__file__).resolve().parents[2] / "infra/nemo-gym/resources_servers/dynamicrubric/app.py"


def run_forwarded(url: str, group: dict) -> list[dict]:
    """A group through the NeMo Gym resources server the docs ship (infra/nemo-gym/resources_servers/dynamicrubric):
    its ``verify`` called as NeMo Gym's app calls it, with its own request model, concurrently for every member."""
    spec = importlib.util.spec_from_file_location("dynamicrubric_app", FORWARDER)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(mod)
    config = mod.DynamicRubricConfig(
        host="127.0.0.1", port=1, entrypoint="app.py", name="dynamicrubric", dr_serve_url=url, timeout_s=60
    )
    server = mod.DynamicRubricResourcesServer.model_construct(config=config, server_client=None)
    bodies = [verify_body(group["prompt"], a, group.get("task_index"), k) for k, a in enumerate(group["answers"])]

    async def go() -> list[dict]:
        answers = await asyncio.gather(
            *(server.verify(mod.DynamicRubricVerifyRequest.model_validate(b)) for b in bodies)
        )
        return [
            {
                "member": k,
                "status": 200,
                "json": a.model_dump(mode="json"),
                "reward": a.reward,
                "echo_equal": a.response == NeMoGymResponse.model_validate(bodies[k]["response"]),
            }
            for k, a in enumerate(answers)
        ]

    return asyncio.run(go())


def main(plan: dict) -> dict:
    url = plan["url"]
    out: dict = {}
    seed = SimpleAgentRunRequest.model_validate({"responses_create_params": create_params("seed"), "row": 1})
    s = post(f"{url}/seed_session", seed.model_dump())
    if s["status"] == 200:
        BaseSeedSessionResponse.model_validate(s["json"])
    out["seed_session"] = s
    groups: dict = {}
    threads = []
    if plan.get("incomplete"):
        inc = plan["incomplete"]
        t = threading.Thread(
            target=lambda: out.__setitem__(
                "incomplete", post(f"{url}/verify", verify_body(inc["prompt"], inc["answer"], None, 0))
            )
        )
        t.start()
        threads.append(t)
    for batch in plan["groups"]:  # a list of groups posted together; the batches one after the other
        batch_threads = [t for g in batch for t in run_group(url, g, groups)]
        for t in batch_threads:
            t.join()
    if plan.get("forwarded"):
        groups[plan["forwarded"]["name"]] = run_forwarded(url, plan["forwarded"])
    out["groups"] = groups
    if plan.get("bad"):
        body = verify_body("bad", "x", None, 0)
        no_response = {k: v for k, v in body.items() if k != "response"}
        wrong_input = json.loads(json.dumps(body))
        wrong_input["responses_create_params"]["input"] = 5
        no_text = json.loads(json.dumps(body))
        no_text["responses_create_params"]["input"] = [{"role": "user", "content": "   ", "type": "message"}]
        out["bad"] = {
            "no_response": post(f"{url}/verify", no_response),
            "wrong_input": post(f"{url}/verify", wrong_input),
            "no_text": post(f"{url}/verify", no_text),
        }
    for t in threads:
        t.join()
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(main(json.load(f))))
