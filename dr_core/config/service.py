"""What a reward service is told: limits on what it accepts, how it batches, how long a group may stay open, and
where its lineage goes. Defaults are what ``dr serve`` runs with; every field is a ``dr serve`` option.

    python -c "from dr_core.config.service import ServiceSettings; print(ServiceSettings())"
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dr_core.constants import SEGMENT_PATTERN


class ServiceSettings(BaseModel):
    """The service's knobs (immutable once it runs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(
        "service",
        pattern=SEGMENT_PATTERN,
        description="run_id of the lineage rows (stage 'service', round 0). One service process per "
        "run id: at start it sweeps the batches of that run id that never committed.",
    )
    rubric_rollouts: int = Field(
        1,
        ge=1,
        le=8,
        description="rubrics per set for /v1/rewards and /get_reward "
        "(a member's reward is the mean of its scores over them)",
    )
    rubric_temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature of the generator")
    rubric_max_tokens: int = Field(512, ge=16, le=4096, description="longest rubric the generator may write")
    group_size: int = Field(
        4, ge=2, le=64, description="/get_reward (OpenRLHF): responses per prompt that form one set"
    )
    group_timeout_s: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="longest wait for a group's last member; then every waiting member gets 504 group_incomplete",
    )
    max_open_groups: int = Field(1024, ge=1, description="groups collecting members at once (more: 503 busy)")
    batching: Literal["continuous", "coalesce"] = Field(
        "continuous",
        description="continuous: each set runs on its own and is answered when its own checks are done (the engines "
        "batch concurrent sets continuously); coalesce: concurrent sets form one engine batch, answered together",
    )
    max_batch_sets: int = Field(
        32, ge=1, le=1024, description="most sets scored at once (continuous) or in one engine batch (coalesce)"
    )
    batch_wait_s: float = Field(
        0.02,
        ge=0.0,
        le=5.0,
        description="coalesce only: how long the worker waits for more sets after the first before it starts a batch",
    )
    max_queue_sets: int = Field(4096, ge=1, description="sets waiting for the engines at most (more: 503 busy)")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="largest request body (more: 413)")
    max_responses: int = Field(
        64,
        ge=1,
        le=1024,
        description="most responses in one set: /v1/score-set's responses, /v1/rewards' group_size (more: 422)",
    )
    max_queries: int = Field(
        4096,
        ge=1,
        le=65536,
        description="/get_reward (OpenRLHF): most queries (samples) in one request, so at most that many sets "
        "(more: 422)",
    )
    max_text_chars: int = Field(32_000, ge=1, description="longest prompt or response, characters (more: 422)")
    verdict_cache_entries: int = Field(
        500_000,
        ge=0,
        le=100_000_000,
        description="verdicts held across requests (the same criterion on the same response is asked once; about "
        "150 bytes each, least recently used evicted); 0 turns the cache off",
    )
    answers_in_memory: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="answers kept in memory for replays, the most recent; an older one is read back from its batch's "
        "requests part when its request id comes again (per request id the ledger keeps a few hundred bytes)",
    )
    memory_trim_interval_s: float = Field(
        30.0,
        ge=0,
        description="seconds between malloc_trim(0) calls, which give the memory a batch freed back to the system "
        "(glibc keeps it otherwise, and the resident set ratchets up to the largest batch seen); 0 turns it off",
    )
