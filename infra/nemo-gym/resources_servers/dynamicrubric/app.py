"""A NeMo Gym resources server that is ``dr serve``: copy this folder to ``resources_servers/dynamicrubric/`` in the
directory you run NeMo Gym from (docs/how-to/reward-service.md, section NeMo Gym).

NeMo Gym starts every resources server of its config as a process of its own; this one owns nothing. ``/verify``
posts NeMo Gym's body unchanged to ``dr serve``'s ``/verify``, which holds the rollout until ``--group-size``
rollouts of its prompt and task have arrived, scores them as one set and answers ``BaseVerifyResponse`` (the request
echoed, ``reward``, and the service's ``request_id``, ``group_id``, ``rubric_id``, ``set_id``, ``unscorable``). An
error of the service (504 ``group_incomplete``, 422, 503) is raised with its status and JSON body.
``/seed_session`` and ``/aggregate_metrics`` are NeMo Gym's own (``SimpleResourcesServer``).
"""

import os
from typing import Optional

import aiohttp
from fastapi import HTTPException
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import ConfigDict


class DynamicRubricConfig(BaseResourcesServerConfig):
    dr_serve_url: str  # e.g. http://reward-box:8321
    dr_serve_token_env: Optional[str] = "DR_SERVE_TOKEN"  # the bearer token's environment variable, if set
    timeout_s: float = 900.0  # longer than dr serve's --group-timeout plus a batch


class DynamicRubricVerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")  # the row's own fields, _ng_task_index, ...: sent on to dr serve


class DynamicRubricVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")


class DynamicRubricResourcesServer(SimpleResourcesServer):
    config: DynamicRubricConfig

    async def verify(self, body: DynamicRubricVerifyRequest) -> DynamicRubricVerifyResponse:
        token = os.environ.get(self.config.dr_serve_token_env or "")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            url = f"{self.config.dr_serve_url.rstrip('/')}/verify"
            async with session.post(url, json=body.model_dump(mode="json"), headers=headers) as r:
                answer = await r.json(content_type=None)
                if r.status != 200:
                    raise HTTPException(status_code=r.status, detail=answer)
        return DynamicRubricVerifyResponse.model_validate(answer)


if __name__ == "__main__":
    DynamicRubricResourcesServer.run_webserver()
